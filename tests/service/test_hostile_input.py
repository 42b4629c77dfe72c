"""Inputs a fuzzing session found to answer 500 (or to hang, or to break a study for good):
each is now a clear 4xx naming the field, or works, and the study stays usable."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from service.ui.optimum import noiseless_values

from .helpers import app_client, create_study

SPACE = {"search_space": [{"name": "x", "low": 0, "high": 1}], "n_candidates": 20}


def _study(client, name: str, **fields) -> int:  # type: ignore[no-untyped-def]
    r = client.post("/v1/studies", json={"name": name} | SPACE | fields)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _ask(client, sid: int, count: int = 1):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": count})


def _npy_header(text: str) -> bytes:
    header = text.encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


def test_values_beyond_the_engines_range_are_refused_before_they_are_stored(tmp_path):
    """1e308 used to be stored and then overflowed every later batch opening (and every
    rebuild from storage): a 500 on each ask, for good."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        sid = _study(client, "values")
        imported = client.post(f"/v1/studies/{sid}/observations", json={"observations": [
            {"candidate": 1, "value": 1e308}, {"candidate": 2, "value": 1.0}]})
        assert imported.status_code == 422, imported.text
        assert imported.json()["field"] == "observations.0.value"  # the row
        assert "1e+100" in imported.json()["detail"]
        (trial,) = _ask(client, sid).json()["trials"]
        done = f"/v1/studies/{sid}/trials/{trial['id']}/complete"
        for value in (-1e101, True, "0.5"):  # a bool or a string is a client's bug, not 1.0
            refused = client.post(done, json={"value": value})
            assert refused.status_code == 422 and refused.json()["field"] == "value"
        assert client.post(done, json={"value": 1e99}).status_code == 200
        for _ in range(3):  # the study goes on
            assert _ask(client, sid, 4).status_code == 200
        assert client.get(f"/v1/studies/{sid}").json()["n_trials"] >= 2


@pytest.mark.parametrize("body, field", [
    ({"candidates": [[1e308, 0.0], [0.0, 0.0]]}, "candidates"),
    ({"search_space": [{"name": "x", "low": -1e308, "high": 1e308}], "n_candidates": 8},
     "search_space.0"),
    ({"search_space": [{"name": "x", "type": "int", "low": -1e308, "high": 1e308}],
      "n_candidates": 8}, "search_space.0"),
    ({"engine": {"kernel": {"name": "rbf", "lengthscale": "abc"}}, **SPACE},
     "engine.kernel.lengthscale"),
    ({"engine": {"kernel": {"name": "linear", "offset": "q"}}, **SPACE}, "engine.kernel.offset"),
    ({"engine": {"kernel": {"name": "rbf", "lengthscale": [1.0, "x"]}}, **SPACE},
     "engine.kernel.lengthscale"),
    ({"engine": {"kernel": {"name": "rbf", "lengthscale": []}}, **SPACE},
     "engine.kernel.lengthscale"),
    ({"engine": {"kernel": {"name": "rbf", "lengthscale": [1.0, 2.0]}}, **SPACE},
     "engine.kernel.lengthscale"),
    ({"engine": {"kernel": "rbf"}, **SPACE}, "engine.kernel"),
    ({"engine": {"kernel": 5}, **SPACE}, "engine.kernel"),
    ({"engine": {"kernel": {"name": "rbf", "lengthscale": 1e-300}}, **SPACE},
     "engine.kernel.lengthscale"),
    ({"engine": {"kernel": {"name": "rbf", "lengthscale": 1e308}}, **SPACE},
     "engine.kernel.lengthscale"),
    ({"engine": {"kernel": {"name": "linear", "variance": 1e308}}, **SPACE},
     "engine.kernel.variance"),
    # integers beyond float64 (JSON holds them): an OverflowError, a 500, before
    ({"engine": {"kernel": {"name": "rbf", "lengthscale": 10**400}}, **SPACE},
     "engine.kernel.lengthscale"),
    ({"engine": {"kernel": {"name": "rbf", "lengthscale": [-10**400]}}, **SPACE},
     "engine.kernel.lengthscale"),
    ({"engine": {"kernel": {"name": "linear", "offset": 10**400}}, **SPACE},
     "engine.kernel.offset"),
    ({"engine": {"lam": 10**400}, **SPACE}, "engine.lam"),
    ({"lease_seconds": 1e-9, **SPACE}, "lease_seconds"),  # every lease expired at once
    ({"engine": {"noise": -10**400}, **SPACE}, "engine.noise"),
    ({"engine": {"strategy": "go-ucb", "fit_restarts": 10**9}, **SPACE}, "engine.fit_restarts"),
    ({"engine": {"strategy": "go-ucb", "goucb_hidden": 10**9}, **SPACE}, "engine.goucb_hidden"),
])
def test_out_of_range_studies_are_refused_with_the_field(tmp_path, body, field):
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        r = client.post("/v1/studies", json={"name": "s"} | body)
        assert r.status_code == 422, r.text
        assert r.json()["field"] == field


def test_a_categorical_choice_must_survive_json(tmp_path):
    """NaN was stored as null, and the choice lost."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        r = client.post("/v1/studies", content=b'{"name": "c", "n_candidates": 4, "search_space":'
                        b' [{"name": "x", "type": "categorical", "choices": ["a", NaN]}]}',
                        headers={"content-type": "application/json"})
        assert r.status_code == 422 and "finite" in r.json()["detail"]


@pytest.mark.parametrize("kernel", [
    {"name": "rbf", "lengthscale": 1e-30, "variance": 1e30},
    {"name": "linear", "variance": 1e30, "offset": 1e30},
])
@pytest.mark.parametrize("strategy", ["bbkb", "gp-ucb", "gp-bucb"])
def test_extreme_kernels_run(tmp_path, kernel, strategy):
    """At the ends of the kernel's range the exact GP's Cholesky of the observed arms failed
    with a raw LinAlgError (a 500), then with a 422 naming lam at every ask; with the least
    jitter that works (nystrom.JITTERS) every ask is answered."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        sid = _study(client, "k", engine={"strategy": strategy, "mode": "async", "seed": 1,
                                          "normalize": "none", "kernel": kernel})
        for step in range(4):
            answer = _ask(client, sid, 6)
            assert answer.status_code == 200 and len(answer.json()["trials"]) == 6, answer.text
            for i, trial in enumerate(answer.json()["trials"]):
                r = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                                json={"value": math.sin(step + i)})
                assert r.status_code == 200


def test_go_ucb_asked_past_its_first_phase_before_any_result(tmp_path):
    """Batch 1 opened with every Phase I point pending: the fit had no data (500)."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        sid = _study(client, "g", engine={"strategy": "go-ucb", "mode": "async", "horizon": 16})
        trials = _ask(client, sid, 6).json()["trials"]  # Phase I is ceil(sqrt(16)) = 4 points
        assert len(trials) == 6
        for trial in trials:
            x = trial["parameters"]["x"]
            assert client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                               json={"value": -(x - 0.3) ** 2}).status_code == 200
        assert len(_ask(client, sid, 3).json()["trials"]) == 3


@pytest.mark.parametrize("body, message", [
    (_npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (9"), "not a readable"),
    (_npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000, 2), }")
     + bytes(64), "declares shape (1000000000000, 2)"),
    (_npy_header("{'descr': '|O', 'fortran_order': False, 'shape': (1, 2), }") + bytes(155),
     "got an object array"),  # before: 'declares shape (1, 2) of object (16 bytes) but ...'
], ids=["unclosed-header", "shape-beyond-the-body", "object-array"])
def test_npy_headers_are_checked_before_anything_is_allocated(tmp_path, body, message):
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        sid = client.post("/v1/studies", json={"name": "u", "upload": True}).json()["id"]
        r = client.put(f"/v1/studies/{sid}/candidates", content=body,
                       headers={"content-type": "application/octet-stream"})
        assert r.status_code == 422 and message in r.json()["detail"], r.text
        buffer = io.BytesIO()
        np.save(buffer, np.random.default_rng(0).random((5, 2))[:, :])
        truncated = client.put(f"/v1/studies/{sid}/candidates", content=buffer.getvalue()[:-8])
        assert truncated.status_code == 422 and "holds 72 bytes" in truncated.json()["detail"]
        junk = client.put(f"/v1/studies/{sid}/candidates", content=buffer.getvalue() + b"junk")
        assert junk.status_code == 422 and "holds 84 bytes" in junk.json()["detail"]
        good = client.put(f"/v1/studies/{sid}/candidates", content=buffer.getvalue())
        assert good.status_code == 200 and good.json()["n_candidates"] == 5


def test_export_of_a_study_still_waiting_for_its_upload_is_a_header(tmp_path):
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        sid = client.post("/v1/studies", json={"name": "u", "upload": True,
                                               "parameter_names": ["a", "b"]}).json()["id"]
        r = client.get(f"/v1/studies/{sid}/export")
        assert r.status_code == 200
        assert r.text.strip().split(",")[-2:] == ["a", "b"] and len(r.text.splitlines()) == 1


@pytest.mark.parametrize("objective, why", [
    ("function:ackley?dim=1e400", "dim must be an integer"),
    ("function:ackley?dim=1e15", "dim must be an integer"),
    ("function:ackley?dim=nan", "dim must be an integer"),
    ("function:nosuch", "unknown test function"),
    ("dataset:nosuch", "unknown data set"),
    ("nosuch module:f", "not an import path"),
    ("a:", "expected"),
    ("dataset:abalone?delay=soon", "key=number"),
])
def test_an_objective_no_worker_could_resolve_is_refused(tmp_path, objective, why):
    """Before, it was stored: the dashboard's history overflowed on dim=1e400 (and built a
    14 PiB box on dim=1e15), and every dispatched trial failed for good."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        r = client.post("/v1/studies", json={"name": "o", "objective": objective} | SPACE)
        assert r.status_code == 422 and r.json()["field"] == "objective", r.text
        assert why in r.json()["detail"]
        sid = _study(client, "fine", objective="tests.workers.objective_fns:quadratic")
        r = client.post(f"/v1/studies/{sid}/dispatch", json={"n_evaluations": 1,
                                                             "objective": objective})
        assert r.status_code == 422 and r.json()["field"] == "objective", r.text


def test_the_dashboard_ignores_a_stored_objective_with_an_absurd_dimension():
    """Studies stored before the check: no regret curve, rather than a 500."""
    for dim in ("1e400", "1e15", "nan"):
        assert noiseless_values(f"function:ackley?dim={dim}", 20, 1, lambda: None) is None


def test_a_study_can_be_deleted_whatever_names_exist(database_url, tmp_path):
    """A live "a#deleted-<id>" (once the tombstone's name: unique violation, the study could
    never be deleted) or a name of 200 characters (the tombstone overflowed the column)."""
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, name="a")["id"]
        create_study(client, name=f"a#deleted-{sid}")
        long = create_study(client, name="n" * 200)["id"]
        for study in (sid, long):
            assert client.delete(f"/v1/studies/{study}").status_code == 204
            assert client.get(f"/v1/studies/{study}").status_code == 404
        assert create_study(client, name="a")["id"] != sid  # the name is free again
        names = [s["name"] for s in client.get("/v1/studies").json()["studies"]]
        assert sorted(names) == ["a", f"a#deleted-{sid}"]


@pytest.mark.parametrize("source", [{"upload": True}, {"candidates": [[0.0], [1.0]]}])
def test_n_candidates_without_a_search_space_is_refused(tmp_path, source):
    """It was ignored in silence (the audit: upload=true with n_candidates)."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        r = client.post("/v1/studies", json={"name": "s", "n_candidates": 5} | source)
        assert r.status_code == 422 and "n_candidates goes with a search_space" in r.text, r.text


@pytest.mark.parametrize("key", ["rkhs_bound", "lam", "seed"])
def test_a_boolean_is_not_a_number_in_a_new_study(tmp_path, key):
    """The API refuses it; the engine still loads specs stored with one (``rkhs_bound: true``
    was accepted as 1.0 before: refusing it in the engine stranded such studies)."""
    from service.engine import EngineConfig

    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        r = client.post("/v1/studies", json={"name": "s", "engine": {key: True}} | SPACE)
        assert r.status_code == 422 and r.json()["field"] == f"engine.{key}", r.text
        assert _study(client, "ard", engine={"hyperparameters": "auto", "ard": True})
    assert EngineConfig.from_dict({"rkhs_bound": True}).rkhs_bound == 1


def test_repeated_parameter_names_are_refused(tmp_path):
    """They were stored, and a trial's parameters (a dict by name) lost a column."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        for body in ({"candidates": [[1.0, 2.0], [3.0, 4.0]]}, {"upload": True}):
            r = client.post("/v1/studies", json={"name": "dup", "parameter_names": ["a", "a"]}
                            | body)
            assert r.status_code == 422 and r.json()["field"] == "parameter_names", r.text
            assert "['a']" in r.json()["detail"]


def test_a_go_ucb_network_too_large_for_the_columns_is_refused_when_they_arrive(tmp_path):
    """goucb_hidden = 1000 on 10 columns (12001 weights) was accepted, then every ask was a 422:
    a study that could never be used. Inline candidates, a search space and an upload."""
    engine = {"strategy": "go-ucb", "goucb_hidden": 1000}
    wide = np.random.default_rng(0).random((30, 10))
    space = [{"name": f"x{i}", "low": 0, "high": 1} for i in range(10)]
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        for body in ({"candidates": wide.tolist()}, {"search_space": space, "n_candidates": 30}):
            r = client.post("/v1/studies", json={"name": "wide", "engine": engine} | body)
            assert r.status_code == 422 and r.json()["field"] == "engine.goucb_hidden", r.text
            assert "12001 weights" in r.json()["detail"]
        created = client.post("/v1/studies", json={"name": "up", "engine": engine,
                                                   "upload": True})
        assert created.status_code == 201, created.text
        url = f"/v1/studies/{created.json()['id']}/candidates"
        buffer = io.BytesIO()
        np.save(buffer, wide)
        r = client.put(url, content=buffer.getvalue(),
                       headers={"content-type": "application/octet-stream"})
        assert r.status_code == 422 and r.json()["field"] == "engine.goucb_hidden", r.text
        buffer = io.BytesIO()
        np.save(buffer, wide[:, :2])  # 1000 * 4 + 1 weights: fits, and the study works
        assert client.put(url, content=buffer.getvalue(),
                          headers={"content-type": "application/octet-stream"}).status_code == 200
        assert client.get("/v1/studies", params={"name": "wide"}).json()["studies"] == []


@pytest.mark.parametrize("content, headers, detail", [
    (b'{"name": "x", ', {"content-type": "application/json"},
     "malformed JSON at character 14: Expecting property name enclosed in double quotes"),
    (b'{"name": "x", "search_space": []}', {},  # curl -d without -H: not JSON to the server
     "the body must be a JSON object, sent with Content-Type: application/json"),
    (b"[1, 2]", {"content-type": "application/json"},
     "the body must be a JSON object, sent with Content-Type: application/json"),
    (b'{"name": "x", "candidates": [[1.0]], "lease_seconds": NaN}',
     {"content-type": "application/json"}, "Input should be a finite number"),
    (b'{"name": "x", "candidates": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     {"content-type": "application/json"}, "malformed JSON: nested too deeply"),
])
def test_a_body_that_is_not_a_json_object_says_so(tmp_path, content, headers, detail):
    """They answered "JSON decode error" with the field "14" (a byte offset), pydantic's "valid
    dictionary or object to extract fields from", for a NaN lease "less than or equal to
    604800", and for 10^5 nested lists a 400 "There was an error parsing the body"."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        r = client.post("/v1/studies", content=content, headers=headers)
        assert r.status_code == 422 and r.json()["detail"] == detail, r.text
        field = "lease_seconds" if "NaN" in content.decode() else "body"
        assert r.json()["field"] == field


def test_a_failure_reason_with_a_nul_byte_is_a_422_on_both_databases(database_url, tmp_path):
    """PostgreSQL's text cannot hold NUL: the fail answered 500 there (a worker quoting a binary
    instrument reply), and the trial waited out its lease. Now a 422, and the trial still runs."""
    with app_client(database_url, tmp_path) as client:
        sid = _study(client, "nul")
        trial = _ask(client, sid).json()["trials"][0]["id"]
        r = client.post(f"/v1/studies/{sid}/trials/{trial}/fail", json={"reason": "OK\x00\x01"})
        assert r.status_code == 422 and r.json()["field"] == "reason", r.text
        assert client.get(f"/v1/studies/{sid}/trials/{trial}").json()["status"] == "running"
        r = client.post(f"/v1/studies/{sid}/trials/{trial}/fail", json={"reason": "OK\\x00"})
        assert r.status_code == 200 and r.json()["error"] == "OK\\x00"


def test_a_study_name_filter_with_a_nul_byte_finds_none_on_both_databases(database_url,
                                                                            tmp_path):
    """GET /v1/studies?name=%00 answered 500 on PostgreSQL (its text cannot hold NUL); a name
    no study can have finds none, as a missing name does."""
    with app_client(database_url, tmp_path) as client:
        _study(client, "named")
        for name in ("\x00", "a\x00b", "tab\there", "named\x00"):
            r = client.get("/v1/studies", params={"name": name})
            assert r.status_code == 200, (name, r.text)
            assert r.json() == {"studies": [], "next_after": None}
        found = client.get("/v1/studies", params={"name": "named"}).json()["studies"]
        assert [s["name"] for s in found] == ["named"]
        r = client.post("/v1/studies/1/results", json={"results": [
            {"trial_id": 1, "error": "bad\x00"}]})
        assert r.status_code == 422 and r.json()["field"] == "results.0", r.text


def test_a_built_in_objective_must_fit_the_candidates(tmp_path):
    """A data set scores row ``candidate`` by index: on other candidates its trials completed
    with the values of unrelated rows. A fixed-dimension test function on other columns failed
    every trial. Both are refused when the candidates are known (creation, upload, dispatch)."""
    from service.problems import load_dataset

    features = load_dataset("abalone")[0]
    with app_client("sqlite:///" + str(tmp_path / "fit.db"), tmp_path) as client:
        for objective, why in (("dataset:abalone", "must be its 4177 x 10 features, not 20 x 1"),
                               ("function:hartmann6", "hartmann6 is 6-dimensional"),
                               ("function:levy?dim=3", "evaluates 3-dimensional points")):
            r = client.post("/v1/studies", json={"name": "fit", "objective": objective} | SPACE)
            assert r.status_code == 422 and r.json()["field"] == "objective", r.text
            assert why in r.json()["detail"], r.json()["detail"]
        sid = _study(client, "levy-any-dim", objective="function:levy")  # built for 1 column
        r = client.post(f"/v1/studies/{sid}/dispatch",
                        json={"n_evaluations": 1, "objective": "dataset:cadata"})
        assert r.status_code == 422 and "20640 x 8 features" in r.json()["detail"], r.text
        r = client.post("/v1/studies", json={"name": "rows", "objective": "dataset:abalone",
                                             "candidates": features.tolist()})
        assert r.status_code == 201, r.text


def test_a_test_function_without_dim_takes_the_candidates_dimension():
    """``function:levy`` (any dimension) without ``?dim=`` was built in its default dimension,
    2, and failed on a study of 3 columns; it now takes the length of the candidate vector."""
    from workers.objectives import resolve

    levy = resolve("function:levy")
    assert levy.evaluate(0, [1.0, 1.0, 1.0], {}) == pytest.approx(0.0, abs=1e-12)  # its minimum
    assert levy.evaluate(0, [1.0] * 5, {}) == pytest.approx(0.0, abs=1e-12)
    assert levy.evaluate(0, [0.0, 0.0, 0.0], {}) < 0.0  # negated: larger is better


@pytest.mark.parametrize("path, body, field", [
    ("/v1/studies", {"name": "s", "candidates": [["1"], ["2"]]}, "candidates.0.0"),
    ("/v1/studies", {"name": "s", "candidates": [[True], [False]]}, "candidates.0.0"),
    ("/v1/studies", {"name": "s", "n_candidates": "10",
                     "search_space": [{"name": "x", "low": 0, "high": 1}]}, "n_candidates"),
    ("/v1/studies", {"name": "s", "n_candidates": 10,
                     "search_space": [{"name": "x", "low": "0", "high": 1}]},
     "search_space.0.low"),
    ("/v1/studies", {"name": "   ", **SPACE}, "name"),
    ("/v1/studies", {"name": "s", "n_candidates": 10,
                     "search_space": [{"name": " ", "low": 0, "high": 1}]},
     "search_space.0.name"),
    ("/v1/studies", {"name": "s", "n_candidates": 10, "search_space": [
        {"name": "x", "low": 0, "high": 1}, {"name": "x", "low": 0, "high": 2}]}, "search_space"),
    ("/v1/studies/{sid}/suggestions", {"worker_id": "w", "count": "2"}, "count"),
    ("/v1/studies/{sid}/suggestions", {"worker_id": "w", "count": True}, "count"),
])
def test_strings_and_booleans_are_not_numbers_and_blank_names_are_refused(tmp_path, path, body,
                                                                          field):
    """Pydantic's lax mode turned "1" and true into 1: a candidate matrix of strings, or
    "count": "2", was accepted; a name of spaces was too. Each is now a 422 naming the field,
    with the validator's own message (no "Value error, " prefix), and stores nothing."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        sid = _study(client, "ok")
        r = client.post(path.format(sid=sid), json=body)
        assert r.status_code == 422 and r.json()["field"] == field, r.text
        assert not r.json()["detail"].startswith("Value error"), r.text
        assert [s["name"] for s in client.get("/v1/studies").json()["studies"]] == ["ok"]
        assert client.get(f"/v1/studies/{sid}/trials").json()["trials"] == []
        r = client.post("/v1/studies", content=b"", headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["field"] == "body", r.text


def test_an_unexpected_error_is_json_and_closes_the_connection(tmp_path):
    """A 500 (a bug) is JSON and says Connection: close: the server closes the connection
    after it, and a keep-alive client met a reset on its next request instead."""
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from service.settings import Settings

    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}", data_dir=tmp_path,
                              auth="none"))

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.get("/boom")
        assert answer.status_code == 500
        assert answer.json() == {"detail": "internal error (logged on the server)",
                                 "field": None}
        assert answer.headers["connection"] == "close"
        assert client.get("/healthz").status_code == 200
