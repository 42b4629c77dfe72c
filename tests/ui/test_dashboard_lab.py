"""The dashboard for a lab user, in headless chromium: the latest trials first at any size, log
scales and lengthscale steps, the best observation with its parameters, a search on the
studies page and the study's server-side dispatch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import httpx2
import pytest
from sqlalchemy import update

from service.store.database import make_engine, session_factory, transaction
from service.store.models import Study

from .test_dashboard_browser import ASYNC_BBKB, _server, _wait_points, _wait_rows
from .ui_helpers import candidates, create_study, run_trials

UNIFORM = {"strategy": "uniform", "mode": "async", "batch_size": 4, "seed": 0}


@pytest.fixture
def served(server_factory, tmp_path: Path) -> Iterator[tuple[str, httpx2.Client]]:
    """The database URL and a REST client of a fresh server without authentication."""
    url, server = _server(server_factory, tmp_path, "none")
    with httpx2.Client(base_url=server.url, timeout=30) as client:
        yield url, client


def _texts(page, selector: str) -> list[str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def _fmt(v: float) -> str:
    """The page's fmt: 5 significant digits, a short exponent."""
    return f"{v:.5g}".replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")


def test_newest_trials_first_in_a_large_study_with_filters(served, page):
    _, http = served
    n = 1100  # more than the API's largest page
    sid = create_study(http, name="large", candidates=candidates(n + 100).tolist(),
                       engine=UNIFORM)["id"]
    body = {"observations": [{"candidate": i, "value": float(i)} for i in range(n)]}
    assert http.post(f"/v1/studies/{sid}/observations", json=body).status_code == 200
    run_trials(http, sid, 8, fail_every=4)  # t = n .. n+7, two of them failed
    running = http.post(f"/v1/studies/{sid}/suggestions",
                        json={"worker_id": "late", "count": 30}).json()["trials"]
    assert len(running) == 30  # the 30 newest trials: no completed one among them
    every = http.get(f"/v1/studies/{sid}/trials?after={n - 100}&limit=1000").json()["trials"]
    newest = sorted(every, key=lambda t: -t["t"])

    def first(status: str) -> list[int]:
        return [t["t"] for t in newest if t["status"] == status][:10]

    # the trials table's requests (the failed trials' box asks for its own, without order=)
    asked: list[dict[str, str]] = []
    page.on("request", lambda r: asked.append(dict(parse_qsl(urlsplit(r.url).query)))
            if "/trials?" in r.url and "order=" in r.url else None)
    seen = 0

    def one_request(**params: str) -> None:
        """The table's rows came from one request since the last check, with these params."""
        nonlocal seen
        assert asked[seen:] == [{"limit": "11", **params}], asked[seen:]
        seen = len(asked)

    page.goto(f"{http.base_url}/ui/studies/{sid}?page_size=10")
    _wait_rows(page, "trials", [t["t"] for t in newest[:10]])
    one_request(order="desc")  # the newest page: no cursor
    assert f"trials 1-10 of {n + 38}, newest first" in page.text_content("#page-info")
    page.click("#page-next")
    _wait_rows(page, "trials", [t["t"] for t in newest[10:20]])
    one_request(order="desc", after=str(newest[9]["t"]))  # t < the last one shown

    page.select_option("#status-filter", "completed")  # behind 30 running trials
    _wait_rows(page, "trials", first("completed"))
    one_request(order="desc", status="completed")
    page.click("#page-next")
    _wait_rows(page, "trials", [t["t"] for t in newest if t["status"] == "completed"][10:20])
    one_request(order="desc", status="completed", after=str(first("completed")[-1]))
    page.select_option("#status-filter", "failed")
    _wait_rows(page, "trials", first("failed"))
    one_request(order="desc", status="failed")
    assert page.is_disabled("#page-next")
    page.select_option("#status-filter", "running")  # exactly 3 pages: no empty fourth
    for k in range(3):
        if k:
            page.click("#page-next")
        _wait_rows(page, "trials", first("running") if k == 0 else
                   [t["t"] for t in newest if t["status"] == "running"][10 * k:10 * k + 10])
        one_request(order="desc", status="running",
                    **({"after": str(newest[10 * k - 1]["t"])} if k else {}))
    assert page.is_disabled("#page-next")
    assert "trials 21-30 of 30, newest first" in page.text_content("#page-info")
    page.select_option("#trials-order", "oldest")  # oldest first: the same, ascending
    _wait_rows(page, "trials", [t["t"] for t in reversed(newest[20:30])])
    one_request(order="asc", status="running")
    page.select_option("#status-filter", "abandoned")
    page.wait_for_function("() => document.querySelector('#page-info').textContent"
                           " === 'no abandoned trials'")
    one_request(order="asc", status="abandoned")


def test_log_scales_lengthscale_steps_and_the_best_observation(served, page):
    _, http = served
    study = create_study(http, name="scales", engine=ASYNC_BBKB)
    sid = study["id"]
    run_trials(http, sid, 20)
    batches = http.get(f"/v1/studies/{sid}/batches").json()["batches"]
    best = http.get(f"/v1/studies/{sid}").json()["best"]

    page.goto(f"{http.base_url}/ui/studies/{sid}?poll=300")
    _wait_points(page, "plot-open", len(batches))
    # the lengthscale holds within a batch: steps (H then V), never a slope (L)
    _wait_points(page, "plot-lengthscale", len(batches))
    d = page.get_attribute("#plot-lengthscale path.series", "d")
    assert "L" not in d and d.count("H") == d.count("V") == len(batches) - 1

    # the best observation: its value, trial and parameters
    page.wait_for_selector("#best-value")
    assert page.text_content("#best-value") == _fmt(best["value"])
    assert f"at trial t={best['t']} (batch {best['batch']})" in page.text_content("#study-best")
    shown = page.text_content("#best-parameters")
    assert shown.split() == [f"{k}={_fmt(v)}" for k, v in best["parameters"].items()]

    # the time to open a batch on a log scale: decades on the axis; kept on a reload
    assert page.get_attribute("#plot-open", "data-scale") == "linear"
    page.check("input[data-log=plot-open]")
    page.wait_for_selector("#plot-open[data-scale=log]")
    ticks = [float(t) for t in _texts(page, "#plot-open text[text-anchor=end]")]
    ms = [1000 * b["open_seconds"] for b in batches]
    assert ticks and all(min(ms) / 10 <= t <= max(ms) * 10 for t in ticks)
    if max(ms) / min(ms) > 30:  # at least two decades inside: the ticks are powers of ten
        assert all(f"{t:e}".startswith("1.0") for t in ticks), ticks
    page.reload()
    page.wait_for_selector("#plot-open[data-scale=log]")
    assert page.is_checked("input[data-log=plot-open]")
    assert page.get_attribute("#plot-best", "data-scale") == "linear"

    # values at and below zero: no log scale for them (a switch that cannot apply is off)
    page.evaluate("""() => plot(document.getElementById('plot-best'), {x: [1, 2, 3, 4],
        y: [0.001, 0.1, 10, 1000], kind: 'line', xLabel: 'e', yLabel: 'v', log: true})""")
    assert _texts(page, "#plot-best text[text-anchor=end]") == [
        "0.001", "0.01", "0.1", "1", "10", "100", "1000"]
    # regret reaching 0 (the optimum found): drawn at the bottom of the axis (y = 200)
    page.evaluate("""() => plot(document.getElementById('plot-best'), {x: [1, 2, 3],
        y: [1, 0.01, 0], kind: 'line', xLabel: 'e', yLabel: 'regret', log: true})""")
    assert page.get_attribute("#plot-best path.series", "d").endswith(" 200.0")
    page.evaluate("""() => plot(document.getElementById('plot-best'), {x: [1, 2], y: [0, -1],
        kind: 'line', xLabel: 'e', yLabel: 'v', log: true})""")
    assert page.get_attribute("#plot-best", "data-scale") == "linear"


def test_log_switch_is_off_for_a_plot_with_values_not_positive(served, page):
    _, http = served
    sid = create_study(http, name="negative", engine=UNIFORM)["id"]
    run_trials(http, sid, 6, value=lambda trial: trial["t"] - 2.0)  # -2 .. 3
    page.goto(f"{http.base_url}/ui/studies/{sid}?poll=300")
    _wait_points(page, "plot-best", 6)
    page.wait_for_selector("#study-best:has-text('the highest value measured')")
    # answered 3, 2, 1, 0 (run_trials), then 5, 4: values 1, 0, -1, -2, 3, 2
    assert page.is_disabled("input[data-log=plot-values]")
    assert page.is_enabled("input[data-log=plot-best]")  # the best so far: 1, 1, 1, 1, 3, 3
    assert page.text_content("#best-value") == "3"
    assert page.is_enabled("input[data-log=plot-open]")  # times: positive


def test_studies_page_search_by_name_strategy_and_status(served, page):
    _, http = served
    create_study(http, name="alpha-ridge")
    create_study(http, name="beta-ridge", engine=UNIFORM)
    create_study(http, name="Gamma")
    page.goto(f"{http.base_url}/ui/")
    page.wait_for_function("() => document.querySelectorAll('#studies tbody tr').length === 3")

    def names() -> list[str]:
        return sorted(_texts(page, "#studies tbody tr td:first-child"))

    page.fill("#studies-filter", "ridge")
    page.wait_for_function("() => document.querySelectorAll('#studies tbody tr').length === 2")
    assert names() == ["alpha-ridge", "beta-ridge"]
    assert page.text_content("#studies-shown") == "2 of 3 studies"
    page.fill("#studies-filter", "UNIFORM")  # strategy, any case
    page.wait_for_function("() => document.querySelectorAll('#studies tbody tr').length === 1")
    assert names() == ["beta-ridge"]
    page.fill("#studies-filter", "gamma bbkb")  # every word: name and strategy
    page.wait_for_function("() => document.querySelectorAll('#studies tbody tr').length === 1")
    assert names() == ["Gamma"]
    page.fill("#studies-filter", "no such study")
    page.wait_for_selector("#studies-none-match:not([hidden])")
    assert page.is_hidden("#studies-empty")

    page.fill("#studies-filter", "beta")  # kept in the address: a reload keeps the search
    page.wait_for_function("() => location.search === '?q=beta'")
    page.reload()
    page.wait_for_selector("#studies tbody tr")
    assert page.input_value("#studies-filter") == "beta" and names() == ["beta-ridge"]
    page.fill("#studies-filter", "")
    page.wait_for_function("() => document.querySelectorAll('#studies tbody tr').length === 3")
    assert page.text_content("#studies-shown") == "" and page.is_hidden("#studies-none-match")


def test_study_page_shows_its_dispatch(served, page):
    url, http = served
    sid = create_study(http, name="dispatched", engine=UNIFORM)["id"]
    run_trials(http, sid, 5)
    http.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": 3})
    page.goto(f"{http.base_url}/ui/studies/{sid}?poll=200")
    page.wait_for_selector("#plot-best path.series")
    assert page.is_hidden("#dispatch")  # driven by its callers: no dispatch

    engine = make_engine(url)  # as POST .../dispatch would (it needs Redis), then a pause

    def plan(status: str) -> None:
        with transaction(session_factory(engine)) as session:
            session.execute(update(Study).where(Study.id == sid).values(dispatch={
                "status": status, "n_evaluations": 20, "parallelism": 4,
                "objective": "dataset:abalone", "job_timeout": 3600, "finished_before": 1}))

    try:
        plan("running")  # the study itself does not change: the page still asks now and then
        page.wait_for_selector("#dispatch[data-status=running]")
        assert page.text_content("#dispatch-text") == (
            "Server-side dispatch running: 4 of 20 evaluations finished, 3 trials pending or "
            "running, at most 4 at a time; objective dataset:abalone")
        assert page.eval_on_selector("#dispatch-progress", "p => [p.value, p.max]") == [4, 20]
        plan("paused")
        page.wait_for_selector("#dispatch[data-status=paused]")
        assert "paused (the trials in flight finish" in page.text_content("#dispatch-text")
    finally:
        engine.dispose()
