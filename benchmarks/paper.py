"""Reproduce Section 5 of Calandriello et al. (ICML 2020), "Near-linear time Gaussian process
optimization with adaptive batching and resparsification" (BBKB), on Abalone and Cadata.

Protocol (paper Section 5 and Appendix D.1)
-------------------------------------------
* Every data-set row is an arm; its value is the regression target rescaled to [0, 1]; each
  evaluation adds N(0, xi^2) noise with xi = 0.01 (the engine's ``noise`` is the same xi, used in
  beta). Runs are synchronous: ask the rest of the current batch, evaluate it, tell every value,
  repeat until T selections (``common.simulate``).
* Metric: regret ratio R_t / R_t^unif, where R_t^unif = t (f* - mean f) is the *expected* regret
  of the uniform policy (closed form, not a sampled run). Reported as mean and Student-t 95%
  interval over seeds, at t = 2000 and t = T; time of the first 2000 steps counts only the engine
  calls (``ask``/``tell``), never the objective.
* As in the paper: F = 1, async-TS with a fixed batch of 30 and beta/10 (the engine applies the
  1/10), GP-BUCB with its own product rule, BBKB with Lemma 1 (Global) or Lemma 3 (GlobalLocal).
  delta = 1e-4 = 1/T for the paper's T = 10^4, kept fixed for shorter runs so that a T = 2000 run
  is exactly the prefix of the T = 10^4 run with the same seed.

Choices the paper leaves open (defaults tuned with this script, T = 2000 and 10^4)
---------------------------------------------------------------------------------
* Features are z-scored (``dataset_problem(standardize=True)``), so the paper's bandwidths
  (12.5-17.5 on raw features) do not transfer. Defaults: RBF lengthscale 4, lam = 1, C~ = 2,
  q-bar = 32 and ``explore`` = 0.1 (a multiplier on the UCB width alpha = C~ beta). The theory
  width (``--explores 1``) over-explores badly here: with f in [0, 1] and lam = 1, alpha ~ 5
  while unexplored arms have sigma~ ~ 1. The regret ratio of Global-BBKB at t = 2000 drops from
  0.81 / 0.66 (Abalone / Cadata, explore 1) to 0.12 / 0.006 (explore 0.1); explore 0.03 lets
  some seeds lock onto a poor arm. Lengthscale 3-8: similar medians (sweep below); lam in [0.01, 1]
  barely moves the regret but lam < 1 shrinks batches and slows Cadata down; C~ = 4 doubles the
  width and hurts. q-bar = 32 instead of the paper's 2: on Cadata (seeds 0-4) Global-BBKB's
  ratio at t = 2000 is 0.0086 / 0.0085 / 0.0038 / 0.0037 for q-bar 2 / 8 / 32 / 128 (22 / 29 /
  38 / 41 atoms: the inclusion probabilities saturate), and at T = 10^4 (10 seeds) 0.0026 at
  q-bar 8 -> 0.0019 at 32, at the same cost; Abalone does not move (0.107), nor do async-TS and
  epsilon-greedy. ``--explores 1 --oversampling 2`` is the paper's theory-driven setting.
* Bandwidth sweep at T = 10^4 (Cadata, Global-BBKB, q-bar 8, 10 seeds): ratio 0.0035 / 0.0022 /
  0.0026 / 0.052 / 0.0030 / 0.025 for lengthscale 2 / 3 / 4 / 6 / 8 / 12; at 6 and 12 three
  resp. one of the ten seeds lock onto a poor arm (ratio 0.17-0.21), the medians stay at
  0.002-0.004.
* Global-BBKB against GP-BUCB at t = 2000 (Cadata, these defaults, issue 2; ``--paired``):
  seeds 0-29, mean 0.0050 [0.0033, 0.0066] vs 0.0052 [0.0040, 0.0063], median 0.0040 vs 0.0040,
  BBKB lower on 19 of 30 seeds; engine CPU time 0.48 s vs 26.8 s. With seeds 200-219 and
  1000-1019 added (70 seeds) the medians are 0.0040 vs 0.0041, the 10%-trimmed means 0.0042 vs
  0.0045 (BBKB lower on 39 of 70, Wilcoxon p = 0.24), but the means 0.0106 vs 0.0072: one seed
  of each locks onto a poor arm (BBKB seed 218: 0.40, GP-BUCB seed 219: 0.17). Global-BBKB on
  seeds 1000-1199: mean 0.0047, median 0.0039, none above 0.016. A mean over tens of seeds is
  no stable statistic here: explore 0.0999 or 0.1001 instead of 0.1 changes 28-29 of 30
  trajectories and moves Global-BBKB's 30-seed mean from 0.0050 to 0.0040 / 0.0044 (median
  0.0040 -> 0.0034 / 0.0036); compare medians and paired seeds.
* Lock-in is a property of the GP model at explore 0.1, not of the Nystrom approximation: with
  the zero prior mean an unexplored arm's UCB is about alpha ~ 0.5-0.6, so an early incumbent
  above that whose neighbours do not extrapolate upwards is never left (seed 218: f = 0.758 found
  at t = 5; at t = 983, 20390 arms have sigma~^2 > 0.9 and UCB <= 0.59 < 0.773, including 1983
  better arms). With a saturated dictionary (q-bar 10^6, exact posterior) Global-BBKB's
  distribution is unchanged (seeds 0-29: mean 0.0049, median 0.0039), and at the arms pulled in
  the bad seeds 5 and 18 the sparse mean and variance equal the exact ones to 3 digits. Seed 5's
  excess (0.027) is a batch of 21 pulls of an arm with f = 0.43 whose exact posterior mean is
  0.97 (extrapolation next to the incumbent). Neither explore 0.15 (median 0.015 on seeds
  200-219), C~ = 1.5 (Abalone at T = 10^4: 0.172 vs 0.107) nor lam 0.1-0.3 is a better default.
* ``--lengthscales``, ``--lams``, ``--explores``, ``--thresholds`` (C~, also GP-BUCB's C) and
  ``--oversampling`` (q-bar) take lists: every combination is run (a sweep).
* The same configuration is shared by every strategy: explore also scales the widths of GP-UCB,
  GP-BUCB, BKB and async-TS (the engine's alpha is C~ beta for BBKB and GP-BUCB but beta for the
  sequential BKB and GP-UCB, so these explore half as much at equal explore); epsilon-greedy uses
  epsilon = 0.1 and a batch of 30 like async-TS.
* GP-UCB / GP-BUCB cost O(T^2 A); they stop at ``--exact-T`` (their t = T column is then empty).
  BKB resparsifies at every step (O(T A m^2)); ``--bkb-T`` optionally caps it the same way.
* BLAS is pinned to one thread (see ``common``), so times are single-core times; ``s@2000`` /
  ``total s`` are wall clock, ``cpu@2000`` / ``total cpu`` the process CPU time of the same engine
  calls (load-robust on a shared machine; the load average is recorded). Each finished
  run is appended to ``<out>/runs.jsonl``; ``results.json``, ``table.txt`` and the PNGs are
  written at the end.

Usage::

    python benchmarks/paper.py --quick                      # CI-size smoke run, < 60 s
    python benchmarks/paper.py                              # full run: T = 10^4, 10 seeds
    python benchmarks/paper.py --datasets cadata --strategies global-bbkb gp-bucb \\
        --T 2000 --seeds 3 --lengthscales 2 4 8 --explores 0.1 0.3 --out benchmarks/results/sw
    python benchmarks/paper.py --paired results/a/runs.jsonl results/b/runs.jsonl  # per seed
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import common  # first: pins BLAS to one thread before numpy loads
import numpy as np
from quick import apply_quick
from tqdm import tqdm

from service.engine import Strategy
from service.problems import Problem, dataset_problem

RunResult = common.RunResult

#: CLI key -> (label in tables and plots, engine overrides).
STRATEGIES: dict[str, tuple[str, dict[str, Any]]] = {
    "global-bbkb": ("Global-BBKB", {"strategy": "bbkb", "stopping_rule": "global"}),
    "globallocal-bbkb": ("GlobalLocal-BBKB", {"strategy": "bbkb", "stopping_rule": "local"}),
    "combined-bbkb": ("Combined-BBKB", {"strategy": "bbkb", "stopping_rule": "combined"}),
    "bkb": ("BKB", {"strategy": "bkb"}),
    "gp-ucb": ("GP-UCB", {"strategy": "gp-ucb"}),
    "gp-bucb": ("GP-BUCB", {"strategy": "gp-bucb"}),
    "async-ts": ("async-TS", {"strategy": "thompson", "batch_size": 30}),
    "eps-greedy": ("eps-greedy", {"strategy": "epsilon-greedy", "batch_size": 30}),
    "uniform": ("uniform", {"strategy": "uniform", "batch_size": 30}),
}
PAPER_STRATEGIES = ["global-bbkb", "globallocal-bbkb", "bkb", "gp-ucb", "gp-bucb", "async-ts",
                    "eps-greedy", "uniform"]
EXACT = ("gp-ucb", "gp-bucb")
NOISE_SD = 0.01  # xi: the noise added to observations and the engine's ``noise``
DELTA = 1e-4  # 1/T for the paper's horizon T = 10^4
MARK = 2000  # the paper times the first 2000 steps


@dataclass(frozen=True)
class RunSpec:
    """One simulated run; the fields but ``steps`` and ``seed`` define its table row."""

    dataset: str
    strategy: str
    lengthscale: float
    lam: float
    explore: float
    threshold: float
    oversampling: float
    steps: int
    seed: int

    @property
    def group(self) -> tuple[Any, ...]:
        return (self.dataset, self.strategy, self.lengthscale, self.lam, self.explore,
                self.threshold, self.oversampling)

    @property
    def label(self) -> str:
        return STRATEGIES[self.strategy][0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="CI-size run: both data sets, T=300, 1 seed, every strategy (< 60 s)")
    p.add_argument("--datasets", nargs="+", default=["abalone", "cadata"],
                   choices=["abalone", "cadata"], metavar="NAME", help="abalone and/or cadata")
    p.add_argument("--strategies", nargs="+", default=PAPER_STRATEGIES, choices=list(STRATEGIES),
                   metavar="NAME", help=f"any of {', '.join(STRATEGIES)} (default: the paper's "
                                        "eight, without combined-bbkb)")
    p.add_argument("--T", type=int, default=10_000, help="selections per run")
    p.add_argument("--seeds", type=int, default=10, help="number of seeds per configuration")
    p.add_argument("--first-seed", type=int, default=0,
                   help="seeds are first-seed .. first-seed + seeds - 1 (fresh seeds for a "
                        "validation run)")
    p.add_argument("--lengthscales", type=float, nargs="+", default=[4.0],
                   help="RBF bandwidths on z-scored features (a sweep if several)")
    p.add_argument("--lams", type=float, nargs="+", default=[1.0], help="regulariser lambda")
    p.add_argument("--explores", type=float, nargs="+", default=[0.1],
                   help="multiplier on the UCB width alpha")
    p.add_argument("--thresholds", type=float, nargs="+", default=[2.0],
                   help="batch threshold C~ (BBKB) / C (GP-BUCB)")
    p.add_argument("--oversampling", type=float, nargs="+", default=[32.0],
                   help="dictionary oversampling q-bar (the paper: 2)")
    p.add_argument("--exact-T", type=int, default=2000, help="step cap for GP-UCB and GP-BUCB")
    p.add_argument("--bkb-T", type=int, default=None, help="optional step cap for BKB")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "paper",
                   help="output directory (default: benchmarks/results/paper)")
    p.add_argument("--paired", type=Path, nargs=2, metavar=("RUNS_A", "RUNS_B"),
                   help="compare two runs.jsonl files seed by seed (paired statistics at t = "
                        "2000 and at the last common step) and exit; nothing is run")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(p, args, argv, T=300, seeds=1, exact_T=300)
    return args


def run_specs(args: argparse.Namespace) -> list[RunSpec]:
    """Every (dataset, strategy, configuration, seed) combination, with per-strategy caps."""
    specs = []
    grid = itertools.product(args.datasets, args.strategies, args.lengthscales, args.lams,
                             args.explores, args.thresholds, args.oversampling,
                             range(args.first_seed, args.first_seed + args.seeds))
    for dataset, strategy, ls, lam, explore, threshold, qbar, seed in grid:
        steps = args.T
        if strategy in EXACT:
            steps = min(steps, args.exact_T)
        if strategy == "bkb" and args.bkb_T:
            steps = min(steps, args.bkb_T)
        specs.append(RunSpec(dataset, strategy, ls, lam, explore, threshold, qbar, steps,
                             seed))
    return specs


def make_strategy(problem: Problem, spec: RunSpec) -> Strategy:
    overrides = STRATEGIES[spec.strategy][1]
    return Strategy(problem.candidates, kernel={"name": "rbf", "lengthscale": spec.lengthscale},
                    lam=spec.lam, noise=NOISE_SD, rkhs_bound=1.0, delta=DELTA,
                    batch_threshold=spec.threshold, oversampling=spec.oversampling,
                    explore=spec.explore, mode="sync", seed=spec.seed, **overrides)


def execute(specs: list[RunSpec], problems: dict[str, Problem], mark: int,
            log: Path) -> list[tuple[RunSpec, RunResult]]:
    """Run every spec in order (one tqdm bar over runs); each finished run is appended to
    ``log`` (JSON lines) at once, so a long run that is interrupted keeps what it did."""
    results = []
    log.write_text("")
    bar = tqdm(specs, unit="run", dynamic_ncols=True)
    for spec in bar:
        bar.set_postfix_str(f"{spec.dataset} {spec.label} ls={spec.lengthscale:g} "
                            f"seed={spec.seed}")
        rng = np.random.default_rng([spec.seed, 12345])  # observation noise
        problem = problems[spec.dataset]
        result = common.simulate(problem, make_strategy(problem, spec), spec.steps,
                                 min(mark, spec.steps), rng)
        results.append((spec, result))
        with log.open("a") as stream:
            stream.write(json.dumps(run_record(spec, result, problem, mark)) + "\n")
    return results


def summarise(group: list[tuple[RunSpec, RunResult]], problem: Problem, T: int,
              mark: int) -> dict[str, Any]:
    """Numbers of one configuration over its seeds (the table row and the JSON summary)."""
    spec = group[0][0]
    ratios = np.array([problem.regret_ratio(r.arms) for _, r in group])
    row: dict[str, Any] = {k: v for k, v in asdict(spec).items() if k != "seed"}
    row |= {"label": spec.label, "seeds": len(group)}
    for key, t in (("ratio_mark", mark), ("ratio_T", T)):
        if spec.steps >= t:
            mean, half = common.mean_interval(ratios[:, t - 1])
            row[key] = [float(mean), float(mean - half), float(mean + half)]
        else:
            row[key] = None
    row["median_mark"] = float(np.median(ratios[:, mark - 1])) if spec.steps >= mark else None
    batches = np.array([len(r.batch_sizes) for _, r in group])
    row |= {
        "mark_seconds": float(np.mean([r.mark_seconds for _, r in group])),
        "total_seconds": float(np.mean([r.engine_seconds for _, r in group])),
        "mark_cpu_seconds": float(np.mean([r.mark_cpu_seconds for _, r in group])),
        "total_cpu_seconds": float(np.mean([r.engine_cpu_seconds for _, r in group])),
        "batches": float(batches.mean()),
        "mean_batch_size": float(np.mean(spec.steps / batches)),
        "final_dictionary": float(np.mean([r.dictionary_sizes[-1] for _, r in group])),
    }
    return row


def group_runs(results: list[tuple[RunSpec, RunResult]]
               ) -> dict[tuple[Any, ...], list[tuple[RunSpec, RunResult]]]:
    groups: dict[tuple[Any, ...], list[tuple[RunSpec, RunResult]]] = {}
    for spec, result in results:
        groups.setdefault(spec.group, []).append((spec, result))
    return groups


def _interval(value: list[float] | None) -> str:
    if value is None:
        return "-"
    mean, lo, hi = value
    return f"{mean:.3f}" if math.isnan(lo) else f"{mean:.3f} [{lo:.3f},{hi:.3f}]"


def render_table(rows: list[dict[str, Any]], mark: int, T: int) -> str:
    """The printed table; the t = T column is dropped when T is the timing mark itself."""
    headers = ["dataset", "strategy", "ls", "lam", "expl", "C~", "q", "steps", f"RR@{mark}",
               f"med@{mark}", f"RR@{T}", f"s@{mark}", "total s", f"cpu@{mark}", "total cpu",
               "batches", "mean bs", "dict"]
    lines = []
    for r in rows:
        no_dictionary = r["strategy"] in EXACT + ("uniform",)
        dictionary = "-" if no_dictionary else f"{r['final_dictionary']:.0f}"
        lines.append([r["dataset"], r["label"], f"{r['lengthscale']:g}", f"{r['lam']:g}",
                      f"{r['explore']:g}", f"{r['threshold']:g}", f"{r['oversampling']:g}",
                      str(r["steps"]), _interval(r["ratio_mark"]),
                      "-" if r["median_mark"] is None else f"{r['median_mark']:.4f}",
                      _interval(r["ratio_T"]),
                      f"{r['mark_seconds']:.2f}", f"{r['total_seconds']:.2f}",
                      f"{r['mark_cpu_seconds']:.2f}", f"{r['total_cpu_seconds']:.2f}",
                      f"{r['batches']:.0f}", f"{r['mean_batch_size']:.1f}", dictionary])
    if T == mark:
        drop = headers.index(f"RR@{T}", headers.index(f"RR@{mark}") + 1)
        headers = headers[:drop] + headers[drop + 1:]
        lines = [line[:drop] + line[drop + 1:] for line in lines]
    return common.format_table(headers, lines)


def curve_label(spec: RunSpec, varying: list[str]) -> str:
    names = {"lengthscale": "ls", "lam": "lam", "explore": "expl", "threshold": "C~",
             "oversampling": "q"}
    extra = " ".join(f"{names[k]}={getattr(spec, k):g}" for k in varying)
    return f"{spec.label} {extra}".strip()


def varying_fields(specs: list[RunSpec]) -> list[str]:
    keys = ["lengthscale", "lam", "explore", "threshold", "oversampling"]
    return [k for k in keys if len({getattr(s, k) for s in specs}) > 1]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot_regret(dataset: str, groups: list[list[tuple[RunSpec, RunResult]]],
                problem: Problem, path: Path) -> Path:
    """Regret ratio against t per configuration: linear axis with the 95% interval of the mean
    (the paper's figure), and log axis with the range over seeds (small ratios stay visible)."""
    plt = _pyplot()
    varying = varying_fields([g[0][0] for g in groups])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for group in groups:
        curves = np.array([problem.regret_ratio(r.arms) for _, r in group])
        steps = np.arange(1, curves.shape[1] + 1)
        label = curve_label(group[0][0], varying)
        common.band_plot(axes[0], steps, curves, label, band="interval")
        common.band_plot(axes[1], steps, curves, label, band="range")
    axes[0].set(ylim=(0.0, 1.2), title=f"{dataset}: mean and 95% interval over seeds")
    axes[1].set(yscale="log", title=f"{dataset}: mean and range over seeds (log axis)")
    for ax in axes:
        ax.set(xlabel="step t", ylabel="R_t / R_t(uniform)")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_batches(dataset: str, groups: list[list[tuple[RunSpec, RunResult]]],
                 path: Path) -> Path:
    """Batch size and dictionary size of every batch (first seed of each configuration)."""
    plt = _pyplot()
    varying = varying_fields([g[0][0] for g in groups])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for group in groups:
        spec, run = group[0]
        label = f"{curve_label(spec, varying)} (seed {spec.seed})"
        if spec.strategy != "uniform":
            left.plot(run.batch_starts, run.batch_sizes, ".-", ms=2, lw=0.8, label=label)
        if spec.strategy not in EXACT + ("uniform",):
            right.plot(run.batch_starts, run.dictionary_sizes, ".-", ms=2, lw=0.8, label=label)
    left.set(xlabel="step t at batch opening", ylabel="batch size", yscale="log",
             title=f"{dataset}: batch size per batch")
    right.set(xlabel="step t at batch opening", ylabel="dictionary size m",
              title=f"{dataset}: dictionary size per batch")
    for ax in (left, right):
        if ax.get_legend_handles_labels()[0]:  # the right panel is empty for exact-only runs
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def run_record(spec: RunSpec, result: RunResult, problem: Problem, mark: int) -> dict[str, Any]:
    """Raw numbers of one run for the JSON file (ratio curve on a grid of about 200 steps)."""
    ratio = problem.regret_ratio(result.arms)
    grid = np.unique(np.r_[np.linspace(1, spec.steps, 200).astype(int), min(mark, spec.steps)])
    return asdict(spec) | {
        "engine_seconds": result.engine_seconds,
        "mark_seconds": None if math.isnan(result.mark_seconds) else result.mark_seconds,
        "engine_cpu_seconds": result.engine_cpu_seconds,
        "mark_cpu_seconds": (None if math.isnan(result.mark_cpu_seconds)
                             else result.mark_cpu_seconds),
        "ratio_t": grid.tolist(), "ratio": ratio[grid - 1].tolist(),
        "regret_final": float(problem.regret(result.arms)[-1]),
        "batch_starts": result.batch_starts, "batch_sizes": result.batch_sizes,
        "dictionary_sizes": result.dictionary_sizes,
    }


def _ratios_at(path: Path) -> dict[tuple[str, int], tuple[str, dict[int, float]]]:
    """(dataset, seed) -> (label, {t: regret ratio}) from a runs.jsonl file."""
    out = {}
    for line in path.read_text().splitlines():
        run = json.loads(line)
        label = (f"{STRATEGIES[run['strategy']][0]} C~={run['threshold']:g} "
                 f"q={run['oversampling']:g}")
        out[(run["dataset"], run["seed"])] = (label, dict(zip(run["ratio_t"], run["ratio"],
                                                              strict=True)))
    return out


def paired_report(path_a: Path, path_b: Path) -> str:
    """Seed-by-seed comparison of two runs.jsonl files (the same seeds run by two strategies or
    configurations): mean and median of each, the paired difference with its 95% interval, the
    Wilcoxon p-value, and the outlier seeds (ratio above 3x that side's median)."""
    a, b = _ratios_at(path_a), _ratios_at(path_b)
    lines = []
    for dataset in sorted({k[0] for k in a} & {k[0] for k in b}):
        seeds = sorted(s for d, s in a.keys() & b.keys() if d == dataset)
        label_a, label_b = a[(dataset, seeds[0])][0], b[(dataset, seeds[0])][0]
        common_t = set.intersection(*(set(a[(dataset, s)][1]) & set(b[(dataset, s)][1])
                                      for s in seeds))
        for t in sorted({min(MARK, max(common_t)), max(common_t)} & common_t):
            x = np.array([a[(dataset, s)][1][t] for s in seeds])
            y = np.array([b[(dataset, s)][1][t] for s in seeds])
            r = common.paired_summary(x, y)
            lines += [f"{dataset} t={t}, {r['n']} seeds: A = {label_a}, B = {label_b}",
                      f"  mean   A {r['mean_a']:.4f}  B {r['mean_b']:.4f}  "
                      f"A/B {r['ratio_of_means']:.3f}",
                      f"  median A {r['median_a']:.4f}  B {r['median_b']:.4f}",
                      f"  A - B  {r['diff']:+.4f} [{r['diff_low']:+.4f}, {r['diff_high']:+.4f}]  "
                      f"A better on {r['a_better']}/{r['n']} seeds, "
                      f"Wilcoxon p = {r['wilcoxon_p']:.2f}"]
            for name, v, other in (("A", x, y), ("B", y, x)):
                bad = [f"{s}: {v[i]:.4f} (other {other[i]:.4f})" for i, s in enumerate(seeds)
                       if v[i] > 3 * np.median(v)]
                lines.append(f"  outliers {name} (> 3x median): " + (", ".join(bad) or "none"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.paired:
        print(paired_report(*args.paired))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    mark = min(MARK, args.T)
    specs = run_specs(args)
    problems = {name: dataset_problem(name, noise_sd=NOISE_SD, standardize=True)
                for name in args.datasets}
    load_before = os.getloadavg()
    started, cpu_started = time.perf_counter(), time.process_time()
    results = execute(specs, problems, mark, args.out / "runs.jsonl")
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    load_after = os.getloadavg()
    groups = group_runs(results)
    rows = [summarise(g, problems[key[0]], args.T, mark) for key, g in groups.items()]
    table = render_table(rows, mark, args.T)
    print(table)
    print(f"\n{len(specs)} runs in {wall:.1f} s wall time, {cpu:.1f} s CPU time; engine times "
          f"are single-thread (OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}); "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after on "
          f"{os.cpu_count()} CPUs")
    paths = [args.out / "table.txt"]
    paths[0].write_text(table + "\n")
    for dataset in args.datasets:
        chosen = [g for key, g in groups.items() if key[0] == dataset]
        paths.append(plot_regret(dataset, chosen, problems[dataset],
                                 args.out / f"regret_{dataset}.png"))
        paths.append(plot_batches(dataset, chosen, args.out / f"batches_{dataset}.png"))
    raw = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
           "environment": {"python": platform.python_version(), "numpy": np.__version__,
                           "machine": platform.machine(), "cpus": os.cpu_count(),
                           "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                           "loadavg_before": load_before, "loadavg_after": load_after},
           "wall_seconds": wall, "cpu_seconds": cpu, "summary": rows,
           "runs": [run_record(s, r, problems[s.dataset], mark) for s, r in results]}
    # runs.jsonl holds the same per-run records, written as the runs finished
    paths.append(args.out / "results.json")
    paths[-1].write_text(json.dumps(raw, indent=1))
    print("wrote " + ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
