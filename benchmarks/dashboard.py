"""The dashboard's read paths on a large study, over real HTTP and in a real browser.

A study on the Abalone arms (A = 4177, objective ``dataset:abalone``, so the history carries the
noiseless f for regret) is grown to N trials by warm-start imports, then 5 live batches with
failures. Printed: median / max of 5 calls of each JSON view the dashboard polls (and the
answer's size), then the time until the study page in headless chromium (Debian's, via
Playwright) has drawn all N points, and the time until a result posted through the API is drawn
without a reload, and the load average.

Usage: python benchmarks/dashboard.py [--quick] [--trials 100000]

``OPENBLAS_NUM_THREADS=1 nice -n 19 python benchmarks/dashboard.py --trials 100000``, two runs
on 2 cores shared with other work (load average 9.4 and 7.8 at the end), 100,100 trials (100,085
completed, 15 failed), SQLite. Median ms of 5 calls (first run / second run)::

    view                               median ms       bytes
    history, all rows (first load)     1093 / 1199   5,162,732
    history, 10 new rows (a poll)          21 / 12         621
    summaries (studies page)             5.0 / 7.3         279
    study                               7.5 / 12.0       1,761
    batches                              3.9 / 7.2         696
    trials page 1 (50)                   7.1 / 3.1      26,187
    trials last page (50)                6.2 / 3.1      26,141
    failed trials (100)                  5.5 / 2.4       7,815

Browser: the study page had drawn all 100,085 points 1.97 s / 1.62 s after navigation; a new
result was drawn 0.57 s / 0.96 s after its POST returned (polling every 1 s).

Since session 35 the history comes in pages of 50,000 rows (``limit=``, ``next_offset``) and
the page reads them all before it draws. The same command (one run, load average 3.6)::

    history, first page (50,000 rows)    314 ms, 2,575,569 bytes (the whole 100,085: 1.1-1.2 s)
    history, 10 new rows (a poll)         14 ms

and the study page had drawn all 100,085 points 1.73 s after navigation (a new result 1.33 s
after its POST).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import httpx2
import numpy as np

from service.api.routes.history import HISTORY_PAGE
from service.problems import dataset_problem
from service.processes import ServerProcess

ENGINE = {"strategy": "bbkb", "mode": "async", "lam": 1.0, "explore": 0.1, "seed": 0,
          "kernel": {"name": "rbf", "lengthscale": 4.0}}
#: Points drawn in the best-so-far plot (polled every 50 ms: cheap, unlike parsing the path).
DRAWN = "n => document.querySelector('#plot-best path')?.dataset.points === String(n)"


def grow(http: httpx2.Client, sid: int, n_trials: int, rng: np.random.Generator) -> None:
    problem = dataset_problem("abalone")
    for start in range(0, n_trials, 20_000):
        size = min(20_000, n_trials - start)
        arms = rng.integers(len(problem.values), size=size)
        obs = [{"candidate": int(a), "value": float(problem.observe(int(a), rng))}
               for a in arms]
        http.post(f"/v1/studies/{sid}/observations", json={"observations": obs},
                  timeout=600).raise_for_status()
    for batch in range(5):
        asked = http.post(f"/v1/studies/{sid}/suggestions",
                          json={"worker_id": "w", "count": 20}).json()["trials"]
        for i, trial in enumerate(asked):
            url = f"/v1/studies/{sid}/trials/{trial['id']}"
            if i % 7 == 3:
                http.post(f"{url}/fail", json={"reason": f"crash in batch {batch}",
                                               "retryable": False}).raise_for_status()
            else:
                value = problem.observe(trial["candidate"], rng)
                http.post(f"{url}/complete", json={"value": value}).raise_for_status()


def timed(http: httpx2.Client, path: str, repeats: int = 5) -> tuple[float, float, int]:
    seconds, size = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        response = http.get(path, timeout=120)
        seconds.append(time.perf_counter() - start)
        response.raise_for_status()
        size = len(response.content)
    return float(np.median(seconds)), max(seconds), size


def browser(url: str, sid: int, http: httpx2.Client, n_completed: int) -> tuple[float, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium")
        page = chromium.new_page(viewport={"width": 1300, "height": 900})
        page.set_default_timeout(300_000)
        page.on("console", lambda message: print("console:", message.text))
        start = time.perf_counter()
        page.goto(f"{url}/ui/studies/{sid}?poll=1000")
        page.wait_for_function(DRAWN, arg=n_completed, polling=50)
        first = time.perf_counter() - start
        (trial,) = http.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "live", "count": 1}).json()["trials"]
        http.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                  json={"value": 0.5}).raise_for_status()
        start = time.perf_counter()
        page.wait_for_function(DRAWN, arg=n_completed + 1, polling=50)
        update = time.perf_counter() - start
        chromium.close()
    return first, update


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=None, help="default: 10^5")
    parser.add_argument("--quick", action="store_true", help="10^4 trials (unless --trials)")
    args = parser.parse_args()
    n = args.trials or (10_000 if args.quick else 100_000)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess({"BBKB_DATA_DIR": tmp, "BBKB_AUTH": "none",
                                "BBKB_DATABASE_URL": f"sqlite:///{Path(tmp) / 'bbkb.db'}"})
        server.start()
        try:
            http = httpx2.Client(base_url=server.url, timeout=60)
            sid = http.post("/v1/studies", json={
                "name": "big", "engine": ENGINE, "objective": "dataset:abalone",
                "candidates": dataset_problem("abalone").candidates.tolist()}).json()["id"]
            start = time.perf_counter()
            grow(http, sid, n, rng)
            study = http.get(f"/v1/studies/{sid}").json()
            print(f"study: {study['n_trials']} trials ({study['counts']['completed']} completed,"
                  f" {study['counts']['failed']} failed), {study['n_batches']} batches;"
                  f" grown in {time.perf_counter() - start:.0f} s (SQLite)")
            last, completed = study["n_trials"] - 1, study["counts"]["completed"]
            views = {
                f"history, first page ({min(completed, HISTORY_PAGE):,} rows)":
                    f"/v1/studies/{sid}/history",
                "history, 10 new rows (a poll)":
                    f"/v1/studies/{sid}/history?offset={completed - 10}",
                "summaries (studies page)": "/v1/summaries",
                "study": f"/v1/studies/{sid}",
                "batches": f"/v1/studies/{sid}/batches",
                "trials page 1 (50)": f"/v1/studies/{sid}/trials?limit=50",
                "trials last page (50)": f"/v1/studies/{sid}/trials?limit=50&after={last - 50}",
                "failed trials (100)": f"/v1/studies/{sid}/trials?status=failed&limit=100",
            }
            print(f"{'view':36s} {'median ms':>10s} {'max ms':>8s} {'bytes':>10s}")
            for name, path in views.items():
                median, worst, size = timed(http, path)
                print(f"{name:36s} {1000 * median:10.1f} {1000 * worst:8.1f} {size:10d}")
            first, update = browser(server.url, sid, http, study["counts"]["completed"])
            print(f"browser: study page drawn with all points in {first:.2f} s;"
                  f" a new result drawn {update:.2f} s after its POST returned (poll 1 s)")
            print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}, {} cores".format(
                *os.getloadavg(), os.cpu_count()))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
