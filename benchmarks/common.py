"""Shared helpers for the benchmark scripts: simulation loop, statistics, tables and plots.

Import this module before numpy anywhere else in a benchmark script: it pins BLAS to one thread
(unless ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` are already set). On a shared 2-core machine
a multi-threaded OpenBLAS fights the other processes for cores, and small factorisations (a
120 x 120 ``eigh``) become 50x slower, which would make every timing meaningless.
"""

from __future__ import annotations

import os
import sys
import warnings

if "numpy" in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ:
    warnings.warn("numpy was imported before benchmarks/common.py: BLAS threads not pinned",
                  stacklevel=2)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import math  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from service import bench  # noqa: E402
from service.engine import Strategy  # noqa: E402
from service.problems import Problem  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.axes import Axes


@dataclass
class RunResult:
    """What one simulated run produced (arrays are per step or per batch)."""

    arms: np.ndarray
    engine_seconds: float
    mark_seconds: float
    batch_starts: list[int] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    dictionary_sizes: list[int] = field(default_factory=list)
    #: CPU time of this process in the engine calls (time.process_time; BLAS has one thread), a
    #: load-robust companion of the wall-clock seconds above on a shared machine.
    engine_cpu_seconds: float = math.nan
    mark_cpu_seconds: float = math.nan


def simulate(problem: Problem, strategy: Strategy, steps: int, mark: int,
             rng: np.random.Generator) -> RunResult:
    """:func:`service.bench.simulate` (the sync protocol, only the engine calls timed, the
    clock read at step ``mark`` too) and the run's batches."""
    run = bench.simulate(problem, strategy, steps, rng, mark)
    batches = [b for b in strategy.batches if b.start < steps]
    return RunResult(run.arms, run.seconds, run.mark_seconds, [b.start for b in batches],
                     [min(b.size, steps - b.start) for b in batches],
                     [b.dictionary_size for b in batches], engine_cpu_seconds=run.cpu_seconds,
                     mark_cpu_seconds=run.mark_cpu_seconds)


def mean_interval(samples: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Mean over axis 0 and the half-width of its Student-t interval (NaN for one sample)."""
    samples = np.asarray(samples, dtype=float)
    n = samples.shape[0]
    mean = samples.mean(axis=0)
    if n < 2:
        return mean, np.full_like(mean, np.nan)
    scale = stats.t.ppf(0.5 + level / 2, n - 1) / math.sqrt(n)
    return mean, scale * samples.std(axis=0, ddof=1)


def paired_summary(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> dict[str, float]:
    """Per-seed values of two strategies on the same seeds: means, medians, the mean paired
    difference a - b with its Student-t interval, the ratio of means, and the Wilcoxon
    signed-rank p-value (the heavy-tailed regret ratios make the median test the robust one)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff, half = mean_interval(a - b, level)
    wilcoxon = stats.wilcoxon(a, b).pvalue if len(a) > 1 and np.any(a != b) else math.nan
    return {"n": len(a), "mean_a": float(a.mean()), "mean_b": float(b.mean()),
            "median_a": float(np.median(a)), "median_b": float(np.median(b)),
            "diff": float(diff), "diff_low": float(diff - half), "diff_high": float(diff + half),
            "ratio_of_means": float(a.mean() / b.mean()), "a_better": int(np.sum(a < b)),
            "wilcoxon_p": float(wilcoxon)}


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """Plain-text table with right-aligned columns (first column left-aligned)."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        parts = [str(c).ljust(w) if i == 0 else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "  ".join(parts)

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def band_plot(ax: Axes, t: np.ndarray, curves: np.ndarray, label: str,
              band: str = "interval") -> None:
    """Mean over the rows of ``curves`` with a shaded band: the 95% Student-t interval of the
    mean (``band="interval"``) or the range over the rows (``"range"``, positive, for log axes)."""
    mean, half = mean_interval(curves)
    (line,) = ax.plot(t, mean, label=label, lw=1.4)
    if band == "range":
        low, high = curves.min(axis=0), curves.max(axis=0)
    else:
        low, high = mean - half, mean + half
    if len(curves) > 1:
        ax.fill_between(t, low, high, color=line.get_color(), alpha=0.15, lw=0)
