"""CPU milliseconds per step of the exact GP strategies in async mode (GP-UCB by default) on
Abalone's 4177 arms, with IN_FLIGHT selections awaiting their value at each ask (a result comes
back for the oldest, then the next is asked for): how a step's cost grows with t.

    python benchmarks/exact_step.py [--strategy gp-bucb] [--T 1600] [--in-flight 8]
                                    [--engine ROOT]

Each ask opens a batch of one, whose posterior mean is the GP's given the observed selections
only (the pending ones count in the variance). ``--engine``: the root of another checkout
whose engine to time instead (it must hold service/engine/strategy.py). The last line hashes
the arms chosen: two engines that decide alike print the same hash.

Measured (2 shared cores, one BLAS thread; CPU ms per step around t = 400 / 800 / 1200 /
1600; ``--engine`` a worktree of the commit before): GP-UCB with a new Cholesky of the observed
subset at each ask 22.4 / 54.2 / 90.2 / 153.2, with the mean from the factor of every pulled
selection (ExactPosterior._subset_mean) 2.3 / 5.2 / 9.4 / 13.7, the same arms (hash) over the
1600 steps. GP-BUCB opens a batch far less often: 0.5 / 1.0 / 1.6 at t = 400 / 800 / 1200
either way.
"""
import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
parser = argparse.ArgumentParser(description="CPU ms per async step of the exact GP.")
parser.add_argument("--strategy", default="gp-ucb", choices=["gp-ucb", "gp-bucb"])
parser.add_argument("--T", type=int, default=1600, help="steps (default 1600)")
parser.add_argument("--in-flight", type=int, default=8, help="selections awaiting a value")
parser.add_argument("--engine", type=Path, default=HERE.parents[1], metavar="ROOT",
                    help="the checkout whose engine is timed (default: this one)")
args = parser.parse_args()
root = args.engine.resolve()
if not (root / "service" / "engine" / "strategy.py").is_file():
    parser.error(f"--engine {root}: no service/engine/strategy.py there")
sys.path.insert(0, str(root))
sys.path.insert(1, str(HERE.parent))

import common  # noqa: E402, F401 - first: pins BLAS to one thread before numpy loads
import numpy as np  # noqa: E402

import service.engine.strategy  # noqa: E402
from service.engine.strategy import Strategy  # noqa: E402
from service.problems import dataset_problem  # noqa: E402

print(f"engine: {Path(service.engine.strategy.__file__).resolve().parents[2]}")
problem = dataset_problem("abalone")
strategy = Strategy(problem.candidates, dict(strategy=args.strategy, mode="async", seed=0,
                                             kernel={"name": "rbf", "lengthscale": 4.0}))
rng = np.random.default_rng(0)
marks = [m for m in (400, 800, 1200, 1600, 3200, 6400) if m <= args.T]
pending, arms, cpu = [], [], {}
for step in range(1, args.T + 1):
    started = time.process_time()
    (selection,) = strategy.ask(1)
    pending.append(selection)
    if len(pending) >= args.in_flight:
        done = pending.pop(0)
        strategy.tell(done.t, problem.observe(done.arm, rng))
    cpu[step] = time.process_time() - started
    arms.append(selection.arm)
for m in marks:
    window = [cpu[t] for t in range(max(1, m - 19), m + 1)]
    print(f"t ~ {m}: {1000 * np.mean(window):.1f} ms per step")
print("arms hash", hash(tuple(arms)))
