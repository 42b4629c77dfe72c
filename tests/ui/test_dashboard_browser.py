"""The dashboard in a real headless chromium against a real server process."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx2
import numpy as np
import pytest

from client import Client
from service.auth import create_key
from service.problems import dataset_problem
from service.store.database import make_engine, session_factory, transaction

from .ui_helpers import candidates, create_study, run_trials

ASYNC_BBKB = {"strategy": "bbkb", "mode": "async", "seed": 3, "lam": 0.5,
              "kernel": {"name": "rbf", "lengthscale": 0.2}}
#: Counts the points of a plot's series path: one M (dots, bars), M/L (line) or M/H (steps) per
#: point.
POINTS = "p => (p.getAttribute('d').match(/[MLH]/g) || []).length"


def _server(server_factory, tmp_path: Path, auth: str):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'bbkb.db'}"
    return url, server_factory({"BBKB_DATABASE_URL": url, "BBKB_AUTH": auth,
                                "BBKB_DATA_DIR": str(tmp_path)})


@pytest.fixture
def rest_client() -> Iterator[Callable[..., httpx2.Client]]:
    """Makes REST clients of the server, closed (with their sockets) when the test ends."""
    with ExitStack() as clients:
        yield lambda url, **options: clients.enter_context(
            httpx2.Client(base_url=url, timeout=30, **options))


def _points(page, plot: str) -> int:  # type: ignore[no-untyped-def]
    return page.eval_on_selector(f"#{plot} path.series", POINTS)


def _wait_points(page, plot: str, n: int) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        f"() => {{ const p = document.querySelector('#{plot} path.series');"
        f" return p !== null && ({POINTS})(p) === {n}; }}")


def _hyperparameters(page) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The hyper-parameter table's full-precision numbers, by key."""
    return dict(page.eval_on_selector_all(
        "#hyperparameters td[data-value]",
        "cells => cells.map(c => [c.parentElement.dataset.key, c.dataset.value])"))


def _column(page, table: str, index: int = 0) -> list[str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all(
        f"#{table} tbody tr", f"rows => rows.map(r => r.cells[{index}].textContent)")


def _wait_rows(page, table: str, first_cells: list) -> None:  # type: ignore[no-untyped-def]
    expected = [str(c) for c in first_cells]
    page.wait_for_function(
        f"e => JSON.stringify([...document.querySelectorAll('#{table} tbody tr')]"
        f".map(r => r.cells[0].textContent)) === JSON.stringify(e)", arg=expected)


def test_study_page_plots_tables_csv_and_live_updates(server_factory, tmp_path, page,
                                                       artifacts, record_property, rest_client):
    _, server = _server(server_factory, tmp_path, "none")
    http = rest_client(server.url)
    sid = create_study(http, name="campaign", engine=ASYNC_BBKB)["id"]
    done = run_trials(http, sid, 30, fail_every=7)
    running = http.post(f"/v1/studies/{sid}/suggestions",
                        json={"worker_id": "late", "count": 2}).json()["trials"]
    completed = [t for t in done if t["status"] == "completed"]
    failed = [t for t in done if t["status"] == "failed"]
    batches = http.get(f"/v1/studies/{sid}/batches").json()["batches"]
    assert (len(completed), len(failed), len(running)) == (26, 4, 2)

    # the history in pages of 7 rows and the batches in pages of 2: the first load reads them
    # all before it draws
    assert len(batches) > 4
    page.goto(f"{server.url}/ui/studies/{sid}?poll=300&page_size=10&history_page=7&batch_page=2")
    page.wait_for_selector("#plot-best path.series", state="attached")
    assert _points(page, "plot-best") == len(completed)
    assert _points(page, "plot-values") == len(completed)
    assert _points(page, "plot-batch-size") == len(batches)
    assert _points(page, "plot-dictionary") == len(batches)
    resparsified = [b for b in batches if b["resparsify_seconds"] is not None]
    assert resparsified and _points(page, "plot-resparsify") == len(resparsified)
    opened = [b for b in batches if b["open_seconds"] is not None]
    assert opened and _points(page, "plot-open") == len(opened)
    assert all(b["refit_seconds"] is None for b in batches)  # a fixed kernel never refits
    assert "no refit" in page.text_content("#plot-refit")
    assert page.is_hidden("#figure-regret")  # no built-in objective: no known optimum
    assert page.text_content("#study-name") == "campaign"
    assert '"strategy": "bbkb"' in page.text_content("#config")
    _wait_points(page, "plot-lengthscale", len(batches))  # fixed kernel: 0.2 in every batch
    assert _hyperparameters(page)["lengthscale"] == "0.2"
    assert page.text_content("#hyperparameters [data-key=mode] td") == "fixed"

    # failed trials with their error text
    _wait_rows(page, "failed", [t["t"] for t in failed])
    assert _column(page, "failed", 5) == [f"simulator crashed at t={t['t']}" for t in failed]
    assert all(text.startswith("x0=") for text in _column(page, "failed", 4))  # parameters

    # the trials table: newest first (the latest results on the first page), keyset pages,
    # a status filter, and oldest first on demand
    every = sorted((t["t"] for t in done + running), reverse=True)
    _wait_rows(page, "trials", every[:10])
    assert "trials 1-10 of 32, newest first" in page.text_content("#page-info")
    page.click("#page-next")
    _wait_rows(page, "trials", every[10:20])
    # two clicks before the first page arrives (one task: no fetch can answer in between);
    # the second found no cursor yet and showed the newest trials as the fourth page
    page.evaluate("() => { const next = document.getElementById('page-next');"
                  " next.click(); next.click(); }")
    _wait_rows(page, "trials", every[30:32])
    assert page.is_disabled("#page-next")
    assert "trials 31-32 of 32" in page.text_content("#page-info")
    page.click("#page-prev")
    _wait_rows(page, "trials", every[20:30])
    page.select_option("#status-filter", "running")
    _wait_rows(page, "trials", sorted((t["t"] for t in running), reverse=True))
    page.select_option("#status-filter", "failed")
    newest_failed = sorted(failed, key=lambda t: -t["t"])
    _wait_rows(page, "trials", [t["t"] for t in newest_failed])
    assert _column(page, "trials", 8) == [
        f"simulator crashed at t={t['t']}" for t in newest_failed]
    page.select_option("#status-filter", "")
    _wait_rows(page, "trials", every[:10])
    page.select_option("#trials-order", "oldest")
    oldest = every[::-1]
    _wait_rows(page, "trials", oldest[:10])
    page.click("#page-next")
    _wait_rows(page, "trials", oldest[10:20])
    assert "trials 11-20 of 32, oldest first" in page.text_content("#page-info")
    page.select_option("#trials-order", "newest")
    _wait_rows(page, "trials", every[:10])

    # the CSV download link gives every trial
    with page.expect_download() as download:
        page.click("#csv")
    with open(download.value.path(), encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(int(r["t"]) for r in rows) == oldest

    # a result posted through the API appears without a reload
    page.evaluate("window.stillTheSamePage = true")
    answer = http.post(f"/v1/studies/{sid}/trials/{running[0]['id']}/complete",
                       json={"value": 7.5})
    assert answer.status_code == 200
    _wait_points(page, "plot-best", len(completed) + 1)
    assert _points(page, "plot-values") == len(completed) + 1
    page.wait_for_function("() => document.querySelector('#best-value')?.textContent === '7.5'")
    assert page.text_content("#study-best").startswith("Best observed so far (the highest")
    assert page.evaluate("window.stillTheSamePage") is True

    shot = artifacts / "study-page.png"
    page.screenshot(path=str(shot), full_page=True)
    record_property("screenshot", str(shot))
    print(f"study page screenshot: {shot}")
    assert shot.stat().st_size > 10_000


def test_trial_pages_count_right_under_a_lower_server_page_limit(server_factory, tmp_path, page,
                                                                 rest_client):
    """A server whose page limit (4) is below the dashboard's page size (10) answers shorter
    pages; the label counts the trials the pages held, not page number x page size."""
    url = f"sqlite:///{tmp_path / 'bbkb.db'}"
    server = server_factory({"BBKB_DATABASE_URL": url, "BBKB_AUTH": "none",
                             "BBKB_DATA_DIR": str(tmp_path), "BBKB_PAGE_LIMIT": "4"})
    http = rest_client(server.url)
    sid = create_study(http, name="short pages", engine=ASYNC_BBKB)["id"]
    every = sorted((t["t"] for t in run_trials(http, sid, 10)), reverse=True)
    page.goto(f"{server.url}/ui/studies/{sid}?poll=300&page_size=10")
    _wait_rows(page, "trials", every[:4])
    assert "trials 1-4 of 10, newest first" in page.text_content("#page-info")
    page.click("#page-next")
    _wait_rows(page, "trials", every[4:8])
    assert "page 2: trials 5-8 of 10" in page.text_content("#page-info")
    page.click("#page-next")
    _wait_rows(page, "trials", every[8:])
    assert "page 3: trials 9-10 of 10" in page.text_content("#page-info")
    assert page.is_disabled("#page-next")
    page.click("#page-prev")
    _wait_rows(page, "trials", every[4:8])
    assert "trials 5-8 of 10" in page.text_content("#page-info")


def test_study_page_shows_fitted_hyperparameters_per_batch(server_factory, tmp_path, page,
                                                         artifacts, rest_client):
    _, server = _server(server_factory, tmp_path, "none")
    http = rest_client(server.url)
    engine = {"strategy": "bbkb", "mode": "async", "seed": 3, "lam": 0.5, "explore": 1.0,
              "kernel": {"name": "rbf"}, "ard": True}  # no lengthscale: chosen by the engine
    study = create_study(http, name="auto-kernel", engine=engine)
    sid, X = study["id"], candidates()

    def ridge(x) -> float:  # type: ignore[no-untyped-def]  # varies along x0 only: ARD pays
        return float(np.exp(-((x[0] - 0.6) ** 2) / 0.02))

    def value(trial: dict) -> float:
        return ridge(list(trial["parameters"].values()))

    def observe(arms: range) -> None:
        body = {"observations": [{"candidate": i, "value": ridge(X[i])} for i in arms]}
        assert http.post(f"/v1/studies/{sid}/observations", json=body).status_code == 200

    observe(range(0, 40, 2))  # 20 arms: the first batch fits
    run_trials(http, sid, 8, value)
    observe(range(41, 65, 2))  # 40 >= 1.5 x 20 observations: the next batch refits
    run_trials(http, sid, 6, value)

    def api_state() -> tuple[dict, list[dict]]:
        return (http.get(f"/v1/studies/{sid}").json()["hyperparameters"],
                http.get(f"/v1/studies/{sid}/batches").json()["batches"])

    current, batches = api_state()
    assert len({b["hyperparameters"]["fitted_at"] for b in batches}) == 2  # a refit happened
    assert len(current["lengthscale"]) == 2 and current["variance"] is not None
    names = study["parameter_names"]

    page.goto(f"{server.url}/ui/studies/{sid}?poll=300")
    _wait_points(page, "plot-lengthscale", len(batches))
    series = page.eval_on_selector_all(
        "#plot-lengthscale path.series", f"ps => ps.map(p => [p.dataset.name, ({POINTS})(p)])")
    assert series == [[name, len(batches)] for name in names]  # ARD: one line per dimension
    runs: list[list] = []  # [source, first batch, last batch]
    for batch in batches:
        if runs and runs[-1][0] == batch["hyperparameters"]["source"]:
            runs[-1][2] = batch["index"]
        else:
            runs.append([batch["hyperparameters"]["source"], batch["index"], batch["index"]])
    assert page.text_content("#lengthscale-sources") == "lengthscale from: " + ", ".join(
        f"{source} (batch {a})" if a == b else f"{source} (batches {a}-{b})"
        for source, a, b in runs)
    expected = {f"lengthscale-{j}": v for j, v in enumerate(current["lengthscale"])} | {
        k: current[k] for k in ("lam", "variance", "noise")}
    shown = _hyperparameters(page)
    assert {k: float(v) for k, v in shown.items()} == expected
    assert page.text_content("#hyperparameters [data-key=fitted_at] td") == _last_refit(
        current, batches)
    assert "automatically" in page.text_content("#hyperparameters [data-key=mode] td")
    lam_from = page.text_content("#hyperparameters [data-key=lam-source] td")
    if current["source"] == "floor":
        assert lam_from.startswith("the configured 0.5")
    else:  # lam = noise / variance of the fit, clamped to [0.1, 1] x the configured 0.5
        assert lam_from.startswith("the kept fit's noise / signal variance")
        clamped = current["noise"] / current["variance"] < 0.05
        assert clamped == lam_from.endswith("raised to 0.1x the configured 0.5")
        assert clamped == (current["lam"] == 0.05)
    # the engine settings that freeze the kernel, which a new study runs on as shown
    freeze = page.text_content("#hyperparameters [data-key=freeze] td")
    settings = json.loads(freeze.split(": ", 1)[1])
    assert settings == {"hyperparameters": "fixed", "ard": False, "normalize": "zscore",
                        "lam": current["lam"],
                        "kernel": {"name": "rbf", "variance": 1.0,
                                   "lengthscale": current["lengthscale"]}}
    with Client(server.url) as sdk:  # the SDK's copy of the row
        assert sdk.study(sid).frozen_engine() == settings
    frozen = create_study(http, name="frozen", engine=engine | settings)["id"]  # ard: true
    run_trials(http, frozen, 2, value)
    assert {(tuple(b["hyperparameters"]["lengthscale"]), b["hyperparameters"]["lam"],
             b["hyperparameters"]["source"])
            for b in http.get(f"/v1/studies/{frozen}/batches").json()["batches"]} == {
        (tuple(current["lengthscale"]), current["lam"], "fixed")}
    source = {"fit": f"the last kept fit, lengthened {current['smoothing']:g}x",
              "floor": "the neighbour floor"}[current["source"]]
    assert page.text_content("#hyperparameters [data-key=source] td").startswith(source)

    # new observations -> a refit and new batches appear without a reload
    observe(range(65, 120, 2))
    run_trials(http, sid, 12, value)  # long enough for a batch to open
    refit, batches = api_state()
    assert refit["fitted_at"] > current["fitted_at"]
    _wait_points(page, "plot-lengthscale", len(batches))
    page.wait_for_function(
        "n => document.querySelector('#hyperparameters [data-key=fitted_at] td')"
        ".textContent.startsWith(`at ${n} observations`)", arg=refit["fitted_at"])
    assert float(_hyperparameters(page)["lengthscale-0"]) == refit["lengthscale"][0]
    refits = [b for b in batches if b["refit_seconds"] is not None]  # one bar per refit
    assert len(refits) == len({b["hyperparameters"]["fitted_at"] for b in batches} - {0})
    _wait_points(page, "plot-refit", len(refits))

    shot = artifacts / "study-hyperparameters.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"hyper-parameter screenshot: {shot}")
    assert shot.stat().st_size > 10_000


def _last_refit(current: dict, batches: list[dict]) -> str:
    """The "last refit" row the page should show: a refit is kept where the batches' fitted
    variances change with it."""
    kept_at, previous = None, None
    for hp in (b["hyperparameters"] for b in batches):
        if hp["fitted_at"] and (previous is None or hp["fitted_at"] != previous["fitted_at"]) \
                and hp["variance"] is not None and (previous is None or (
                    hp["variance"], hp["noise"]) != (previous["variance"], previous["noise"])):
            kept_at = hp["fitted_at"]
        previous = hp
    text = f"at {current['fitted_at']} observations"
    if kept_at == current["fitted_at"]:
        return text
    return text + f", not kept (no better by BIC); variances and \u03bb from the fit at {kept_at}"


def test_a_refit_not_kept_names_the_fit_whose_values_stay(server_factory, tmp_path, page,
                                                         rest_client):
    """A ridge gives a kept fit at 40 observations; 100 noisy values later the refit is not
    kept, and the variances and lambda stay the first fit's. The page said "last refit: at
    144 observations" beside them, as if they were that refit's."""
    _, server = _server(server_factory, tmp_path, "none")
    http = rest_client(server.url)
    X = candidates(300, 3)
    sid = create_study(http, name="not-kept", candidates=X.tolist(), engine={
        "strategy": "bbkb", "mode": "async", "seed": 3, "lam": 0.5, "explore": 1.0})["id"]
    noise = np.random.default_rng(0)

    def ridge(x) -> float:  # type: ignore[no-untyped-def]
        return float(np.exp(-((x[0] - 0.6) ** 2) / 0.02))

    def observe(values: dict[int, float]) -> None:
        body = {"observations": [{"candidate": i, "value": v} for i, v in values.items()]}
        assert http.post(f"/v1/studies/{sid}/observations", json=body).status_code == 200

    observe({i: ridge(X[i]) for i in range(40)})
    run_trials(http, sid, 4, lambda trial: ridge(list(trial["parameters"].values())))
    observe({i: 3.0 * float(noise.standard_normal()) for i in range(40, 140)})
    run_trials(http, sid, 12, lambda trial: float(noise.standard_normal()))
    current = http.get(f"/v1/studies/{sid}").json()["hyperparameters"]
    batches = http.get(f"/v1/studies/{sid}/batches").json()["batches"]
    expected = _last_refit(current, batches)
    assert "not kept" in expected  # the scenario: a kept fit, then one that is not

    page.goto(f"{server.url}/ui/studies/{sid}?poll=300")
    _wait_points(page, "plot-lengthscale", len(batches))
    page.wait_for_function(
        "e => document.querySelector('#hyperparameters [data-key=fitted_at] td')"
        "?.textContent === e", arg=expected)


def test_the_floor_says_whether_the_data_or_the_prior_put_the_kernel_there(
        server_factory, tmp_path, page, rest_client):
    """On 300 candidates in 20 dimensions the kernel starts on the neighbour floor, a prior
    choice, and white noise keeps no fit: the page says so, and that the start put it there
    (it said a fit not kept had). After a kept fit below the floor it said "a prior choice, not
    one the data made" too, where the data point shorter still (kernel.js, floorReading)."""
    _, server = _server(server_factory, tmp_path, "none")
    http = rest_client(server.url)
    sid = create_study(http, name="floor", candidates=candidates(300, 20).tolist(), engine={
        "strategy": "bbkb", "mode": "async", "seed": 3})["id"]
    noise = np.random.default_rng(0)
    source = "#hyperparameters [data-key=source] td"

    def shown() -> str:
        return page.text_content(source) or ""

    run_trials(http, sid, 1, lambda trial: float(noise.standard_normal()))
    assert http.get(f"/v1/studies/{sid}").json()["hyperparameters"]["source"] == "floor"
    page.goto(f"{server.url}/ui/studies/{sid}?poll=300")
    page.wait_for_selector(source)
    assert shown().startswith("the neighbour floor, the shortest that links nearest "
                              "candidates: the candidates are too sparse for the longer start. "
                              "A prior choice, not one the data made;")
    run_trials(http, sid, 40, lambda trial: float(noise.standard_normal()))
    current = http.get(f"/v1/studies/{sid}").json()["hyperparameters"]
    assert current["source"] == "floor" and current["fitted_at"] > 0
    assert current["variance"] is None  # white noise: no fit is kept
    page.wait_for_function(
        "s => document.querySelector(s)?.textContent.includes('No fit kept')", arg=source)
    assert shown().startswith("the neighbour floor, the shortest that links nearest "
                              "candidates: the candidates are too sparse for the longer start. "
                              "No fit kept so far (the values look like noise to the "
                              "likelihood): a prior choice, not one the data made;")


def test_a_gssbo_study_shows_its_own_fit(server_factory, tmp_path, page, rest_client):
    """GSSBO fits its own Matern GP at each batch: the page shows that fit (it hid GSSBO's
    hyper-parameters, whose batches recorded the engine's unused start values)."""
    _, server = _server(server_factory, tmp_path, "none")
    http = rest_client(server.url)
    sid = create_study(http, name="gssbo", engine={
        "strategy": "gssbo", "gssbo_initial": 4, "gssbo_buffer": 8, "mode": "async",
        "seed": 1})["id"]
    run_trials(http, sid, 12, count=1)
    current = http.get(f"/v1/studies/{sid}").json()["hyperparameters"]
    fitted = [b for b in http.get(f"/v1/studies/{sid}/batches").json()["batches"]
              if b["hyperparameters"] is not None]  # all but the initial design
    page.goto(f"{server.url}/ui/studies/{sid}?poll=300")
    _wait_points(page, "plot-lengthscale", len(fitted))
    shown = _hyperparameters(page)
    assert {k: float(shown[k]) for k in ("lengthscale", "lam", "variance", "noise")} == {
        "lengthscale": current["lengthscale"][0]} | {
        k: current[k] for k in ("lam", "variance", "noise")}
    assert page.text_content("#hyperparameters [data-key=source] td") == (
        "GSSBO's fit at this batch")
    assert page.text_content("#hyperparameters [data-key=mode] td").startswith("by GSSBO")


def test_many_ard_dimensions_plot_their_shortest_and_the_others_mean(server_factory, tmp_path, page,
                                                       rest_client):
    _, server = _server(server_factory, tmp_path, "none")
    http = rest_client(server.url)
    X = candidates(60, 10)
    wide = create_study(http, name="wide", candidates=X.tolist(), engine={
        "strategy": "bbkb", "mode": "async", "seed": 3, "lam": 0.5, "kernel": {"name": "rbf"},
        "ard": True})
    sid, study_names = wide["id"], wide["parameter_names"]
    body = {"observations": [{"candidate": i, "value": float(X[i, 0] + X[i, 1] ** 2)}
                             for i in range(30)]}
    assert http.post(f"/v1/studies/{sid}/observations", json=body).status_code == 200
    run_trials(http, sid, 2, value=lambda trial: 0.0)
    batches = http.get(f"/v1/studies/{sid}/batches").json()["batches"]
    ells = http.get(f"/v1/studies/{sid}").json()["hyperparameters"]["lengthscale"]
    assert len(ells) == 10  # the fit was accepted: one lengthscale per dimension

    page.goto(f"{server.url}/ui/studies/{sid}?poll=300")
    _wait_points(page, "plot-lengthscale", len(batches))
    # the 7 shortest dimensions by name (the inputs the values vary along most), then the rest
    shortest = [study_names[j] for j in np.argsort(ells, kind="stable")[:7]]
    assert page.eval_on_selector_all("#plot-lengthscale path.series",
                                     "ps => ps.map(p => p.dataset.name)") == [
        *shortest, "geometric mean of the other 3"]
    assert "the 7 shortest of 10 dimensions" in page.text_content("#lengthscale-caption")
    page.wait_for_selector("#hyperparameters [data-key=lengthscale-9]")
    shown = _hyperparameters(page)
    assert [float(shown[f"lengthscale-{j}"]) for j in range(10)] == ells


def test_keys_mode_asks_for_the_key_sorts_and_isolates_owners(server_factory, tmp_path, page,
                                                               rest_client):
    url, server = _server(server_factory, tmp_path, "keys")
    engine = make_engine(url)
    with transaction(session_factory(engine)) as session:
        alice, bob = create_key(session, "alice"), create_key(session, "bob")
    engine.dispose()
    as_alice = rest_client(server.url, headers={"Authorization": f"Bearer {alice}"})
    as_bob = rest_client(server.url, headers={"Authorization": f"Bearer {bob}"})
    problem = dataset_problem("abalone")
    rng = np.random.default_rng(0)
    arms = create_study(as_alice, name="alice-abalone", candidates=problem.candidates.tolist(),
                        objective="dataset:abalone", engine=ASYNC_BBKB | {
                            "kernel": {"name": "rbf", "lengthscale": 4.0}})["id"]
    run_trials(as_alice, arms, 12, value=lambda t: problem.observe(t["candidate"], rng))
    small = create_study(as_alice, name="alice-small")["id"]
    run_trials(as_alice, small, 5, value=lambda t: -1.0 - t["t"])  # best value -1
    secret = create_study(as_bob, name="bob-secret")["id"]
    run_trials(as_bob, secret, 3)

    page.goto(f"{server.url}/ui/?poll=300")
    page.wait_for_selector("#key-form:not([hidden])")
    assert "needs an API key" in page.text_content("#message")
    page.fill("#key-input", "bbkb_not-a-key")
    page.click("#key-form button")
    page.wait_for_function("() => document.querySelector('#message').textContent"
                           ".includes('was refused')")
    assert page.eval_on_selector_all("#studies tbody tr", "rows => rows.length") == 0
    page.fill("#key-input", alice)
    page.click("#key-form button")
    page.wait_for_selector("#studies tbody tr")
    names = _column(page, "studies")
    assert sorted(names) == ["alice-abalone", "alice-small"]  # never bob's
    page.click("th[data-sort=best_value]")
    _wait_rows(page, "studies", ["alice-small", "alice-abalone"])
    page.click("th[data-sort=best_value]")
    _wait_rows(page, "studies", ["alice-abalone", "alice-small"])
    page.click("th[data-sort=completed]")
    _wait_rows(page, "studies", ["alice-small", "alice-abalone"])

    # the key stays for the tab; the dataset-arm study shows its regret
    page.click("text=alice-abalone")
    _wait_points(page, "plot-regret", 12)
    assert page.is_visible("#figure-regret")
    assert "optimum 1" in page.text_content("#regret-caption")

    page.goto(f"{server.url}/ui/studies/{secret}?poll=300")
    page.wait_for_function("() => document.querySelector('#message').textContent"
                           ".includes('not found')")
    assert page.text_content("#study-name") == f"study {secret}"  # nothing of bob's study
    assert page.eval_on_selector_all("#trials tbody tr", "rows => rows.length") == 0
