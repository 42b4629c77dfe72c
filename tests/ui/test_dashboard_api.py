"""The dashboard's JSON views (/v1/summaries, /v1/studies/{id}/history) on both databases."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from service.api.app import create_app
from service.auth import create_key
from service.problems import dataset_problem, get_function
from service.settings import Settings
from service.store.database import transaction
from service.ui.optimum import noiseless_values

from .ui_helpers import candidates, create_study, run_trials


@contextlib.contextmanager
def app_client(database_url: str, tmp: Path, auth: str = "none") -> Iterator[TestClient]:
    app = create_app(Settings(database_url=database_url, data_dir=tmp, auth=auth))
    with TestClient(app) as client:
        yield client


def test_history_is_columns_in_completion_order(database_url, tmp_path):
    with app_client(database_url, tmp_path) as http:
        sid = create_study(http, engine={"strategy": "uniform", "mode": "async",
                                         "batch_size": 4, "seed": 0})["id"]
        assert http.get(f"/v1/studies/{sid}/history").json() == {
            "offset": 0, "next_offset": None, "t": [], "value": [], "elapsed": [],
            "noiseless": None, "optimum": None}
        done = run_trials(http, sid, 12, fail_every=5)
        history = http.get(f"/v1/studies/{sid}/history").json()
        completed = [t for t in done if t["status"] == "completed"]
        assert len(completed) == 10
        assert history["t"] == [t["t"] for t in completed]  # answered order, not t order
        assert history["t"] != sorted(history["t"])
        assert history["value"] == [t["value"] for t in completed]
        assert history["elapsed"] == sorted(history["elapsed"]) and history["elapsed"][0] >= 0
        assert history["optimum"] is None and history["noiseless"] is None
        # a poller asks only for the rows it has not seen
        tail = http.get(f"/v1/studies/{sid}/history", params={"offset": 7}).json()
        assert tail["offset"] == 7
        assert (tail["t"], tail["value"]) == (history["t"][7:], history["value"][7:])
        assert tail["elapsed"] == history["elapsed"][7:]
        assert http.get(f"/v1/studies/{sid}/history?offset=99").json()["t"] == []
        bad = http.get(f"/v1/studies/{sid}/history?offset=-1")
        assert bad.status_code == 422 and bad.json()["field"] == "offset"
        # pages: next_offset until the last one, which says null
        assert history["next_offset"] is None
        pages, offset = [], 0
        while offset is not None:
            page = http.get(f"/v1/studies/{sid}/history",
                            params={"offset": offset, "limit": 4}).json()
            assert page["offset"] == offset and len(page["t"]) <= 4
            pages.append(page)
            offset = page["next_offset"]
        assert [len(p["t"]) for p in pages] == [4, 4, 2]
        assert sum((p["t"] for p in pages), []) == history["t"]
        assert sum((p["elapsed"] for p in pages), []) == history["elapsed"]
        exact = http.get(f"/v1/studies/{sid}/history", params={"limit": 10}).json()
        assert len(exact["t"]) == 10 and exact["next_offset"] is None  # no empty last page
        for limit in (0, 200_001):
            bad = http.get(f"/v1/studies/{sid}/history", params={"limit": limit})
            assert bad.status_code == 422 and bad.json()["field"] == "limit"


def test_history_regret_of_dataset_arms(database_url, tmp_path):
    problem = dataset_problem("abalone")
    with app_client(database_url, tmp_path) as http:
        sid = create_study(http, candidates=problem.candidates.tolist(),
                           objective="dataset:abalone?delay=0.05&noise=0.01")["id"]
        rng = np.random.default_rng(1)
        done = run_trials(http, sid, 15, value=lambda t: problem.observe(t["candidate"], rng))
        history = http.get(f"/v1/studies/{sid}/history").json()
        arms = np.array([t["candidate"] for t in done])
        f = problem.values
        assert history["optimum"] == pytest.approx(f.max())
        np.testing.assert_allclose(history["noiseless"], f[arms], rtol=0, atol=1e-12)
        assert history["noiseless"] != history["value"]  # f, not the noisy observations
        # the same objective on a candidate set that is not the data set: refused since
        # session 15; one stored before then shows no regret
        assert noiseless_values("dataset:abalone", 120, 2, lambda: candidates()) is None


def test_history_regret_of_a_test_function_when_minimising(database_url, tmp_path):
    fn = get_function("branin")
    box = candidates(200, 2, seed=4) * [15.0, 15.0] + [-5.0, 0.0]
    with app_client(database_url, tmp_path) as http:
        sid = create_study(http, candidates=box.tolist(), objective="function:branin",
                           direction="minimize")["id"]
        done = run_trials(http, sid, 10, value=lambda t: float(fn.objective(box[t["candidate"]])))
        history = http.get(f"/v1/studies/{sid}/history").json()
        f = fn.objective(box)  # what the worker returns (negated branin), minimised here
        arms = np.array([t["candidate"] for t in done])
        assert history["optimum"] == pytest.approx(f.min())
        np.testing.assert_allclose(history["noiseless"], f[arms], atol=1e-9)
        tail = http.get(f"/v1/studies/{sid}/history?offset=4").json()
        np.testing.assert_allclose(tail["noiseless"], f[arms[4:]], atol=1e-9)


def test_summaries_per_owner(database_url, tmp_path):
    with app_client(database_url, tmp_path, auth="keys") as http:
        assert http.get("/v1/summaries").status_code == 401
        with transaction(http.app.state.sessions) as session:
            alice, bob = create_key(session, "alice"), create_key(session, "bob")
        as_alice = {"Authorization": f"Bearer {alice}"}
        as_bob = {"Authorization": f"Bearer {bob}"}
        http.headers.update(as_alice)
        up = create_study(http, name="up")["id"]
        down = create_study(http, name="down", direction="minimize")["id"]
        empty = create_study(http, name="empty")["id"]
        run_trials(http, up, 8, fail_every=4)
        down_trials = run_trials(http, down, 6)
        http.headers.update(as_bob)
        assert http.get("/v1/summaries").json() == {"studies": [], "next_after": None}
        assert http.get(f"/v1/studies/{up}/history").status_code == 404
        http.headers.update(as_alice)
        rows = {r["id"]: r for r in http.get("/v1/summaries").json()["studies"]}
        assert set(rows) == {up, down, empty}
        best_up = http.get(f"/v1/studies/{up}/best").json()["value"]
        assert (rows[up]["n_trials"], rows[up]["completed"], rows[up]["failed"]) == (8, 6, 2)
        assert rows[up]["best_value"] == best_up
        assert rows[down]["best_value"] == min(t["value"] for t in down_trials)
        assert rows[down]["direction"] == "minimize"
        assert (rows[empty]["n_trials"], rows[empty]["best_value"]) == (0, None)
        assert rows[up]["strategy"] == "bbkb" and rows[up]["mode"] == "sync"
        last = datetime.fromisoformat(rows[down]["last_activity"])  # the last change's time
        assert last >= datetime.fromisoformat(down_trials[-1]["completed_at"])
        assert datetime.fromisoformat(rows[empty]["last_activity"]) < last


def test_batches_time_the_resparsification_apart_from_opening(database_url, tmp_path):
    """resparsify_seconds is the dictionary resampling alone: part of open_seconds (which adds
    the kernel refit and the posterior build), null for a strategy without a dictionary;
    refit_seconds, also part of it, only at the batches that refit (automatic kernel)."""
    with app_client(database_url, tmp_path) as http:
        sid = create_study(http, name="bbkb")["id"]
        run_trials(http, sid, 24)
        batches = http.get(f"/v1/studies/{sid}/batches").json()["batches"]
        assert len(batches) > 1
        for b in batches:
            assert 0 < b["resparsify_seconds"] <= b["open_seconds"]
            assert b["refit_seconds"] is None  # a fixed kernel
        auto = create_study(http, name="auto", engine={"strategy": "bbkb", "mode": "sync",
                                                       "seed": 3})["id"]
        run_trials(http, auto, 60)
        batches = http.get(f"/v1/studies/{auto}/batches").json()["batches"]
        fitted = [b["hyperparameters"]["fitted_at"] for b in batches]
        refit = [b["refit_seconds"] is not None for b in batches]
        moved = [a != b for a, b in zip(fitted[:-1], fitted[1:], strict=True)]
        assert refit == [False, *moved] and any(refit)
        assert all(0 < b["refit_seconds"] < b["open_seconds"] for b in batches
                   if b["refit_seconds"] is not None)
        assert f"bbkb_refit_seconds_count {sum(refit):.1f}" in http.get("/metrics").text
        uniform = create_study(http, name="uniform", engine={
            "strategy": "uniform", "mode": "async", "batch_size": 4, "seed": 0})["id"]
        run_trials(http, uniform, 8)
        batches = http.get(f"/v1/studies/{uniform}/batches").json()["batches"]
        assert batches and all(b["resparsify_seconds"] is None and b["open_seconds"] is not None
                               for b in batches)


def test_the_batch_list_does_not_read_the_dictionaries(database_url, tmp_path):
    """The list shows dictionary sizes; the dictionaries themselves (8 bytes per atom, every
    batch) stay in the database."""
    from sqlalchemy import Engine, event

    statements: list[str] = []

    def record(conn, cursor, statement, *args):  # noqa: ANN001, ANN202
        statements.append(statement)

    with app_client(database_url, tmp_path) as http:
        sid = create_study(http, name="bbkb")["id"]
        run_trials(http, sid, 12)
        event.listen(Engine, "before_cursor_execute", record)  # every engine of the app
        try:
            batches = http.get(f"/v1/studies/{sid}/batches").json()["batches"]
        finally:
            event.remove(Engine, "before_cursor_execute", record)
    assert len(batches) > 1 and all(b["dictionary_size"] > 0 for b in batches[1:])
    selects = [s for s in statements if "FROM batches" in s]
    assert selects and not any(re.search(r"batches\.dictionary\b(?!_)", s) for s in selects)


def test_batches_after_lists_only_the_later_ones(database_url, tmp_path):
    """A poller asks for the batches after the last it has (as with the trials' ``after``)."""
    with app_client(database_url, tmp_path) as http:
        sid = create_study(http, engine={"strategy": "uniform", "mode": "async",
                                         "batch_size": 4, "seed": 0})["id"]
        url = f"/v1/studies/{sid}/batches"
        assert http.get(url, params={"after": -1}).json() == {"batches": [], "next_after": None}
        run_trials(http, sid, 14)
        every = http.get(url).json()["batches"]
        assert [b["index"] for b in every] == list(range(len(every))) and len(every) >= 4
        assert http.get(url, params={"after": -1}).json()["batches"] == every
        for after in (0, 2, len(every) - 1, 10**6):
            assert http.get(url, params={"after": after}).json()["batches"] == every[after + 1:]
        for bad in ("-2", "x", "1.5", str(2**31)):
            response = http.get(url, params={"after": bad})
            assert response.status_code == 422 and response.json()["field"] == "after", bad
        assert http.get(f"/v1/studies/{sid + 1}/batches?after=0").status_code == 404

        # pages: next_after until the last one, which says null (no empty last page)
        for limit in (1, 3, len(every)):
            pages, after = [], -1
            while after is not None:
                page = http.get(url, params={"after": after, "limit": limit}).json()
                assert 0 < len(page["batches"]) <= limit
                pages.append(page["batches"])
                after = page["next_after"]
            assert [b for p in pages for b in p] == every
            assert len(pages) == -(-len(every) // limit)
        for bad in ("0", "50001", "x"):
            response = http.get(url, params={"limit": bad})
            assert response.status_code == 422 and response.json()["field"] == "limit", bad


@pytest.mark.parametrize("path", ["abc", "0", "2147483648", "<script>x", "1.5"])
def test_a_study_page_path_that_is_no_study_id_answers_a_page_saying_so(path, tmp_path):
    """A person typed or pasted the address: a 404 page that says so and links to the list,
    not the API's 422 JSON; the path is shown escaped."""
    with app_client(f"sqlite:///{tmp_path / 'bbkb.db'}", tmp_path) as http:
        page = http.get(f"/ui/studies/{path}")
        assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
        assert "No study" in page.text and 'href="/ui/"' in page.text
        assert "<script>x" not in page.text
        good = http.get("/ui/studies/7")
        assert good.status_code == 200 and 'data-study-id="7"' in good.text


def test_the_servers_address_leads_to_the_dashboard(tmp_path):
    """Opening http://host:8000/ after `bbkb serve` was a 404 JSON with no pointer anywhere."""
    with app_client(f"sqlite:///{tmp_path / 'bbkb.db'}", tmp_path) as http:
        root = http.get("/", follow_redirects=False)
        assert root.is_redirect and root.headers["location"] == "/ui/"
        assert "/" not in http.get("/openapi.json").json()["paths"]  # not part of the API
        page = http.get("/")
        assert page.status_code == 200 and 'data-page="studies"' in page.text, page.text[:300]


def test_every_script_a_page_loads_is_served_in_order(tmp_path):
    """The pages load plots.js, kernel.js and dashboard.js, in that order (one global scope:
    the last starts the page), and each is served as JavaScript."""
    with app_client(f"sqlite:///{tmp_path / 'bbkb.db'}", tmp_path) as http:
        for page in ("/ui/", "/ui/studies/7", "/ui/studies/x"):
            sources = re.findall(r'<script src="([^"]+)" defer></script>', http.get(page).text)
            assert sources == [f"/ui/static/{n}" for n in ("plots.js", "kernel.js",
                                                          "dashboard.js")]
            for source in sources:
                script = http.get(source)
                assert script.status_code == 200, source
                assert script.headers["content-type"].startswith("text/javascript")


def test_the_dashboard_knows_the_engines_smoothing_and_lambda_floor():
    """The page tells a kept fit lengthened by the default factor from one raised to the
    floor, and a fitted lambda from a clamped one, with its own copies of the constants."""
    from service.engine import autokernel

    script = (Path(__file__).parents[2] / "service" / "ui" / "static" / "kernel.js").read_text()
    for name in ("SMOOTHING", "LAM_FLOOR"):
        (value,) = re.findall(rf"^const {name} = ([0-9.]+);", script, flags=re.MULTILINE)
        assert float(value) == getattr(autokernel, name)
