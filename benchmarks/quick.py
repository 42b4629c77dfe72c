"""``--quick`` for the benchmark scripts: its settings, each only where the command line gave
none (no side effects on import, unlike ``common``: ``scaling.py`` uses it too)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def apply_quick(parser: argparse.ArgumentParser, args: argparse.Namespace,
                argv: Sequence[str] | None, **values: object) -> None:
    """Set each of ``values`` on ``args`` unless its option was given in ``argv`` (None: the
    command line), even at its default: ``--quick --seeds 3 --T 2000`` runs 3 seeds at 2000."""
    actions = [action for action in parser._actions if action.dest in values]
    defaults = [action.default for action in actions]
    for action in actions:  # parsed again without defaults: what remains was given
        action.default = argparse.SUPPRESS
    try:
        given = vars(parser.parse_args(argv))
    finally:
        for action, default in zip(actions, defaults, strict=True):
            action.default = default
    for key, value in values.items():
        if key not in given:
            setattr(args, key, value)
