"""GSSBO (Wei et al.) and GO-UCB (Liu & Wang, ICML 2023) benchmarked as in their papers (issue 5).

Experiments (``--experiment``):

* ``gssbo``: GSSBO vs RSSBO (random buffer) vs GP-UCB on Eggholder-2, Hartmann-6, Levy-20,
  Powell-50 and Rastrigin-100 (GSSBO paper Sec. 6.1). GP-UCB is the same pipeline with every
  observation kept (``gssbo_buffer`` null): Matern-5/2, hyper-parameters by maximum likelihood at
  every iteration, UCB with Srinivas et al.'s beta_t over the candidate set. Metrics: cumulative
  regret and cumulative engine time (ask + tell calls only). Paper: T = 1000, n0 = 20, M ~ 100.
* ``goucb``: GO-UCB vs BBKB vs GP-UCB (the engine's, hyper-parameters by issue 8) on the paper's
  f1 (the 25-unit network with every weight 1, on [-5, 5]^20: realizable), Styblinski-Tang-20 and
  Rastrigin-20 (GO-UCB paper Sec. 6.1).
* ``table``: BBKB, BKB, GP-BUCB, GSSBO and GO-UCB side by side on the same problems.

Every problem is a candidate set of ``--candidates`` scrambled-Sobol points (plus the known
optimum; f1: Sobol only) whose values are min-max rescaled to [0, 1] over the candidates (as the
BBKB paper runs, ``paper.py``), with N(0, 0.01^2) observation noise on that scale; runs are sync
and sequential unless the strategy batches (BBKB, GP-BUCB). The regret ratio is
R_T / (T (f* - mean f)), i.e. relative to the uniform policy's expected regret (invariant to the
rescaling). BLAS is pinned to one thread (``common``).

Fairness: GSSBO and GO-UCB standardise values themselves; the kernel baselines (BBKB, BKB, GP-UCB,
GP-BUCB) do not, so on raw values (Rastrigin-20 spans hundreds) their zero prior mean made every
unobserved arm look best. They get the rescaled values, automatic kernel hyper-parameters (the
engine default without a lengthscale) and ``--baseline-explore`` 0.1 (``paper.py``'s setting).
Engine time is process CPU time
(wall-clock time is inflated by other load). ``--budget`` stops a run once its engine time
exceeds that many seconds (the table's T column then says how far it got; the JSONL log keeps
regret and time every ``--checkpoint`` steps).

Usage::

    python benchmarks/literature.py --quick                  # smoke run, about a minute
    python benchmarks/literature.py                          # every experiment, paper sizes
    python benchmarks/literature.py --experiment gssbo --T 300 --seeds 2 --buffer 60 \\
        --functions hartmann6 levy20
    python benchmarks/literature.py --summarize benchmarks/results/literature/gssbo_runs.jsonl \\
        --checkpoint 100 --T 1000                            # regret / time at t = 100, 200, ...
    # issue 5 at T = 1000: one process per (function, seed) for GP-UCB-ML (--first-seed), each
    # writing <experiment>_<problem>_<method>_<seed>.progress every --checkpoint steps; then
    python benchmarks/literature.py --progress results/s3_lit/*/*.progress
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common  # noqa: I001  (pins BLAS threads before numpy is imported)
import numpy as np
from quick import apply_quick
from scipy.stats import qmc

from service.engine import Strategy
from service.engine.goucb import Network
from service.problems import Problem, function_problem

NOISE_SD = 0.01
FUNCTIONS = {"eggholder2": ("eggholder", 2), "hartmann6": ("hartmann6", 6),
             "levy20": ("levy", 20), "powell50": ("powell", 52), "rastrigin100": ("rastrigin", 100),
             "styblinski20": ("styblinski_tang", 20), "rastrigin20": ("rastrigin", 20)}
EXPERIMENTS = {
    "gssbo": (["eggholder2", "hartmann6", "levy20", "powell50", "rastrigin100"],
              ["gssbo", "rssbo", "gp-ucb-ml"]),
    "goucb": (["f1", "styblinski20", "rastrigin20"], ["go-ucb", "bbkb", "gp-ucb"]),
    "table": (["hartmann6", "levy20", "styblinski20"],
              ["bbkb", "bkb", "gp-bucb", "gssbo", "go-ucb"]),
}


@dataclass
class Run:
    problem: str
    method: str
    seed: int
    regret: np.ndarray  # cumulative regret per step
    seconds: np.ndarray  # cumulative engine CPU seconds per step (process time, 1 BLAS thread)
    wall: float = 0.0  # engine wall-clock seconds of the whole run (load-dependent)
    extra: dict[str, Any] = field(default_factory=dict)


def paper_f1(dim: int, n: int, seed: int) -> Problem:
    """GO-UCB's f1: f(x) = linear2(sigmoid(linear1(x))) with every weight and bias 1."""
    X = qmc.scale(qmc.Sobol(dim, scramble=True, seed=seed).random(n), -5 * np.ones(dim),
                  5 * np.ones(dim))
    net = Network(dim, 25)
    return Problem(f"f1_d{dim}", X, net.value(X, np.ones(net.size)), NOISE_SD)


def make_problem(name: str, n: int, seed: int) -> Problem:
    """The named problem with its values min-max rescaled to [0, 1] over the candidates."""
    if name == "f1":
        raw = paper_f1(20, n, seed)
    else:
        fn, dim = FUNCTIONS[name]
        raw = function_problem(fn, dim=dim, n_candidates=n, noise_sd=NOISE_SD, seed=seed)
    low, high = float(raw.values.min()), float(raw.values.max())
    return Problem(raw.name, raw.candidates, (raw.values - low) / (high - low), NOISE_SD)


def engine_config(method: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    gss = {"gssbo_initial": args.initial, "gssbo_buffer": args.buffer, "explore": args.explore}
    table: dict[str, dict[str, Any]] = {
        "gssbo": {"strategy": "gssbo", **gss},
        "rssbo": {"strategy": "gssbo", **gss, "gssbo_selection": "random"},
        "gp-ucb-ml": {"strategy": "gssbo", **gss, "gssbo_buffer": None},
        "go-ucb": {"strategy": "go-ucb", "horizon": args.T, "goucb_beta": args.goucb_beta},
        "bbkb": {"strategy": "bbkb", "explore": args.baseline_explore},
        "bkb": {"strategy": "bkb", "explore": args.baseline_explore},
        "gp-ucb": {"strategy": "gp-ucb", "explore": args.baseline_explore},
        "gp-bucb": {"strategy": "gp-bucb", "explore": args.baseline_explore},
    }
    return {"mode": "sync", "seed": seed, "noise": NOISE_SD} | table[method]


def simulate(problem: Problem, strategy: Strategy, steps: int, seed: int,
             budget: float = float("inf"), progress: Path | None = None,
             every: int = 100) -> Run:
    """Sync loop: ask the rest of the batch, tell every value; engine time per step.

    Time is the process CPU time of the engine calls (BLAS has one thread), which a shared,
    saturated machine inflates far less than wall-clock time. Stops early once it exceeds
    ``budget`` seconds (at the end of a batch). With ``progress``, appends a JSON line
    {t, regret, seconds} whenever t passes a multiple of ``every`` (runs cut short keep them).
    """
    rng = np.random.default_rng([seed, 4321])
    arms: list[int] = []
    seconds: list[float] = []
    clock = wall = regret = 0.0
    while len(arms) < steps and clock <= budget:
        started, cpu = time.perf_counter(), time.process_time()
        batch = strategy.ask(steps - len(arms))
        values = [problem.observe(s.arm, rng) for s in batch]
        for sel, value in zip(batch, values, strict=True):
            strategy.tell(sel.t, value)
        clock += time.process_time() - cpu  # objective calls are microseconds here
        wall += time.perf_counter() - started
        regret += float(np.sum(problem.best_value - problem.values[[s.arm for s in batch]]))
        if progress is not None and (len(arms) + len(batch)) // every > len(arms) // every:
            with progress.open("a") as stream:
                stream.write(json.dumps({"t": len(arms) + len(batch), "regret": regret,
                                         "seconds": clock}) + "\n")
        arms.extend(s.arm for s in batch)
        seconds.extend([clock] * len(batch))
    regret = np.cumsum(problem.best_value - problem.values[np.asarray(arms)])
    return Run(problem.name, "", seed, regret, np.asarray(seconds), wall)


def ratio(run: Run, problem: Problem) -> float:
    gap = problem.best_value - float(np.mean(problem.values))
    return float(run.regret[-1] / (gap * len(run.regret)))


def table_rows(runs: list[Run], problems: dict[str, Problem]) -> list[list[str]]:
    rows = []
    for (name, method) in dict.fromkeys((r.problem, r.method) for r in runs):
        group = [r for r in runs if (r.problem, r.method) == (name, method)]
        ratios = [ratio(r, problems[name]) for r in group]
        secs = [r.seconds[-1] for r in group]
        reached = min(len(r.regret) for r in group)
        rows.append([name, method, str(len(group)), str(reached),
                     f"{np.mean([r.regret[-1] for r in group]):.4g}",
                     f"{np.mean(ratios):.3f} +- " + (f"{np.std(ratios):.3f}" if len(ratios) > 1
                                                      else "n/a"),
                     f"{np.mean(secs):.1f}", f"{np.mean([r.wall for r in group]):.1f}"])
    return rows


def extrapolate(marks: np.ndarray, seconds: np.ndarray, horizon: int) -> tuple[float, float]:
    """Cumulative time at ``horizon`` from a power law c t^p fitted to the per-step time.

    The per-step time of each of the last three checkpoint intervals (at its midpoint) gives
    log c and p by least squares; the cumulative time then grows by c (T^(p+1) - t^(p+1)) / (p+1).
    Returns (p, extrapolated cumulative seconds).
    """
    mid = 0.5 * (marks[1:] + marks[:-1])[-3:]
    cost = (np.diff(seconds) / np.diff(marks))[-3:]
    p, log_c = np.polyfit(np.log(mid), np.log(cost), 1)
    t = float(marks[-1])
    return float(p), float(seconds[-1] + np.exp(log_c) * (horizon ** (p + 1) - t ** (p + 1))
                           / (p + 1))


def summarize(logs: list[Path], every: int, horizon: int) -> str:
    """Mean regret and CPU time per (problem, method) at every ``every`` steps of JSONL logs;
    groups stopped by the budget before ``horizon`` get their time extrapolated to it."""
    records = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
    rows, notes = [], []
    for key in dict.fromkeys((r["problem"], r["method"]) for r in records):
        group = [r for r in records if (r["problem"], r["method"]) == key]
        reached = min(r["T"] for r in group)
        marks = np.array(sorted({int(m) for r in group for m in r["checkpoints"]
                                 if int(m) <= reached and all(m in g["checkpoints"]
                                                              for g in group)}))
        regret = np.array([[r["checkpoints"][str(m)][0] for m in marks] for r in group]).mean(0)
        secs = np.array([[r["checkpoints"][str(m)][1] for m in marks] for r in group]).mean(0)
        for m, reg, sec in zip(marks, regret, secs, strict=True):
            if m % every == 0:
                rows.append([*key, str(len(group)), str(m), f"{reg:.4g}", f"{sec:.1f}"])
        if reached < horizon and len(marks) >= 4:
            p, total = extrapolate(marks, secs, horizon)
            notes.append(f"{key[0]} {key[1]}: stopped at t = {marks[-1]} ({secs[-1]:.1f} CPU s); "
                         f"per-step time ~ t^{p:.2f} -> about {total:.0f} CPU s at T = {horizon} "
                         f"(extrapolated)")
    table = common.format_table(["problem", "method", "seeds", "t", "mean R_t", "mean CPU s"],
                                rows)
    return "\n".join([table, *notes])


def progress_table(paths: list[Path], candidates: int, reference: str = "gp-ucb-ml") -> str:
    """Per problem, at the largest t every run of it reached (``.progress`` files of gssbo
    runs): R_t / R_t(unif) mean +- sd over seeds and mean engine CPU s per method, and each
    method's time as % of ``reference``'s."""
    runs: dict[tuple[str, str], list[dict[int, tuple[float, float]]]] = {}
    for path in paths:
        _, problem, method, _ = path.stem.rsplit("_", 3)
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        runs.setdefault((problem, method), []).append(
            {r["t"]: (r["regret"], r["seconds"]) for r in lines})
    rows = []
    for problem in dict.fromkeys(name for name, _ in runs):
        groups = {m: g for (name, m), g in runs.items() if name == problem}
        t = min(max(run) for g in groups.values() for run in g)
        values = make_problem(problem, candidates, 0).values
        gap = float(values.max() - values.mean())
        time_ref = np.mean([run[t][1] for run in groups.get(reference, [])]) \
            if reference in groups else math.nan
        for method, group in sorted(groups.items()):
            ratios = [run[t][0] / (gap * t) for run in group]
            sd = f"{np.std(ratios, ddof=1):.3f}" if len(ratios) > 1 else "n/a"
            secs = float(np.mean([run[t][1] for run in group]))
            rows.append([problem, method, str(len(group)), str(t),
                         f"{np.mean(ratios):.3f} +- {sd}",
                         f"{secs:.1f}", f"{100 * secs / time_ref:.1f}"])
    return common.format_table(["problem", "method", "seeds", "t", "R_t / R_t(unif)",
                                "engine CPU s", f"% of {reference}"], rows)


def plot(runs: list[Run], problems: dict[str, Problem], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r.problem for r in runs))
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 7), squeeze=False)
    for col, name in enumerate(names):
        for method in dict.fromkeys(r.method for r in runs if r.problem == name):
            group = [r for r in runs if (r.problem, r.method) == (name, method)]
            n = min(len(r.regret) for r in group)  # budget-stopped seeds can differ
            steps = np.arange(1, n + 1)
            common.band_plot(axes[0, col], steps, np.array([r.regret[:n] for r in group]), method)
            common.band_plot(axes[1, col], steps, np.array([r.seconds[:n] for r in group]), method)
        axes[0, col].set(title=name, ylabel="cumulative regret")
        axes[1, col].set(xlabel="step t", ylabel="cumulative engine CPU seconds")
        axes[0, col].legend(fontsize=7)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    p.add_argument("--experiment", choices=[*EXPERIMENTS, "all"], default="all")
    p.add_argument("--functions", nargs="+", choices=[*FUNCTIONS, "f1"],
                   help="override the experiment's problems")
    p.add_argument("--methods", nargs="+", help="override the experiment's methods")
    p.add_argument("--T", type=int, default=1000, help="steps per run")
    p.add_argument("--candidates", type=int, default=2000)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=0, help="seeds run: first, first + 1, ...")
    p.add_argument("--initial", type=int, default=20, help="GSSBO n0")
    p.add_argument("--buffer", type=int, default=100, help="GSSBO M")
    p.add_argument("--explore", type=float, default=1.0, help="GSSBO / GP-UCB-ML width factor")
    p.add_argument("--baseline-explore", type=float, default=0.1,
                   help="explore of BBKB, BKB, GP-UCB, GP-BUCB (paper.py's 0.1)")
    p.add_argument("--goucb-beta", type=float, default=1.0)
    p.add_argument("--budget", type=float, default=float("inf"),
                   help="stop a run once its engine CPU time exceeds this many seconds")
    p.add_argument("--checkpoint", type=int, default=100,
                   help="log regret and time every this many steps")
    p.add_argument("--summarize", type=Path, nargs="+", metavar="JSONL",
                   help="print checkpoint means of these run logs (every --checkpoint steps, "
                        "budget-stopped time extrapolated to --T) and exit")
    p.add_argument("--progress", type=Path, nargs="+", metavar="PROGRESS",
                   help="print each problem's table at the largest t all its runs reached "
                        "(gssbo runs' .progress files) and exit")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "literature")
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(p, args, argv, T=40, candidates=300, seeds=1, initial=8, buffer=16)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize, args.checkpoint, args.T))
        return
    if args.progress:
        print(progress_table(args.progress, args.candidates))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    experiments = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    for experiment in experiments:
        names, methods = EXPERIMENTS[experiment]
        if args.quick and not args.functions:
            names = names[:2]
        names, methods = args.functions or names, args.methods or methods
        problems = {n: make_problem(n, args.candidates, 0) for n in names}
        runs: list[Run] = []
        log = args.out / f"{experiment}_runs.jsonl"
        for name in names:
            problem = problems[name]
            for method in methods:
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    strategy = Strategy(problem.candidates, engine_config(method, args, seed))
                    progress = args.out / f"{experiment}_{name}_{method}_{seed}.progress"
                    progress.unlink(missing_ok=True)
                    run = simulate(problem, strategy, args.T, seed, args.budget, progress,
                                   args.checkpoint)
                    marks = np.arange(args.checkpoint, len(run.regret) + 1, args.checkpoint)
                    run.problem, run.method = name, method
                    runs.append(run)
                    with log.open("a") as stream:
                        stream.write(json.dumps({"problem": name, "method": method, "seed": seed,
                                                 "T": len(run.regret), "A": args.candidates,
                                                 "regret": float(run.regret[-1]),
                                                 "ratio": ratio(run, problem),
                                                 "seconds": float(run.seconds[-1]),
                                                 "wall": run.wall,
                                                 "explore": args.explore,
                                                 "baseline_explore": args.baseline_explore,
                                                 "checkpoints": {
                                                     int(m): [float(run.regret[m - 1]),
                                                              float(run.seconds[m - 1])]
                                                     for m in marks}}) + "\n")
                    print(f"  {name} {method} seed {seed}: T {len(run.regret)}, "
                          f"R_T {run.regret[-1]:.4g}, "
                          f"ratio {ratio(run, problem):.3f}, {run.seconds[-1]:.1f} CPU s, "
                          f"{run.wall:.1f} wall s",
                          flush=True)
        text = common.format_table(["problem", "method", "seeds", "T", "R_T", "R_T / R_T(unif)",
                                    "engine CPU s", "wall s"], table_rows(runs, problems))
        header = (f"{experiment}: T = {args.T}, A = {args.candidates}, seeds = {args.seeds}, "
                  f"n0 = {args.initial}, M = {args.buffer}, explore = {args.explore}, "
                  f"baseline explore = {args.baseline_explore}, goucb_beta = {args.goucb_beta}, "
                  f"budget = {args.budget:g} s")
        print(f"\n{header}\n{text}\n", flush=True)
        (args.out / f"{experiment}_table.txt").write_text(f"{header}\n{text}\n")
        plot(runs, problems, args.out / f"{experiment}.png")


if __name__ == "__main__":
    main()
