"""Noiseless objectives: the engine's default against ``deterministic`` (no candidate twice).

The engine's defaults are a bandit's: values observed with noise, a cumulative regret to keep
small, so UCB evaluates its incumbent again and again once nothing else looks better. On a
deterministic objective a repeat tells nothing, and what a user wants is the best value found.
Per problem (noiseless, raw values as a user would post them: -f, unnormalised), BBKB with the
engine's defaults and with ``deterministic: true`` (async, one ask at a time), and uniform
sampling without replacement (its exact expectation over 200 draws): the simple regret
(optimum - best value found) after T evaluations, mean over seeds, and the number of distinct
candidates evaluated. Candidates: ``function_problem``'s (Sobol points plus the known
minimisers) or, with ``uniform`` in the name, ``--candidates`` uniform points of the box (the
user audit's 500 on Branin, where the default evaluated one candidate 467 times in 500).
``--noise s`` adds N(0, (s x the values' range)^2) to each observation; the simple regret is then
that of the best OBSERVED trial's true value (what a study reports as its best).

    OPENBLAS_NUM_THREADS=1 python benchmarks/deterministic.py [--seeds 10] [--noise 0.01]

Figures (session 29, 10 seeds: mean simple regret after T evaluations, in the function's own
units; distinct candidates evaluated in 200, re-run 2026-11-29: the regrets the same, the default's
distinct counts moved by 02cb357 and e6e871e, load 0.5-0.8)::

    problem               variant        T=25      T=50      T=100     T=200     distinct
    branin-uniform (500)  default        0.8438    0.4265    0.3953    0.3953        23.1
                          deterministic  1.43      0.3235    0.03002   0.00177      200.0
                          uniform        1.812     0.8212    0.3444    0.1299
    branin (2000)         default        1.866     0.615     0.5705    0.5149        33.5
                          deterministic  1.168     0.2096    0         0            200.0
                          uniform        2.066     0.9521    0.4266    0.1747
    hartmann6 (2000)      default        2.149     1.845     1.734     1.734         23.8
                          deterministic  1.316     0.1183    0.1183    0            200.0
                          uniform        1.863     1.538     1.217     0.9335
    levy (2000)           default        3.341     1.346     1.124     0.9445        49.9
                          deterministic  1.555     0.8731    0.1484    0            200.0
                          uniform        1.056     0.6071    0.3221    0.156

After its first fit (20 distinct arms) the default proposes few new candidates: from T = 100 on
it is further from the optimum than uniform sampling on every row. ``deterministic`` finds the
optimum on every seed by T = 200 on the three Sobol rows, and to within 0.002 on branin-uniform.

With noise (``--noise 0.01``: sd 1% of the values' range, 3 on Branin, whose values near the
optimum differ by less; 10 seeds), the true value of the best observed trial, at T = 200:
branin-uniform default 0.86 / deterministic 0.84 / uniform 1.10; branin 1.20 / 1.01 / 1.32;
hartmann6 1.25 / 0 / 0.94; levy 1.12 / 0.40 / 0.60. Never repeating is no worse for the value
a study reports even with noise; what it gives up is the cumulative regret (the papers' metric,
issue 8's), and with a budget near the number of candidates it evaluates nearly all of them.
"""

from __future__ import annotations

import argparse

import common  # noqa: F401 - pins BLAS to one thread before numpy loads
import numpy as np

from service.engine import Strategy
from service.problems import function_problem, get_function

MARKS = (25, 50, 100, 200)


def candidates(name: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(candidates, values -f, optimum of the set) of problem ``name`` for ``seed``."""
    if name.endswith("-uniform"):
        tf = get_function(name.removesuffix("-uniform"))
        X = np.random.default_rng(seed).uniform(*tf.bounds.T, size=(n, tf.dim))
        values = -tf.fn(X)
        return X, values, float(values.max())
    problem = function_problem(name, n_candidates=n, seed=seed)
    return problem.candidates, problem.values, float(problem.values.max())


def run(X: np.ndarray, values: np.ndarray, T: int, seed: int, deterministic: bool,
        noise: float) -> tuple[np.ndarray, int]:
    """The true value of the best observed trial (what a study reports as its best) after each
    of ``MARKS`` evaluations, and the distinct arms at T; ``noise``: the sd added to each
    observation."""
    strategy = Strategy(X, strategy="bbkb", mode="async", seed=seed, deterministic=deterministic)
    rng = np.random.default_rng([seed, 1])
    observed, arms = np.empty(T), np.empty(T, dtype=np.int64)
    for t in range(T):
        (selection,) = strategy.ask(1)
        observed[t] = values[selection.arm] + noise * rng.standard_normal()
        arms[t] = selection.arm
        strategy.tell(selection.t, float(observed[t]))
    return np.array([values[arms[np.argmax(observed[:m])]] for m in MARKS]), len(set(arms))


def uniform_best(values: np.ndarray, noise: float, rng: np.random.Generator,
                 draws: int = 200) -> np.ndarray:
    """The same for uniform sampling without replacement (mean over ``draws`` runs)."""
    picks = np.array([rng.permutation(len(values))[: MARKS[-1]] for _ in range(draws)])
    observed = values[picks] + noise * rng.standard_normal(picks.shape)
    return np.array([np.take_along_axis(values[picks], np.argmax(observed[:, :m], axis=1)[:, None],
                                        axis=1).mean() for m in MARKS])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--problems", nargs="+",
                        default=["branin-uniform", "branin", "hartmann6", "levy"])
    parser.add_argument("--candidates", type=int, default=2000)
    parser.add_argument("--noise", type=float, default=0.0,
                        help="observation noise sd, as a fraction of the candidate values' range")
    args = parser.parse_args(argv)
    print(f"{'problem':20} {'variant':14} " + " ".join(f"T={m:<7}" for m in MARKS)
          + " distinct at T=200")
    for name in args.problems:
        n = 500 if name == "branin-uniform" else args.candidates
        gaps: dict[str, list[np.ndarray]] = {"default": [], "deterministic": [], "uniform": []}
        distinct: dict[str, list[int]] = {"default": [], "deterministic": []}
        for seed in range(args.seeds):
            X, values, optimum = candidates(name, n, seed)
            noise = args.noise * np.ptp(values)
            for variant in ("default", "deterministic"):
                best, arms = run(X, values, MARKS[-1], seed, variant == "deterministic", noise)
                gaps[variant].append(optimum - best)
                distinct[variant].append(arms)
            gaps["uniform"].append(
                optimum - uniform_best(values, noise, np.random.default_rng(seed)))
        label = f"{name} ({n})"
        for variant, series in gaps.items():
            cells = " ".join(f"{g:<9.4g}" for g in np.mean(series, axis=0))
            arms = f"{np.mean(distinct[variant]):8.1f}" if variant in distinct else ""
            print(f"{label:20} {variant:14} {cells} {arms}", flush=True)
            label = ""


if __name__ == "__main__":
    main()
