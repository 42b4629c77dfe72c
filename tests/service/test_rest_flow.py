"""The full REST flow on both databases: create, ask, tell, batches closing, best, export."""

from __future__ import annotations

import csv
import io

import numpy as np

from .helpers import app_client, candidates, complete_trials, create_study, objective


def _run(client, study_id: int, n: int, worker: str = "w") -> list[dict]:  # type: ignore[no-untyped-def]
    """Ask and complete until ``n`` trials are completed (sync mode: batch by batch)."""
    done: list[dict] = []
    while len(done) < n:
        answer = client.post(f"/v1/studies/{study_id}/suggestions",
                             json={"worker_id": worker, "count": 10}).json()
        assert answer["trials"], answer
        done += complete_trials(client, study_id, answer["trials"])
    return done


def test_full_flow(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        study = create_study(client)
        sid = study["id"]
        assert study["status"] == "active" and study["n_candidates"] == 120
        done = _run(client, sid, 40)
        info = client.get(f"/v1/studies/{sid}").json()
        assert info["counts"]["completed"] == len(done) and info["n_trials"] == len(done)
        assert info["n_batches"] >= 3 and info["dictionary_size"] >= 1
        best = client.get(f"/v1/studies/{sid}/best").json()
        assert best["value"] == max(t["value"] for t in done)
        assert info["best"]["id"] == best["id"]
        batches = client.get(f"/v1/studies/{sid}/batches").json()["batches"]
        assert [b["index"] for b in batches] == list(range(len(batches)))
        assert sum(b["size"] for b in batches) == len(done)
        assert all(b["stop_reason"] for b in batches[:-1])  # every closed batch says why
        exported = list(csv.DictReader(io.StringIO(client.get(f"/v1/studies/{sid}/export").text)))
        assert len(exported) == len(done)
        assert {float(r["value"]) for r in exported} == {t["value"] for t in done}
        assert {"x0", "x1"} <= set(exported[0])


def test_sync_mode_answers_waiting_instead_of_blocking(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]
        first = client.post(f"/v1/studies/{sid}/suggestions",
                            json={"worker_id": "a", "count": 5}).json()
        assert len(first["trials"]) == 1 and "waiting" in first["waiting"]
        other = client.post(f"/v1/studies/{sid}/suggestions",
                            json={"worker_id": "b", "count": 5}).json()
        assert other["trials"] == [] and other["retry_after"] > 0


def test_same_worker_asking_again_gets_its_running_trials(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine={"strategy": "bbkb", "mode": "async", "seed": 1})["id"]
        ask = {"worker_id": "w1", "count": 4}
        first = client.post(f"/v1/studies/{sid}/suggestions", json=ask).json()["trials"]
        again = client.post(f"/v1/studies/{sid}/suggestions", json=ask).json()["trials"]
        assert [t["id"] for t in again] == [t["id"] for t in first]
        other = client.post(f"/v1/studies/{sid}/suggestions",
                            json={"worker_id": "w2", "count": 4}).json()["trials"]
        assert not {t["id"] for t in other} & {t["id"] for t in first}


def test_complete_is_idempotent_and_conflicts_are_409(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w", "count": 1}).json()["trials"]
        url = f"/v1/studies/{sid}/trials/{trial['id']}/complete"
        assert client.post(url, json={"value": 1.5}).status_code == 200
        assert client.post(url, json={"value": 1.5}).status_code == 200
        conflict = client.post(url, json={"value": 2.5})
        assert conflict.status_code == 409 and conflict.json()["field"] == "value"


def test_failures_are_retried_then_abandoned(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, max_attempts=2)["id"]
        ask = {"worker_id": "w", "count": 1}
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions", json=ask).json()["trials"]
        fail = f"/v1/studies/{sid}/trials/{trial['id']}/fail"
        assert client.post(fail, json={"reason": "boom"}).json()["status"] == "pending"
        (again,) = client.post(f"/v1/studies/{sid}/suggestions", json=ask).json()["trials"]
        assert again["id"] == trial["id"] and again["attempt"] == 2
        final = client.post(fail, json={"reason": "boom again"}).json()
        assert final["status"] == "failed" and final["error"] == "boom again"
        # the engine was told: the sync batch is released and a new trial comes
        (new,) = client.post(f"/v1/studies/{sid}/suggestions", json=ask).json()["trials"]
        assert new["t"] == 1
        late = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                           json={"value": 1.0})
        assert late.status_code == 409


def test_non_retryable_failure_is_final_at_once(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w", "count": 1}).json()["trials"]
        r = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/fail",
                        json={"reason": "bad input", "retryable": False})
        assert r.json()["status"] == "failed" and r.json()["attempt"] == 1
        # who failed it stays on record (the trials table and the dashboard show it)
        assert r.json()["worker_id"] == "w"
        listed = client.get(f"/v1/studies/{sid}/trials", params={"status": "failed"}).json()
        assert [t["worker_id"] for t in listed["trials"]] == ["w"]


def test_warm_start_import_and_minimize(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, direction="minimize")["id"]
        X = candidates()
        values = [-objective(x) for x in X[:30]]
        r = client.post(f"/v1/studies/{sid}/observations", json={"observations": [
            {"candidate": i, "value": v} for i, v in enumerate(values)]})
        assert r.json() == {"imported": 30}
        best = client.get(f"/v1/studies/{sid}/best").json()
        assert best["value"] == min(values) and best["kind"] == "imported"
        trials = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "w", "count": 3}).json()["trials"]
        assert trials and trials[0]["t"] == 30
        bad = client.post(f"/v1/studies/{sid}/observations",
                          json={"observations": [{"candidate": 500, "value": 1.0}]})
        assert bad.status_code == 422 and bad.json()["field"] == "observations.0.candidate"


def test_search_space_study_names_its_parameters(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        body = {"name": "space", "n_candidates": 256, "search_space": [
            {"name": "lr", "low": 1e-4, "high": 1e-1, "log": True},
            {"name": "layers", "type": "int", "low": 1, "high": 4},
            {"name": "act", "type": "categorical", "choices": ["relu", "tanh"]}]}
        study = client.post("/v1/studies", json=body).json()
        assert study["dim"] == 4 and study["parameter_names"] == ["lr", "layers", "act"]
        (trial,) = client.post(f"/v1/studies/{study['id']}/suggestions",
                               json={"worker_id": "w"}).json()["trials"]
        p = trial["parameters"]
        assert 1e-4 <= p["lr"] <= 1e-1 and p["layers"] in {1, 2, 3, 4}
        assert p["act"] in {"relu", "tanh"}


def test_npy_upload_of_candidates(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        study = client.post("/v1/studies", json={"name": "big", "upload": True,
                                                 "parameter_names": ["a", "b", "c"]}).json()
        assert study["status"] == "awaiting_candidates"
        sid = study["id"]
        blocked = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w"})
        assert blocked.status_code == 409
        X = np.random.default_rng(0).random((70_000, 3))  # more than one stored block
        buffer = io.BytesIO()
        np.save(buffer, X)
        r = client.put(f"/v1/studies/{sid}/candidates", content=buffer.getvalue(),
                       headers={"content-type": "application/octet-stream"})
        assert r.status_code == 200 and r.json()["n_candidates"] == 70_000
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w"}).json()["trials"]
        np.testing.assert_array_equal(list(trial["parameters"].values()), X[trial["candidate"]])
        for candidate, value in ((69_001, 5.0), (3, 1.0)):  # rows of the second and first block
            client.post(f"/v1/studies/{sid}/observations",
                        json={"observations": [{"candidate": candidate, "value": value}]})
        best = client.get(f"/v1/studies/{sid}").json()["best"]
        assert best["candidate"] == 69_001
        np.testing.assert_array_equal(list(best["parameters"].values()), X[69_001])
        page = client.get(f"/v1/studies/{sid}/trials").json()["trials"]
        for t in page:
            np.testing.assert_array_equal(list(t["parameters"].values()), X[t["candidate"]])
        again = client.put(f"/v1/studies/{sid}/candidates", content=buffer.getvalue())
        assert again.status_code == 409
        bad = client.post("/v1/studies", json={"name": "bad", "upload": True}).json()
        r = client.put(f"/v1/studies/{bad['id']}/candidates", content=b"not numpy")
        assert r.status_code == 422 and r.json()["field"] == "body"


def test_trial_pagination_is_keyset_and_filterable(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine={"strategy": "uniform", "batch_size": 50})["id"]
        trials = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "w", "count": 50}).json()["trials"]
        for t in trials[:20]:
            client.post(f"/v1/studies/{sid}/trials/{t['id']}/complete", json={"value": 1.0})
        seen, after = [], -1
        while after is not None:
            page = client.get(f"/v1/studies/{sid}/trials",
                              params={"after": after, "limit": 7}).json()
            seen += [t["t"] for t in page["trials"]]
            after = page["next_after"]
        assert seen == list(range(50))
        completed = client.get(f"/v1/studies/{sid}/trials",
                               params={"status": "completed", "limit": 100}).json()["trials"]
        assert [t["t"] for t in completed] == list(range(20))


def test_csv_import_for_lab_spreadsheets(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]
        ok = client.post(f"/v1/studies/{sid}/observations.csv",
                         content="candidate,value,note\n3,0.5,a\n7,0.25,b\n",
                         headers={"content-type": "text/csv"})
        assert ok.json() == {"imported": 2}
        assert client.get(f"/v1/studies/{sid}/best").json()["candidate"] == 3
        bad = client.post(f"/v1/studies/{sid}/observations.csv", content="candidate,value\n1,x\n")
        assert bad.status_code == 422 and "line 2" in bad.json()["detail"]
        nohead = client.post(f"/v1/studies/{sid}/observations.csv", content="a,b\n1,2\n")
        assert nohead.status_code == 422 and "candidate" in nohead.json()["detail"]
        bom = client.post(f"/v1/studies/{sid}/observations.csv",  # a spreadsheet's UTF-8 BOM
                          content="\ufeffcandidate,value\n5,0.125\n".encode())
        assert bom.json() == {"imported": 1}, bom.text
        short = client.post(f"/v1/studies/{sid}/observations.csv",
                            content="candidate,value\n6,0.5\n8\n")
        assert short.status_code == 422, short.text
        assert short.json()["detail"] == "CSV line 3: fewer fields than the header's 2"
        outside = client.post(f"/v1/studies/{sid}/observations.csv",
                              content="candidate,value\n100000,1\n")
        assert outside.status_code == 422
        huge = client.post(f"/v1/studies/{sid}/observations.csv",
                           content='candidate,value\n"' + "x" * 200_000 + '",1\n')
        assert huge.status_code == 422 and "malformed CSV" in huge.json()["detail"]
        crlf = client.post(f"/v1/studies/{sid}/observations.csv",
                           content='candidate,value\r\n"9\r",0.1\r\n')  # no 500 either way
        assert crlf.status_code in (200, 422)
        assert client.get(f"/v1/studies/{sid}").json()["n_trials"] == 3 + (crlf.status_code == 200)


def test_a_stale_worker_cannot_fail_a_trial_another_worker_holds(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, max_attempts=3)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "a", "count": 1}).json()["trials"]
        fail = f"/v1/studies/{sid}/trials/{trial['id']}/fail"
        assert client.post(fail, json={"reason": "x", "worker_id": "a"}).json()["status"] \
            == "pending"
        assert client.post(fail, json={"reason": "again"}).json()["status"] == "pending"  # no-op
        client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "b", "count": 1})
        stale = client.post(fail, json={"reason": "late", "worker_id": "a"})
        assert stale.status_code == 409 and stale.json()["field"] == "worker_id"
        assert client.get(f"/v1/studies/{sid}/best").json() is None


def test_best_trial_in_the_study_direction_earliest_on_ties(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        for direction, expect in (("maximize", (5, 9.0)), ("minimize", (2, -1.0))):
            sid = create_study(client, name=direction, direction=direction)["id"]
            assert client.get(f"/v1/studies/{sid}/best").json() is None
            pairs = [(7, 3.0), (5, 9.0), (2, -1.0), (8, 9.0), (4, -1.0)]
            client.post(f"/v1/studies/{sid}/observations", json={"observations": [
                {"candidate": c, "value": v} for c, v in pairs]})
            best = client.get(f"/v1/studies/{sid}/best").json()
            assert (best["candidate"], best["value"]) == expect
            assert client.get(f"/v1/studies/{sid}").json()["best"]["candidate"] == expect[0]


def test_a_study_whose_every_candidate_failed_says_so(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = client.post("/v1/studies", json={
            "name": "doomed", "candidates": [[0.0], [1.0]], "max_attempts": 1,
            "engine": {"strategy": "uniform", "batch_size": 1, "mode": "sync"}}).json()["id"]
        failed = set()
        for _ in range(20):
            r = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w"})
            if r.status_code != 200:
                break
            (trial,) = r.json()["trials"]
            failed.add(trial["candidate"])
            client.post(f"/v1/studies/{sid}/trials/{trial['id']}/fail",
                        json={"reason": "crash", "retryable": False})
        assert failed == {0, 1}  # a failed candidate is not proposed again
        assert r.status_code == 422 and "every candidate has failed" in r.json()["detail"]
        again = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w"})
        assert again.status_code == 422  # and again, the study unchanged
        counts = client.get(f"/v1/studies/{sid}").json()["counts"]
        assert {k: v for k, v in counts.items() if v} == {"failed": 2}
