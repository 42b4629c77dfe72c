"""The cost of a kernel refit next to a resparsification (issue 8), and what the fit's
L-BFGS-B tolerances buy.

``scaling`` (the default): BBKB with the default automatic kernel on ``--candidates`` uniform
candidates in [0, 1]^d (large_ask.py's smooth objective, noise sd 0.01), ``--T`` selections
in sync batches. Per run: the refits (batches whose ``fitted_at`` moved) and their mean
milliseconds (``BatchInfo.refit_seconds``), the mean milliseconds of a resparsification step
per batch (``open_seconds - refit_seconds``: the dictionary resampling, the embeddings of all
A candidates, their variances and the means, O(A m^2 + m^3 + t m); BBKB paper, App. C,
"Complexity analysis"), the ratio of the two and both totals. A refit costs O(E n m^2) with
n <= 2000 distinct arms, m <= 128 inducing atoms and E evaluations of the bound, whatever A:
the ratio falls as 1 / A.

``tolerance``: the refits of the hyperparameters.py problems (``--problems``, T = 2000, seeds 0
and 1) captured and replayed with scipy's default L-BFGS-B tolerances and with the engine's
(``FIT_FTOL``): CPU seconds, evaluations, and how far the results moved.

    OPENBLAS_NUM_THREADS=1 python benchmarks/refit_cost.py --candidates 2000 20000 200000
    OPENBLAS_NUM_THREADS=1 python benchmarks/refit_cost.py tolerance

Figures (``scaling``, d = 8, T = 2000, seed 0; ms per refit against ms per resparsification
step; the README has the current row)::

    A         s. 21      s. 22      s. 23        s. 25        s. 32       over the run, s. 32 (s):
                                                                          refits, resparsif., run
    2000      32 / 3     18 / 1.3   11.3 / 1.5   8.8 / 1.5    4.1 / 1.8   0.03, 0.05, 0.32
    2 x 10^4  22 / 12    15 / 9.0   14.3 / 10.6  11.9 / 11.1  8.2 / 14.6  0.07, 0.95, 1.42
    2 x 10^5  33 / 163   18 / 90    19.2 / 110   15.4 / 109   10.0 / 147  0.08, 7.22, 7.70
    10^6      68 / 1034             43.5 / 953   37.1 / 930   16.4 / 1282 0.15, 123, 124 (96 b.)

(session 32: a slower machine than session 25's, whose code measured 13.0 / 2.0 and 16.2 / 16.2
at 2000 and 2 x 10^4 on it.)

(10^6 in session 23's column: session 24.) Session 32: of a refit's 12-13 ms at A = 2000 the
isotropic fit took 3-5 evaluations (1.5-2 ms) and the ARD try, rejected each time, 27-32
(about 10 ms), on the same 29 arms from the second refit on. An isotropic kernel now retries ARD
only where twice the last try's gain, grown in proportion to the arms, would pass, or once the
arms doubled (autokernel.next_ard_try): in one pair of runs 13.0 -> 5.1 ms per refit at
A = 2000 (refits 0.10 -> 0.04 s a run against 0.06 s of resparsifications) and 16.2 -> 9.1 ms
at 2 x 10^4 (0.57 of a resparsification step), the same run otherwise (29 and 65 batches, 8
refits); the table's column is a later run of all four sizes.

Session 22: a refit starts from the last fit alone (the prior's centre as a second start
always ended at the same optimum). Session 23: the gain over the incumbent's lengthscale is
profiled only for the fit kept and only where it could pass BIC, and Titsias' bound takes three
O(n m^2) products instead of five, in GPflow's stable form; at A = 2000 that took a run's 443
evaluations of the bound to 226 with the same decisions. What is left at small A is
per-evaluation overhead (about 15 numpy / LAPACK calls of 10-60 us at n = 200, m = 29) and the
ARD attempt (rejected ones converge in 9-20 evaluations: Cadata, branin10, 3 seeds). Summing
``H * d2`` for the isotropic gradient instead of contracting per dimension: 384 -> 343 us per
isotropic evaluation, 11.3 -> 10.9 ms per refit (reverted: ARD evaluations dominate). The fits
were 28% of the engine's time at A = 2000, 10% at 2 x 10^4, under 1% at 10^6. Session 25:
LAPACK's potrf / trtrs / potrs called directly instead of through scipy.linalg's checked
wrappers (7.8 against 2.8 us for a 29 x 29 Cholesky): 249 -> 170 us per evaluation at
n = m = 29, the same fits bit for bit (64 captured refits of seven problems replayed, and
hyperparameters.py's runs on Hartmann-6, Cadata and branin10, 3 seeds: identical regret ratios
and lengthscales, fit CPU -17 to -29%).

``tolerance`` (session 21): on the 110 refits of six problems (two seeds each), ``FIT_FTOL``
1e-6 against scipy's 2.2e-9 took 5-35% fewer evaluations (Cadata 1360 -> 1000, Levy 1028 -> 674,
branin10 2093 -> 1428), moved no kept / ARD decision, left the optimum within 0.001 nats and
the lengthscales within 0.4%. Looser settings (1e-4 / 1e-3) halved the fits' time with the
regret ratios unchanged over 30 seeds, but left the incumbent's profile likelihood 0.7 nats
short (a wrong BIC gain) and made refits sensitive to rounding in their inputs.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from large_ask import problem  # noqa: E402

from service.engine import Strategy, autokernel  # noqa: E402
from service.engine import hyperparameters as hyper  # noqa: E402


def scaling_row(candidates: int, dim: int, T: int, seed: int) -> list[str]:
    X, f = problem(candidates, dim, seed)
    f = (f - f.min()) / (f.max() - f.min())
    strategy = Strategy(X, strategy="bbkb", mode="sync", seed=seed)
    rng = np.random.default_rng([seed, 2])
    started = time.perf_counter()
    while strategy.t < T:
        for selection in strategy.ask_batch():
            strategy.tell(selection.t, float(f[selection.arm] + 0.01 * rng.standard_normal()))
    total = time.perf_counter() - started
    batches = strategy.batches[1:]  # the first opens on no data: nothing to resparsify
    refits = np.array([b.refit_seconds for b in batches if math.isfinite(b.refit_seconds)])
    steps = np.array([b.open_seconds - np.nan_to_num(b.refit_seconds) for b in batches])
    fit_ms, step_ms = 1e3 * refits.mean(), 1e3 * steps.mean()
    return [f"{candidates}", f"{dim}", f"{len(batches)}", f"{len(strategy.dictionary)}",
            f"{len(refits)}", f"{fit_ms:.1f}", f"{step_ms:.1f}", f"{fit_ms / step_ms:.2f}",
            f"{refits.sum():.2f}", f"{steps.sum():.2f}", f"{total:.2f}"]


def captured_fits(problems: list[str], T: int, seeds: int) -> list[tuple[str, Any, Any, dict]]:
    """(problem, X, y, keyword arguments with the generator's state) of every refit."""
    import hyperparameters as bench  # benchmarks/hyperparameters.py

    calls: list[tuple[str, Any, Any, dict]] = []
    fit, current = autokernel.fit, [""]

    def capture(X: np.ndarray, y: np.ndarray, **kwargs: Any) -> hyper.FitResult:
        calls.append((current[0], X.copy(), y.copy(),
                      kwargs | {"rng": kwargs["rng"].bit_generator.state}))
        return fit(X, y, **kwargs)

    autokernel.fit = capture  # type: ignore[assignment]
    try:
        for name in problems:
            current[0] = name
            p = bench.raw_problem(name)
            for seed in range(seeds):
                s = Strategy(p.candidates, **(bench.PAPER | {"seed": seed}))
                common.simulate(p, s, T, T, np.random.default_rng([seed, 12345]))
    finally:
        autokernel.fit = fit  # type: ignore[assignment]
    return calls


def replay(calls: list[tuple[str, Any, Any, dict]],
           ftol: float) -> list[tuple[str, float, hyper.FitResult]]:
    saved, hyper.FIT_FTOL = hyper.FIT_FTOL, ftol
    out = []
    try:
        for name, X, y, kwargs in calls:
            rng = np.random.default_rng()
            rng.bit_generator.state = kwargs["rng"]
            started = time.process_time()
            result = hyper.fit(X, y, **(kwargs | {"rng": rng}))
            out.append((name, time.process_time() - started, result))
    finally:
        hyper.FIT_FTOL = saved
    return out


def tolerance_table(problems: list[str], T: int, seeds: int) -> str:
    calls = captured_fits(problems, T, seeds)
    default = replay(calls, 2.220446049250313e-09)  # scipy's L-BFGS-B default
    engine = replay(calls, hyper.FIT_FTOL)
    rows = []
    for name in problems:
        pairs = [(a, b) for a, b in zip(default, engine, strict=True) if a[0] == name]
        same_q = [(a[2].hyperparameters, b[2].hyperparameters) for a, b in pairs
                  if len(a[2].hyperparameters.lengthscale) == len(b[2].hyperparameters.lengthscale)]
        moved = max((float(np.max(np.abs(np.log(np.divide(x.lengthscale, z.lengthscale))))))
                    for x, z in same_q) if same_q else math.nan
        rows.append([name, f"{len(pairs)}",
                     f"{sum(a[1] for a, _ in pairs):.2f} -> {sum(b[1] for _, b in pairs):.2f}",
                     f"{sum(a[2].evaluations for a, _ in pairs)} -> "
                     f"{sum(b[2].evaluations for _, b in pairs)}",
                     f"{100 * (math.exp(moved) - 1):.1f}%",
                     f"{max(abs(a[2].objective - b[2].objective) for a, b in pairs):.3f}",
                     f"{sum(a[2].significant != b[2].significant for a, b in pairs)}",
                     f"{len(pairs) - len(same_q)}"])
    return common.format_table(["problem", "refits", "cpu s (scipy -> engine)", "evaluations",
                                "max lengthscale change", "max |d objective| nats",
                                "kept changed", "ARD changed"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", nargs="?", choices=["scaling", "tolerance"], default="scaling")
    parser.add_argument("--candidates", type=int, nargs="+", default=[2000, 20000, 200000])
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--T", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=2, help="tolerance: seeds per problem")
    parser.add_argument("--problems", nargs="+",
                        default=["abalone", "cadata", "hartmann6", "levy", "branin", "branin10"])
    args = parser.parse_args(argv)
    if args.part == "tolerance":
        print(tolerance_table(args.problems, args.T, args.seeds))
        return
    headers = ["A", "d", "batches", "dictionary", "refits", "ms per refit",
               "ms per resparsification", "ratio", "refits s", "resparsifications s", "run s"]
    rows = []
    for candidates in args.candidates:
        rows.append(scaling_row(candidates, args.dim, args.T, args.seed))
        print(", ".join(f"{h} {v}" for h, v in zip(headers, rows[-1], strict=True)), flush=True)
    print(common.format_table(headers, rows))


if __name__ == "__main__":
    main()
