"""CPU milliseconds per step of GO-UCB (sync, one point per batch, A = 2000 uniform points in
20 d, d_w = 551) around t = 100, 400, 700 and 1000: how a step's cost grows with t.

    python benchmarks/goucb_step.py [--engine ROOT]

``--engine``: the root of another checkout whose engine to time instead of this one's (it must
hold service/engine/strategy.py). The last line hashes the arms chosen: two versions of the
engine that decide alike print the same hash."""
import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
parser = argparse.ArgumentParser(description="CPU ms per step of GO-UCB around t = 100-1000.")
parser.add_argument("--engine", type=Path, default=HERE.parents[1], metavar="ROOT",
                    help="the checkout whose engine is timed (default: this one)")
root = parser.parse_args().engine.resolve()
if not (root / "service" / "engine" / "strategy.py").is_file():
    parser.error(f"--engine {root}: no service/engine/strategy.py there")
sys.path.insert(0, str(root))
sys.path.insert(1, str(HERE.parent))

import common  # noqa: E402, F401 - first: pins BLAS to one thread before numpy loads
import numpy as np  # noqa: E402

import service.engine.strategy  # noqa: E402
from service.engine.strategy import Strategy  # noqa: E402

print(f"engine: {Path(service.engine.strategy.__file__).resolve().parents[2]}")

rng = np.random.default_rng(0)
A, d = 2000, 20
X = rng.uniform(size=(A, d))


def f(i: int) -> float:
    return float(-np.sum((X[i] - 0.5) ** 2))


s = Strategy(X, dict(strategy="go-ucb", horizon=1000, mode="sync", seed=0))
marks, out, arms = [100, 400, 700, 1000], [], []
while s.t < 1000:
    started = time.process_time()
    for x in s.ask(1):
        s.tell(x.t, f(x.arm) + 0.01 * rng.standard_normal())
        arms.append(x.arm)
    if s.t in marks or any(m <= s.t < m + 20 for m in marks):
        out.append((s.t, time.process_time() - started))
for m in marks:
    steps = [sec for t, sec in out if m <= t < m + 20]
    print(f"t ~ {m}: {1000 * np.mean(steps):.1f} ms per step")
print("arms hash", hash(tuple(arms)))
