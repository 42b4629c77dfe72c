"""One large ask on the engine: the seconds of ``Strategy.ask(count)`` after a warm-up.

Builds the engine directly (default configuration: BBKB, automatic hyper-parameters, global
stopping rule, async mode), with ``--candidates`` uniform candidates in [0, 1]^d and a smooth
objective; asks and tells ``--warmup`` selections batch by batch (so that a kernel has been
fitted and a dictionary drawn), then times one ``ask(--count)`` with nothing told during it,
as a service request would. ``--profile`` prints the top of a cProfile of that ask.

    OPENBLAS_NUM_THREADS=1 nice -n 19 python benchmarks/large_ask.py
    OPENBLAS_NUM_THREADS=1 python benchmarks/large_ask.py --count 2000 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from service.engine import Strategy  # noqa: E402


def problem(candidates: int, dim: int, seed: int,
            objective: str = "smooth") -> tuple[np.ndarray, np.ndarray]:
    """Candidates in [0, 1]^d and an objective on them: "smooth" (two bumps), "wavy" (a sum of
    cosines, many local optima) or "noise" (independent values: nothing to fit)."""
    rng = np.random.default_rng([seed, 1])
    X = rng.random((candidates, dim))
    if objective == "noise":
        return X, rng.standard_normal(candidates)
    f = (np.exp(-np.sum((X - 0.7) ** 2, axis=1) / 0.3)
         + 0.5 * np.exp(-np.sum((X - 0.2) ** 2, axis=1) / 0.1))
    if objective == "wavy":
        f = f + 0.3 * np.cos(6.0 * X).mean(axis=1) + 0.2 * np.sin(9.0 * X[:, 0])
    return X, f


def warm(strategy: Strategy, f: np.ndarray, warmup: int, seed: int) -> None:
    """Ask and tell whole batches until ``warmup`` selections have values."""
    rng = np.random.default_rng([seed, 2])
    while strategy.t < warmup:
        for sel in strategy.ask_batch():
            strategy.tell(sel.t, float(f[sel.arm] + 0.01 * rng.standard_normal()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=20000)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--warmup", type=int, default=300, help="selections told before")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategy", default="bbkb")
    parser.add_argument("--stopping-rule", default="global")
    parser.add_argument("--objective", default="smooth", choices=("smooth", "wavy", "noise"))
    parser.add_argument("--explore", type=float, default=None, help="None: the default")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    parser.add_argument("--top", type=int, default=25, help="profile rows to print")
    args = parser.parse_args(argv)

    X, f = problem(args.candidates, args.dim, args.seed, args.objective)
    began = time.perf_counter()
    strategy = Strategy(X, strategy=args.strategy, stopping_rule=args.stopping_rule,
                        explore=args.explore, seed=args.seed)
    warm(strategy, f, args.warmup, args.seed)
    warm_seconds = time.perf_counter() - began
    hyper = strategy.hyperparameters
    print(f"A = {args.candidates}, d = {args.dim}, strategy {args.strategy} "
          f"({args.stopping_rule}), {args.objective} objective, explore "
          f"{strategy.config.explore}, seed {args.seed}")
    print(f"warm-up: {strategy.t} selections, {len(strategy.batches)} batches, "
          f"dictionary {len(strategy.dictionary)}, kernel {hyper.source} "
          f"lengthscale {tuple(round(v, 4) for v in hyper.lengthscale)}, "
          f"{warm_seconds:.2f} s")

    batches_before = len(strategy.batches)
    profiler = cProfile.Profile() if args.profile else None
    began = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    selections = strategy.ask(args.count)
    if profiler is not None:
        profiler.disable()
    seconds = time.perf_counter() - began

    new = strategy.batches[batches_before - 1:]
    reasons = Counter(b.stop_reason for b in new)
    open_seconds = sum(b.open_seconds for b in new[1:])
    arms = np.array([s.arm for s in selections])
    print(f"ask({args.count}): {seconds:.3f} s, {len(selections)} selections, "
          f"{len(np.unique(arms))} distinct arms, {len(new)} batches touched "
          f"(opening {open_seconds:.3f} s), stop reasons {dict(reasons)}")
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.top)
        print(out.getvalue())


if __name__ == "__main__":
    main()
