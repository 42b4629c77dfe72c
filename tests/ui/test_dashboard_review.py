"""The dashboard review's defects, in headless chromium: incremental batches, stopped polling,
empty and flat plots, number formatting, strategies without a kernel, narrow screens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from service.auth import create_key
from service.store.database import make_engine, session_factory, transaction

from .test_dashboard_browser import ASYNC_BBKB, POINTS, _points, _server, _wait_points
from .ui_helpers import create_study, run_trials

UNIFORM = {"strategy": "uniform", "mode": "async", "batch_size": 4, "seed": 0}
#: An error message with no place to break (a path), as a simulator may report.
LONG_ERROR = "FileNotFoundError: " + "/scratch/run-0042/outputs" * 30 + "/result.h5"


@pytest.fixture
def http(server_factory, tmp_path: Path) -> Iterator[httpx2.Client]:
    """A REST client of a fresh server without authentication."""
    _, server = _server(server_factory, tmp_path, "none")
    with httpx2.Client(base_url=server.url, timeout=30) as client:
        yield client


def _texts(page, selector: str) -> list[str]:  # type: ignore[no-untyped-def]
    return page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")


def test_batches_are_fetched_incrementally_and_drawn_as_a_full_load(http, page):
    sid = create_study(http, name="growing", engine=UNIFORM)["id"]
    run_trials(http, sid, 14)
    batches = http.get(f"/v1/studies/{sid}/batches").json()["batches"]
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/batches" in r.url else None)
    page.goto(f"{http.base_url}/ui/studies/{sid}?poll=200")
    _wait_points(page, "plot-batch-size", len(batches))

    run_trials(http, sid, 13)  # more batches, and the open one grows
    later = http.get(f"/v1/studies/{sid}/batches").json()["batches"]
    assert len(later) > len(batches)
    _wait_points(page, "plot-batch-size", len(later))
    afters = [int(parse_qs(urlsplit(url).query)["after"][0]) for url in asked]
    assert afters[0] == -1 and max(afters) >= len(batches) - 2  # only the new (and open) ones

    fresh = page.context.new_page()  # the same data loaded at once draws the same plots
    fresh.goto(f"{http.base_url}/ui/studies/{sid}")
    _wait_points(fresh, "plot-batch-size", len(later))
    for plot in ("plot-batch-size", "plot-dictionary", "plot-open"):
        d = f"#{plot} path.series"
        assert page.get_attribute(d, "d") == fresh.get_attribute(d, "d"), plot


def test_unknown_study_and_refused_key_stop_polling(server_factory, tmp_path, page):
    url, server = _server(server_factory, tmp_path, "keys")
    engine = make_engine(url)
    with transaction(session_factory(engine)) as session:
        key = create_key(session, "alice")
    engine.dispose()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/v1/" in r.url else None)
    page.goto(f"{server.url}/ui/studies/4242?poll=200")
    page.wait_for_selector("#key-form:not([hidden])")
    page.wait_for_timeout(1200)  # six polling periods
    assert len(asked) == 1 and "waiting" in page.text_content("#poll-status")

    page.fill("#key-input", key)
    page.click("#key-form button")
    page.wait_for_function("() => document.querySelector('#message').textContent"
                           ".includes('Study 4242 not found')")
    page.wait_for_timeout(1200)
    assert len(asked) == 2  # no polling after the 404
    assert page.is_hidden(".plots") and page.is_hidden("#trials")  # no empty frames


def test_failed_trials_flat_plots_and_a_strategy_without_kernel(http, page):
    sid = create_study(http, name="all-failed", engine=UNIFORM)["id"]
    run_trials(http, sid, 6, fail_every=1)
    page.goto(f"{http.base_url}/ui/studies/{sid}?poll=200")
    page.wait_for_function("() => document.querySelector('#plot-best text.empty')"
                           "?.textContent === 'no completed trials (6 failed)'")
    assert _texts(page, "#plot-values text.empty") == ["no completed trials (6 failed)"]
    # uniform search has no kernel: no lengthscale plot, no hyper-parameter table
    assert page.is_hidden("#figure-lengthscale") and page.is_hidden("#hyperparameters-none")
    assert page.is_visible("#config")
    # dictionary size 0 in every batch: a 0..1 axis of whole numbers, no negative batch
    _wait_points(page, "plot-dictionary", 2)
    assert _texts(page, "#plot-dictionary text[text-anchor=end]") == ["0", "1"]
    x_ticks = [int(t) for t in _texts(page, "#plot-dictionary text[text-anchor=middle]:not("
                                            ".label):not(.empty)")]
    assert x_ticks and min(x_ticks) >= 0
    assert all(t.isdigit() for t in _texts(page, "#plot-batch-size text[text-anchor=end]"))

    # one completed trial: a single point still shows (a marker)
    trial = http.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w"}).json()
    done = http.post(f"/v1/studies/{sid}/trials/{trial['trials'][0]['id']}/complete",
                     json={"value": 2.5})
    assert done.status_code == 200
    _wait_points(page, "plot-best", 1)
    assert page.eval_on_selector("#plot-best path.marks", POINTS) == 1


def test_tick_labels_and_values_keep_their_digits(http, page):
    sid = create_study(http, name="formatting", engine=ASYNC_BBKB)["id"]
    page.goto(f"{http.base_url}/ui/studies/{sid}")
    page.wait_for_selector("#plot-best text.empty")
    assert page.evaluate("[1234567.8, 0.000012345678, 12.345678, -0.12345678, 1e-7, 0, 42]"
                         ".map(fmt)") == ["1.2346e6", "1.2346e-5", "12.346", "-0.12346", "1e-7",
                                          "0", "42"]
    for lo, hi in ((1e-6, 1.00004e-6), (1e7, 5e7), (0, 3e-6), (0.1, 0.3), (-2e5, 9e5)):
        labels = page.evaluate("([lo, hi]) => niceTicks(lo, hi).labels", [lo, hi])
        assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    # large values: the tick labels stay clear of the axis title
    page.evaluate("""() => plot(document.getElementById('plot-best'), {x: [1, 2, 3],
        y: [1.2e7, 3.4e7, 9.9e7], kind: 'line', xLabel: 'evaluations', yLabel: 'best value'})""")
    title = page.eval_on_selector("#plot-best text.label[transform]",
                                  "e => e.getBoundingClientRect().right")
    lefts = page.eval_on_selector_all("#plot-best text[text-anchor=end]",
                                      "es => es.map(e => e.getBoundingClientRect().left)")
    assert lefts and min(lefts) > title


@pytest.mark.parametrize("width", [400, 1300])
def test_no_sideways_scrolling(http, page, width, artifacts):
    sid = create_study(http, name="a-study-with-a-long-error-message", engine=ASYNC_BBKB)["id"]
    run_trials(http, sid, 12)
    trial = http.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w"}).json()
    failed = http.post(f"/v1/studies/{sid}/trials/{trial['trials'][0]['id']}/fail",
                       json={"reason": LONG_ERROR, "retryable": False})
    assert failed.status_code == 200
    page.set_viewport_size({"width": width, "height": 900})
    for path in (f"/ui/studies/{sid}", "/ui/"):
        page.goto(f"{http.base_url}{path}")
        page.wait_for_selector("#failed tbody tr" if "studies/" in path else "#studies tbody tr")
        assert page.evaluate("document.documentElement.scrollWidth") <= width, path
    page.goto(f"{http.base_url}/ui/studies/{sid}")
    _wait_points(page, "plot-best", 12)
    assert _points(page, "plot-values") == 12
    page.screenshot(path=str(artifacts / f"study-{width}.png"), full_page=True)


def test_an_earlier_attempts_error_and_an_unreachable_server_read_as_what_they_are(
        server_factory, tmp_path, page):
    """A trial completed on a retry kept its earlier attempt's error, shown in red on the
    completed row as if it had failed; the failed trials had no parameters to see which
    region fails; a server that stopped showed the browser's bare "Failed to fetch"."""
    _, server = _server(server_factory, tmp_path, "none")
    with httpx2.Client(base_url=server.url, timeout=30) as http:
        sid = create_study(http, name="flaky", engine=UNIFORM)["id"]
        (first,) = http.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "w", "count": 1}).json()["trials"]
        url = f"/v1/studies/{sid}/trials/{first['id']}"
        assert http.post(f"{url}/fail", json={"reason": "instrument busy"}).status_code == 200
        (again,) = http.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "w", "count": 1}).json()["trials"]
        assert again["id"] == first["id"] and again["attempt"] == 2
        assert http.post(f"{url}/complete", json={"value": 1.0}).status_code == 200
        run_trials(http, sid, 3, fail_every=3)
    page.goto(f"{server.url}/ui/studies/{sid}?poll=200")
    page.wait_for_selector("#failed tbody tr")
    assert _texts(page, "#failed tbody td.params")[0].startswith("x0=")
    page.select_option("#trials-order", "oldest")
    page.wait_for_function("() => document.querySelector('#trials tbody tr')?.cells[0]"
                           ".textContent === '0'")
    note = page.locator("#trials tbody tr").first.locator("td").last
    assert note.text_content() == "earlier attempt: instrument busy"
    assert note.get_attribute("class") == "muted"
    server.stop()
    page.wait_for_function("() => document.getElementById('message').textContent"
                           ".includes('The server does not answer')")


def test_the_pages_run_under_a_strict_content_security_policy(http, page):
    """The pages are sent with a Content-Security-Policy of their own origin only (no inline
    code), frame-ancestors 'none' and nosniff (security review: none were sent); everything the
    dashboard draws runs under it without one violation."""
    sid = create_study(http, name="csp", engine=UNIFORM)["id"]
    run_trials(http, sid, 12, fail_every=5)
    page.add_init_script("window.violations = [];"
                         "document.addEventListener('securitypolicyviolation',"
                         " e => window.violations.push(e.violatedDirective + ' ' + e.blockedURI));")
    answer = page.goto(f"{http.base_url}/ui/studies/{sid}?poll=200")
    headers = answer.headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "'unsafe-inline'" not in headers["content-security-policy"]
    assert (headers["x-frame-options"], headers["x-content-type-options"]) == ("DENY", "nosniff")
    _wait_points(page, "plot-values", 10)
    page.wait_for_selector("#failed tbody tr")
    page.goto(f"{http.base_url}/ui/")
    page.wait_for_selector("table tbody tr")
    assert page.evaluate("window.violations") == []
