"""The grammar of a study's objective string, shared by the server, the workers and the dashboard.

Workers resolve the string (``workers.objectives.resolve``); the server cannot import a user's
module, but it can refuse what no worker could resolve, before any trial is spent on it:

- ``package.module:function``: dotted identifiers on both sides of one colon, from a module
  allowed by ``BBKB_OBJECTIVE_MODULES`` (comma-separated module prefixes: ``mylab`` allows
  ``mylab`` and ``mylab.objectives``, not ``mylabx``; ``*`` allows any module). Empty (the
  default): no import path at all, only the built-ins below. A worker imports and calls the
  function, so the list is checked by the server (``Settings.objective_modules``) and again, on
  its own list, by every worker before any import;
- ``function:<name>``: a test function of :mod:`service.problems` (``?dim=`` a positive integer);
- ``dataset:<name>``: one of :data:`service.problems.DATASETS`;
- options after ``?`` are finite numbers: ``delay`` (seconds, >= 0 and below the job timeout:
  a dispatch's ``job_timeout``, or for a study's objective the longest one a dispatch accepts,
  :data:`MAX_JOB_TIMEOUT`; any kind), ``noise``
  (sd, >= 0; functions and data sets), ``dim`` (an integer in [1, MAX_FUNCTION_DIM];
  functions). A new objective (``strict``: a study or dispatch request) gives each once and no
  other key: a misspelt option would do nothing. Stored ones are read as before these checks
  (other keys ignored, the last of a repeated one), so that no stored study stops working.

This module imports only :mod:`service.errors` and :mod:`service.problems` (no web stack), so a
worker can use it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import NamedTuple, NoReturn
from urllib.parse import parse_qsl

from .errors import Invalid
from .problems import DATASETS, FUNCTIONS, get_function, load_dataset

#: Largest ``dim`` of a built-in test function (its box and candidates are dim-sized arrays).
MAX_FUNCTION_DIM = 10_000
#: The longest ``job_timeout`` a dispatch accepts (seconds; schemas.DispatchRequest's bound).
MAX_JOB_TIMEOUT = 7 * 86400
FORMS = "'package.module:function', 'function:<name>' or 'dataset:<name>'"
#: The setting (server and workers) that lists the modules import-path objectives may come from.
MODULES_VARIABLE = "BBKB_OBJECTIVE_MODULES"
#: Options that must be finite and >= 0.
NONNEGATIVE = ("delay", "noise")
#: The options each kind of objective reads (an import path's function gets only its inputs).
OPTIONS = {"function": ("delay", "noise", "dim"), "dataset": ("delay", "noise"),
           "import": ("delay",)}


class ParsedObjective(NamedTuple):
    """An objective string taken apart: ``kind`` is ``"function"``, ``"dataset"`` or
    ``"import"``; ``name`` the function or data set name, or ``"package.module:function"``."""

    kind: str
    name: str
    options: dict[str, float]

    @property
    def module(self) -> str | None:
        """The module of an import path (None for a built-in)."""
        return self.name.partition(":")[0] if self.kind == "import" else None


def parse_objective(spec: str, *, strict: bool = False) -> ParsedObjective:
    """Take ``spec`` apart; ValueError (``"objective '<spec>': <why>"``) if no worker could
    resolve it, or, if ``strict``, if it gives an option twice or one its kind does not read.
    Says nothing about whether an import path's module is allowed (:func:`check_module`)."""
    if not isinstance(spec, str):
        raise ValueError(f"objective {spec!r}: expected a string, {FORMS}")
    head, _, query = spec.partition("?")
    kind, colon, name = head.partition(":")
    if not colon or not kind or not name:
        _bad(spec, f"expected {FORMS}")
    options = _options(spec, query, OPTIONS.get(kind, OPTIONS["import"]) if strict else None)
    if kind == "function":
        if name.strip().lower().replace("-", "_") not in FUNCTIONS:
            _bad(spec, f"unknown test function {name!r}; choose one of {sorted(FUNCTIONS)}")
    elif kind == "dataset":
        if name not in DATASETS:
            _bad(spec, f"unknown data set {name!r}; choose one of {list(DATASETS)}")
    elif all(part.isidentifier() for part in (*kind.split("."), *name.split("."))):
        if name.startswith("_") or "._" in name:  # __init__, _private: not objectives
            _bad(spec, f"{name!r} is a private name; an objective is a public function")
        return ParsedObjective("import", f"{kind}:{name}", options)
    else:
        _bad(spec, f"{head!r} is not an import path 'package.module:function'")
    return ParsedObjective(kind, name, options)


def _options(spec: str, query: str, known: tuple[str, ...] | None) -> dict[str, float]:
    """The options as numbers; with ``known``, each once and none other."""
    try:
        pairs = parse_qsl(query, strict_parsing=bool(query), max_num_fields=20)
    except ValueError as exc:
        _bad(spec, f"options after '?' must be key=number pairs ({exc})")
    options: dict[str, float] = {}
    for key, text in pairs:
        if known is not None and key not in known:
            _bad(spec, f"unknown option {key!r}; this objective takes {', '.join(known)}")
        if known is not None and key in options:
            _bad(spec, f"option {key} is given twice")
        try:
            options[key] = float(text)
        except ValueError:
            _bad(spec, f"options after '?' must be key=number pairs, got {key}={text!r}")
    dim = options.get("dim")
    if dim is not None and not (dim.is_integer() and 1 <= dim <= MAX_FUNCTION_DIM):
        _bad(spec, f"dim must be an integer in [1, {MAX_FUNCTION_DIM}], got {dim:g}")
    for key, value in options.items():
        if not math.isfinite(value):
            _bad(spec, f"option {key} must be a finite number, got {value:g}")
    for key in NONNEGATIVE:
        if options.get(key, 0.0) < 0:
            _bad(spec, f"option {key} must be >= 0, got {options[key]:g}")
    return options


def _bad(spec: str, why: str) -> NoReturn:
    raise ValueError(f"objective {spec!r}: {why}")


# --- the allow-list of modules ----------------------------------------------------------------

def parse_modules(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``BBKB_OBJECTIVE_MODULES`` as a tuple of module prefixes (``*`` = any module); a string
    is split at commas (blanks around entries ignored; empty or blank: no module). ValueError
    if an entry is neither a dotted identifier nor ``*``."""
    if value is None:
        return ()
    if isinstance(value, str):
        entries = [] if not value.strip() else [entry.strip() for entry in value.split(",")]
    else:
        entries = [str(entry).strip() for entry in value]
    for entry in entries:
        if entry != "*" and not all(part.isidentifier() for part in entry.split(".")):
            raise ValueError(
                f"{MODULES_VARIABLE}: {entry!r} is not a module prefix (a dotted identifier "
                "such as 'mylab' or 'mylab.objectives') nor '*'; expected comma-separated "
                "entries, e.g. 'mylab,otherlab.objectives'")
    return tuple(dict.fromkeys(entries))


def modules_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The list of this process's environment (how a worker reads it); ValueError if bad."""
    return parse_modules((os.environ if environ is None else environ).get(MODULES_VARIABLE))


def module_allowed(module: str, allowed: Iterable[str]) -> bool:
    """Whether ``module`` is one of the prefixes or a submodule of one (``*``: any module)."""
    return any(prefix == "*" or module == prefix or module.startswith(prefix + ".")
               for prefix in allowed)


def check_module(parsed: ParsedObjective, spec: str, allowed: Iterable[str],
                 where: str = "the server") -> None:
    """ValueError naming the module and how to allow it, if ``parsed`` is an import path
    whose module ``allowed`` does not list."""
    module = parsed.module
    allowed = tuple(allowed)
    if module is None or module_allowed(module, allowed):
        return
    listed = (f"only modules under {', '.join(repr(a) for a in allowed)} and the built-ins"
              if allowed else f"{MODULES_VARIABLE} is empty: only the built-ins")
    raise ValueError(
        f"objective {spec!r}: module {module!r} is not allowed on {where} ({listed} "
        "'function:<name>' and 'dataset:<name>'); to allow it, add the module or a parent "
        f"package to {MODULES_VARIABLE} (comma-separated module prefixes, '*' for any) on the "
        "server and on the workers")


def check_objective(spec: str, modules: Iterable[str], *, new: bool = False,
                    job_timeout: int | None = None) -> None:
    """Raise :class:`Invalid` (field ``objective``) if no worker could resolve ``spec`` or if its
    module is not in ``modules`` (the server's ``Settings.objective_modules``); a ``new`` one (a
    request's, not a stored one) is parsed ``strict``. Its ``delay`` must be below
    ``job_timeout`` (a dispatch's) or, for a ``new`` one without it, below
    :data:`MAX_JOB_TIMEOUT`: every evaluation would otherwise be stopped by its job's timeout
    (or, beyond what a timestamp holds, fail with an OverflowError)."""
    try:
        parsed = parse_objective(spec, strict=new)
        check_module(parsed, spec, modules)
    except ValueError as exc:
        _refuse(str(exc))
    if job_timeout is not None:
        _check_delay(spec, parsed, job_timeout, "the dispatch's job_timeout",
                     f"; give a smaller delay or a larger job_timeout (at most "
                     f"{MAX_JOB_TIMEOUT})")
    elif new:
        _check_delay(spec, parsed, MAX_JOB_TIMEOUT, "the longest job_timeout a dispatch takes")


def _check_delay(spec: str, parsed: ParsedObjective, limit: int, what: str,
                 hint: str = "") -> None:
    """Refuse a ``delay`` that is not below ``limit`` seconds (``what`` names the limit)."""
    delay = parsed.options.get("delay", 0.0)
    if delay >= limit:
        _refuse(f"objective {spec!r}: option delay ({delay:g} s) must be below {what} "
                f"({limit} s): every evaluation would be stopped before it ends{hint}")


def check_fits(spec: str, n_candidates: int, dim: int) -> None:
    """Raise :class:`Invalid` (field ``objective``) if a built-in objective cannot score the
    study's candidates: a test function of another dimension (every trial would fail), or a
    data set whose rows they are not (it scores row ``candidate``: trials would complete with
    the values of unrelated rows). Import paths are the user's to match."""
    try:
        parsed = parse_objective(spec)
    except ValueError as exc:
        _refuse(str(exc))
    if parsed.kind == "function":
        wanted = parsed.options.get("dim")
        if wanted is not None and int(wanted) != dim:
            _refuse(f"objective {spec!r} evaluates {int(wanted)}-dimensional points; the "
                    f"study's candidates have {dim} columns")
        try:
            get_function(parsed.name, dim)
        except ValueError as exc:
            _refuse(f"objective {spec!r}: {exc} (the study's candidates have {dim} columns)")
    elif parsed.kind == "dataset":
        rows, columns = load_dataset(parsed.name)[0].shape
        if (n_candidates, dim) != (rows, columns):
            _refuse(f"objective {spec!r} scores each candidate by its row index in the data "
                    f"set: the study's candidates must be its {rows} x {columns} features, not "
                    f"{n_candidates} x {dim}")


def _refuse(message: str) -> NoReturn:
    raise Invalid(message, field="objective")
