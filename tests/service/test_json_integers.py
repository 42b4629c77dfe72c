"""Integers in JSON bodies are JSON integers: ``"trial_id": 72.0`` was accepted as trial 72 (by
pydantic's lax mode) where a CSV upload's ``72.0`` is refused, as booleans are JSON's only. Every
integer field of every request body refuses a float with the field named, and the SDK, whose
arguments the same models check, refuses one before any request."""

from __future__ import annotations

import numpy as np
import pytest

from client import Client, InvalidArgument

from .helpers import app_client, create_study

SPACE = [{"name": "x", "low": 0, "high": 1}]


@pytest.fixture
def client(tmp_path):  # type: ignore[no-untyped-def]
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        yield client


@pytest.fixture
def running(client):  # type: ignore[no-untyped-def]
    """A study whose objective a dispatch could run, and one trial of it running."""
    sid = create_study(client, objective="function:branin")["id"]
    trial = client.post(f"/v1/studies/{sid}/suggestions",
                        json={"worker_id": "w", "count": 1}).json()["trials"][0]
    return sid, trial


def _requests(sid: int, trial: dict, number: float) -> list[tuple[str, dict, str]]:
    """(path, body, field) for every integer field of a request body, holding ``number``."""
    study = f"/v1/studies/{sid}"
    dispatch = {"n_evaluations": 4, "parallelism": 2, "job_timeout": 60}
    return [
        ("/v1/studies", {"name": "n", "search_space": SPACE, "n_candidates": number},
         "n_candidates"),
        ("/v1/studies", {"name": "m", "candidates": [[0.0], [1.0]], "max_attempts": number},
         "max_attempts"),
        (f"{study}/suggestions", {"worker_id": "w2", "count": number}, "count"),
        (f"{study}/observations", {"observations": [{"candidate": 3, "value": 1.0},
                                                    {"candidate": number, "value": 1.0}]},
         "observations.1.candidate"),
        (f"{study}/results", {"results": [{"trial_id": number, "value": 1.0}]},
         "results.0.trial_id"),
        *[(f"{study}/dispatch", dispatch | {key: number}, key) for key in dispatch],
        (f"{study}/dispatch/complete", {"trial_id": number, "value": 1.0, "worker_id": "rq-w"},
         "trial_id"),
    ]


@pytest.mark.parametrize("number", [72.0, 3.0, 2.5, 1e3])
def test_every_integer_field_refuses_a_float_naming_it(client, running, number):
    sid, trial = running
    for path, body, field in _requests(sid, trial, number):
        response = client.post(path, json=body)
        assert response.status_code == 422, (path, field, response.text)
        assert response.json()["field"] == field, (path, response.text)
        assert response.json()["detail"].startswith("expected an integer, not a float"), (
            path, response.text)
    assert client.get(f"/v1/studies/{sid}/trials/{trial['id']}").json()["status"] == "running"
    assert client.get(f"/v1/studies/{sid}").json()["n_trials"] == 1  # nothing imported
    assert [s["name"] for s in client.get("/v1/studies").json()["studies"]] == ["s"]


def test_the_same_bodies_with_integers_are_taken(client, running):
    """The refusals above are the floats': the same requests with the integer go through (the
    dispatch routes as far as their missing Redis, which a 422 would have hidden)."""
    sid, trial = running
    for path, body, field in _requests(sid, trial, trial["id"]):
        response = client.post(path, json=body)
        assert response.status_code != 422 or response.json()["field"] != field, (
            path, response.text)
    assert client.get(f"/v1/studies/{sid}/trials/{trial['id']}").json()["status"] == "completed"


def test_a_json_float_id_is_refused_as_a_csv_one_is(client, running):
    """The inconsistency a review found: the CSV upload refused ``104.0``, the JSON one took
    ``72.0``."""
    sid, trial = running
    csv = client.post(f"/v1/studies/{sid}/results.csv", content=f"trial_id,value\n"
                      f"{trial['id']}.0,1.0\n", headers={"content-type": "text/csv"})
    as_json = client.post(f"/v1/studies/{sid}/results",
                          json={"results": [{"trial_id": float(trial["id"]), "value": 1.0}]})
    assert (csv.status_code, as_json.status_code) == (422, 422)
    assert client.get(f"/v1/studies/{sid}/trials/{trial['id']}").json()["status"] == "running"


def test_the_sdk_refuses_a_float_before_any_request_and_takes_numpy_integers(client, running):
    sid, trial = running
    with Client(http=client, backoff=0.001) as sdk:
        study = sdk.study(sid)
        for call, field in (
                (lambda: study.tell_many({float(trial["id"]): 1.0}), "results.0.trial_id"),
                (lambda: study.import_observations([(np.float64(3.0), 1.0)]),
                 "observations.0.candidate"),
                (lambda: study.ask("w3", count=2.0), "count"),
                (lambda: study.dispatch(4.0), "n_evaluations"),
                (lambda: study.complete_dispatched(float(trial["id"]), 1.0, "rq-w"),
                 "trial_id")):
            with pytest.raises(InvalidArgument) as raised:
                call()
            assert raised.value.field == field
            assert "expected an integer, not a float" in str(raised.value)
        assert client.get(f"/v1/studies/{sid}").json()["n_trials"] == 1
        assert study.import_observations([(np.int64(3), 1.0)]) == 1
        assert study.tell_many({np.int64(trial["id"]): 1.0}).completed == 1
