"""Exact-replay driver shared by the strategy tests: a random history, then live vs restored."""

from __future__ import annotations

import numpy as np

from service.engine import Selection, Strategy


def random_history(strategy: Strategy, f: np.ndarray, rng: np.random.Generator,
                   steps: int = 40) -> list[Selection]:
    """Random asks of 1-2, tells in random order, about 10% abandoned; returns what is pending."""
    pending: list[Selection] = []
    for _ in range(steps):
        if rng.random() < 0.5 or not pending:
            pending.extend(strategy.ask(int(rng.integers(1, 3))))
        else:
            sel = pending.pop(int(rng.integers(len(pending))))
            if rng.random() < 0.1:
                strategy.abandon(sel.t)
            else:
                strategy.tell(sel.t, float(f[sel.arm]))
    return pending


def assert_same_proposals(live: Strategy, restored: Strategy, pending: list[Selection],
                          f: np.ndarray, rounds: int = 4) -> None:
    """Both get the pending values, then must propose the same non-empty batches of 2."""
    assert restored.replay_mismatches == 0
    for sel in pending:
        live.tell(sel.t, float(f[sel.arm]))
        restored.tell(sel.t, float(f[sel.arm]))
    for _ in range(rounds):
        a, b = live.ask(2), restored.ask(2)
        assert a == b and a
        for sel in a:
            live.tell(sel.t, float(f[sel.arm]))
            restored.tell(sel.t, float(f[sel.arm]))
