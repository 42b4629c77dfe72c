"""The engine on this machine, without a server or Redis (``bbkb bench``).

Each strategy runs on a problem shipped with the package (a data set's rows, or a test function
on scrambled Sobol candidates, values rescaled to [0, 1] with N(0, 0.01^2) noise) in the papers'
synchronous protocol: ask the rest of the batch, evaluate it, tell every value. Printed per
strategy: the engine's seconds (ask and tell only) and steps per second, batches, the final
dictionary size and the regret ratio against uniform sampling (BBKB paper, Section 5).
The benchmarks/ scripts of a source checkout go further (every figure of the README).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

STRATEGIES = ("bbkb", "bkb", "gp-ucb", "gp-bucb", "thompson", "uniform", "gssbo", "go-ucb")


def problem_of(name: str, candidates: int) -> Any:
    """A data set's rows as they are (the engine scales them), or a test function."""
    import numpy as np

    from .problems import DATASETS, Problem, dataset_problem, function_problem

    if name in DATASETS:
        return dataset_problem(name, standardize=False)
    base = function_problem(name, n_candidates=candidates)
    span = float(np.ptp(base.values))
    values = (base.values - base.values.min()) / (span if span > 0 else 1.0)
    return Problem(base.name, base.candidates, values, 0.01)


@dataclass
class Simulation:
    """One run of the synchronous protocol (:func:`simulate`): the arms pulled, in order, and
    the engine's wall-clock and CPU seconds (ask and tell only, never the objective), at the
    end and at step ``mark``."""

    arms: np.ndarray
    seconds: float
    cpu_seconds: float
    mark_seconds: float = math.nan
    mark_cpu_seconds: float = math.nan


def simulate(problem: Any, engine: Any, steps: int, rng: np.random.Generator,
             mark: int | None = None) -> Simulation:
    """Sync protocol: ask the rest of the batch, evaluate it, tell every value, repeat.

    ``ask(n)`` returns at most the rest of the current batch (nothing is left pending across
    batches since every value is told at once), so capping n at ``mark`` selects exactly what
    ``ask_batch`` would while letting the clock stop at step ``mark`` precisely."""
    import numpy as np

    arms: list[int] = []
    out = Simulation(np.empty(0, dtype=np.int64), 0.0, 0.0)
    while len(arms) < steps:
        target = mark if mark is not None and len(arms) < mark else steps
        started, cpu_started = time.perf_counter(), time.process_time()
        selections = engine.ask(target - len(arms))
        out.seconds += time.perf_counter() - started
        out.cpu_seconds += time.process_time() - cpu_started
        if not selections:
            raise RuntimeError(f"engine proposed nothing at step {len(arms)} "
                               f"(waiting={engine.waiting!r})")
        values = [problem.observe(s.arm, rng) for s in selections]
        started, cpu_started = time.perf_counter(), time.process_time()
        for selection, value in zip(selections, values, strict=True):
            engine.tell(selection.t, value)
        out.seconds += time.perf_counter() - started
        out.cpu_seconds += time.process_time() - cpu_started
        arms.extend(s.arm for s in selections)
        if len(arms) == mark:
            out.mark_seconds, out.mark_cpu_seconds = out.seconds, out.cpu_seconds
    out.arms = np.asarray(arms)
    return out


def run(problem: Any, strategy: str, steps: int, seed: int) -> dict[str, Any]:
    """One run of ``strategy`` with the engine's defaults in sync mode (a batch's values are
    all told before the next batch opens): timings and regret ratio."""
    import numpy as np

    from .engine import Strategy

    engine = Strategy(problem.candidates, strategy=strategy, seed=seed, mode="sync")
    result = simulate(problem, engine, steps, np.random.default_rng([seed, 12345]))
    seconds = result.seconds
    return {"strategy": strategy, "seed": seed, "steps": steps, "seconds": seconds,
            "steps_per_second": steps / seconds if seconds > 0 else float("inf"),
            "batches": len(engine.batches),
            "dictionary": engine.batches[-1].dictionary_size if engine.batches else 0,
            "regret_ratio": float(problem.regret_ratio(result.arms)[-1])}


def main(args: argparse.Namespace) -> int:
    import numpy as np
    from tqdm import tqdm

    try:
        problem = problem_of(args.problem, args.candidates)
    except ValueError as exc:  # an unknown function, too few candidates for its optima
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runs = [(s, seed) for s in args.strategies for seed in range(args.seeds)]
    results = []
    with tqdm(runs, desc=f"bench {problem.name}", unit="run", file=sys.stderr,
              disable=args.quiet) as bar:
        for strategy, seed in bar:
            bar.set_postfix(strategy=strategy, seed=seed)
            results.append(run(problem, strategy, args.T, seed))
    if args.json:
        print(json.dumps({"problem": problem.name, "candidates": problem.n_arms,
                          "dim": problem.dim, "runs": results}, indent=2))
        return 0
    print(f"{problem.name}: {problem.n_arms} candidates x {problem.dim}, T = {args.T}, "
          f"{args.seeds} seed(s); means over seeds")
    header = ("strategy", "engine s", "steps/s", "batches", "dictionary", "regret ratio")
    print("  ".join(f"{h:>12}" for h in header))
    for strategy in args.strategies:
        mine = [r for r in results if r["strategy"] == strategy]
        mean = {k: float(np.mean([r[k] for r in mine]))
                for k in ("seconds", "steps_per_second", "batches", "dictionary", "regret_ratio")}
        print(f"{strategy:>12}  {mean['seconds']:12.2f}  {mean['steps_per_second']:12.0f}  "
              f"{mean['batches']:12.1f}  {mean['dictionary']:12.1f}  "
              f"{mean['regret_ratio']:12.4f}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = sub.add_parser(
        "bench", help="time the engine's strategies on this machine (no server)",
        description=__doc__.split("\n\n")[0] + " " + " ".join(__doc__.split("\n\n")[1].split()))
    bench.add_argument("--problem", default="abalone",
                       help="a data set (abalone, cadata) or a test function (branin, "
                            "hartmann6, levy, ...; default abalone)")
    bench.add_argument("--strategies", nargs="+", default=["bbkb", "bkb", "uniform"],
                       choices=STRATEGIES, metavar="STRATEGY",
                       help=f"default: bbkb bkb uniform; any of {', '.join(STRATEGIES)}")
    bench.add_argument("--T", type=_steps, default=2000, help="steps per run (default 2000)")
    bench.add_argument("--seeds", type=_steps, default=1, help="runs per strategy (default 1)")
    bench.add_argument("--candidates", type=_steps, default=2000,
                       help="Sobol candidates of a test function (default 2000)")
    bench.add_argument("--json", action="store_true", help="every run as JSON on stdout")
    bench.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    bench.set_defaults(run=main)


def _steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value
