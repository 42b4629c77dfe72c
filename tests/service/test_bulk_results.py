"""Many trials' results in one upload (a lab's sheet): ``POST .../results`` and
``.../results.csv``, on both databases."""

from __future__ import annotations

import csv
import io
import time

from .helpers import app_client, create_study, objective

ASYNC = {"strategy": "bbkb", "mode": "async", "seed": 5,
         "kernel": {"name": "rbf", "lengthscale": 0.2}, "lam": 0.5}


def _ask(client, sid: int, count: int, worker: str = "lab") -> list[dict]:  # type: ignore[no-untyped-def]
    answer = client.post(f"/v1/studies/{sid}/suggestions",
                         json={"worker_id": worker, "count": count})
    assert answer.status_code == 200, answer.text
    return answer.json()["trials"]


def _value(trial: dict) -> float:
    return objective(list(trial["parameters"].values()))


def _filled_export(client, sid: int, measured: set[int]) -> str:  # type: ignore[no-untyped-def]
    """The study's export with a value filled in for each trial id in ``measured``."""
    rows = list(csv.DictReader(io.StringIO(client.get(f"/v1/studies/{sid}/export").text)))
    for row in rows:
        if int(row["trial_id"]) in measured:
            params = [float(row[name]) for name in ("x0", "x1")]
            row["value"] = repr(objective(params))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _trials(client, sid: int) -> dict[int, dict]:  # type: ignore[no-untyped-def]
    page = client.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()
    return {t["id"]: t for t in page["trials"]}


def test_an_exported_sheet_filled_in_completes_its_trials_and_uploads_again_harmlessly(
        database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine=ASYNC)["id"]
        asked = _ask(client, sid, 6)
        measured = {t["id"] for t in asked[:4]}
        sheet = _filled_export(client, sid, measured)
        first = client.post(f"/v1/studies/{sid}/results.csv", content=sheet)
        assert first.status_code == 200, first.text
        assert first.json() == {"completed": 4, "failed": 0, "unchanged": 0, "skipped": 2}
        trials = _trials(client, sid)
        for trial in asked:
            done = trial["id"] in measured
            assert trials[trial["id"]]["status"] == ("completed" if done else "running")
            assert trials[trial["id"]]["value"] == (_value(trial) if done else None)
        again = client.post(f"/v1/studies/{sid}/results.csv", content=sheet)
        assert again.json() == {"completed": 0, "failed": 0, "unchanged": 4, "skipped": 2}
        # the rest measured later: the whole export again, the first four unchanged
        sheet = _filled_export(client, sid, {t["id"] for t in asked})
        rest = client.post(f"/v1/studies/{sid}/results.csv", content=sheet).json()
        assert rest == {"completed": 2, "failed": 0, "unchanged": 4, "skipped": 0}
        info = client.get(f"/v1/studies/{sid}").json()
        assert info["counts"]["completed"] == 6
        assert info["best"]["value"] == max(_value(t) for t in asked)


def test_a_sync_batch_opens_the_next_once_the_sheet_completes_it(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]  # sync mode
        trials = _ask(client, sid, 5)
        assert _ask(client, sid, 5, worker="other") == []  # batch 0 waits for its results
        body = {"results": [{"trial_id": t["id"], "value": _value(t)} for t in trials]}
        done = client.post(f"/v1/studies/{sid}/results", json=body)
        assert done.json() == {"completed": len(trials), "failed": 0, "unchanged": 0,
                               "skipped": 0}
        following = _ask(client, sid, 5, worker="other")
        assert following and {t["batch"] for t in following} == {1}


def test_a_refused_upload_changes_nothing_not_even_the_engine(database_url, tmp_path):
    """All or nothing: a sheet with one bad row leaves every trial as it was (its good rows'
    values too: other values are accepted after it), and the proposals that follow are those
    of a twin study (same seed and values) that never saw it."""
    with app_client(database_url, tmp_path) as client:
        proposals = []
        for refuse in (True, False):
            sid = create_study(client, name=f"refused-{refuse}", engine=ASYNC)["id"]
            asked = _ask(client, sid, 4)
            client.post(f"/v1/studies/{sid}/results",
                        json={"results": [{"trial_id": asked[0]["id"], "value": 0.5}]})
            rows = [{"trial_id": t["id"], "value": _value(t)} for t in asked[1:]]
            if refuse:
                for bad, status, field in (
                        ({"trial_id": asked[0]["id"], "value": 0.75}, 409, "results.3.value"),
                        ({"trial_id": 10**9, "value": 1.0}, 422, "results.3.trial_id"),
                        ({**rows[0], "value": 0.0}, 422, "results.3")):  # rows 0, 3 differ
                    other = [{**row, "value": row["value"] + 1.0} for row in rows]
                    answer = client.post(f"/v1/studies/{sid}/results",
                                         json={"results": other + [bad]})
                    assert (answer.status_code, answer.json()["field"]) == (status, field)
                trials = _trials(client, sid)
                assert [trials[t["id"]]["status"] for t in asked] == \
                    ["completed", "running", "running", "running"]
            later = client.post(f"/v1/studies/{sid}/results", json={"results": rows})
            assert later.json()["completed"] == 3
            proposals.append([t["candidate"] for t in _ask(client, sid, 8, worker="next")])
        assert proposals[0] == proposals[1]


def test_errors_fail_running_trials_as_fail_does(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine=ASYNC, max_attempts=2)["id"]
        a, b, c = _ask(client, sid, 3)
        answer = client.post(f"/v1/studies/{sid}/results", json={"results": [
            {"trial_id": a["id"], "error": "sample contaminated", "retryable": False},
            {"trial_id": b["id"], "error": "instrument offline"},  # retryable: back to the pool
            {"trial_id": c["id"], "value": 0.25}]})
        assert answer.json() == {"completed": 1, "failed": 2, "unchanged": 0, "skipped": 0}
        trials = _trials(client, sid)
        assert (trials[a["id"]]["status"], trials[a["id"]]["error"]) == \
            ("failed", "sample contaminated")
        assert trials[b["id"]]["status"] == "pending"
        assert trials[c["id"]]["status"] == "completed"
        # an error for a trial no longer running changes nothing; for a completed one, 409
        again = client.post(f"/v1/studies/{sid}/results", json={"results": [
            {"trial_id": a["id"], "error": "sample contaminated", "retryable": False},
            {"trial_id": b["id"], "error": "instrument offline"}]})
        assert again.json()["unchanged"] == 2
        conflict = client.post(f"/v1/studies/{sid}/results", json={"results": [
            {"trial_id": c["id"], "error": "oops"}]})
        assert (conflict.status_code, conflict.json()["field"]) == (409, "results.0.trial_id")
        late = client.post(f"/v1/studies/{sid}/results", json={"results": [
            {"trial_id": a["id"], "value": 1.0}]})  # failed for good: its result is not used
        assert late.status_code == 409


def test_another_studys_trial_is_not_found(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        first = create_study(client, name="first", engine=ASYNC)["id"]
        second = create_study(client, name="second", engine=ASYNC)["id"]
        (trial,) = _ask(client, first, 1)
        answer = client.post(f"/v1/studies/{second}/results",
                             json={"results": [{"trial_id": trial["id"], "value": 1.0}]})
        assert (answer.status_code, answer.json()["field"]) == (422, "results.0.trial_id")
        assert _trials(client, first)[trial["id"]]["status"] == "running"


def test_bad_bodies_are_422_naming_the_row_or_line(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine=ASYNC)["id"]
        (trial,) = _ask(client, sid, 1)
        url = f"/v1/studies/{sid}/results"
        for body, field in (
                ({"results": []}, "results"),
                ({"results": [{"trial_id": trial["id"]}]}, "results.0"),
                ({"results": [{"trial_id": trial["id"], "value": 1.0, "error": "x"}]},
                 "results.0"),
                ({"results": [{"trial_id": trial["id"], "value": "1.0"}]}, "results.0.value"),
                ({"results": [{"trial_id": trial["id"], "value": 1.0, "extra": 1}]},
                 "results.0.extra"),
                ({"rows": []}, "results")):
            answer = client.post(url, json=body)
            assert answer.status_code == 422, (body, answer.text)
            assert answer.json()["field"] == field, (body, answer.json())
        assert client.post(url, content=b"{not json").status_code == 422
        nan = client.post(url, content=b'{"results": [{"trial_id": 1, "value": NaN}]}')
        assert nan.status_code == 422
        for sheet, field, words in (
                ("trial_id,result\n1,2\n", "body", "value"),
                (f"trial_id,value\n{trial['id']},abc\n", "body.line2", "abc"),
                (f"trial_id,value\n{trial['id']},inf\n", "body.line2", "finite"),
                (f"trial_id,value,x\n{trial['id']}\n", "body.line2", "fewer fields")):
            answer = client.post(f"{url}.csv", content=sheet)
            assert answer.status_code == 422, (sheet, answer.text)
            assert answer.json()["field"] == field and words in answer.json()["detail"]
        assert _trials(client, sid)[trial["id"]]["status"] == "running"


def test_a_late_value_for_an_abandoned_trial_is_kept_as_its_complete_keeps_it(
        database_url, tmp_path):
    with app_client(database_url, tmp_path, reaper_interval=0.05) as client:
        sid = create_study(client, engine=ASYNC, max_attempts=1, lease_seconds=0.2)["id"]
        (trial,) = _ask(client, sid, 1)
        deadline = time.monotonic() + 10
        while _trials(client, sid)[trial["id"]]["status"] != "abandoned":
            assert time.monotonic() < deadline, "the lease was never reaped"
            time.sleep(0.05)
        answer = client.post(f"/v1/studies/{sid}/results",
                             json={"results": [{"trial_id": trial["id"], "value": 0.5}]})
        assert answer.json()["completed"] == 1, answer.text
        imported = client.get(f"/v1/studies/{sid}/trials", params={"kind": "imported"}).json()
        assert [(t["candidate"], t["value"]) for t in imported["trials"]] == \
            [(trial["candidate"], 0.5)]
        assert _trials(client, sid)[trial["id"]]["value"] == 0.5


def test_each_batch_shows_the_dictionary_it_used(database_url, tmp_path):
    """DESIGN's dictionary history: GET .../batches/{index} names the batch's inducing
    candidates; BBKB draws them from the arms pulled before the batch opened."""
    with app_client(database_url, tmp_path) as client:
        study = create_study(client, engine=ASYNC)
        sid = study["id"]
        for _ in range(6):
            trials = _ask(client, sid, 5)
            client.post(f"/v1/studies/{sid}/results", json={"results": [
                {"trial_id": t["id"], "value": _value(t)} for t in trials]})
        batches = client.get(f"/v1/studies/{sid}/batches").json()["batches"]
        trials = _trials(client, sid).values()
        candidates = client.get(f"/v1/studies/{sid}/export").text  # parameters by candidate
        rows = {int(r["candidate"]): (float(r["x0"]), float(r["x1"]))
                for r in csv.DictReader(io.StringIO(candidates))}
        assert len(batches) >= 2
        for listed in batches:
            detail = client.get(f"/v1/studies/{sid}/batches/{listed['index']}").json()
            assert {k: detail[k] for k in listed} == listed
            atoms = detail["dictionary"]
            assert len(atoms) == listed["dictionary_size"] and atoms == sorted(set(atoms))
            if listed["index"] > 0:  # resampled from the arms pulled before it opened
                pulled = {t["candidate"] for t in trials if t["t"] < listed["start_t"]}
                assert set(atoms) <= pulled and atoms
            for atom, parameters in zip(atoms, detail["dictionary_parameters"], strict=True):
                assert (parameters["x0"], parameters["x1"]) == rows[atom]
        missing = client.get(f"/v1/studies/{sid}/batches/{len(batches)}")
        assert (missing.status_code, missing.json()["field"]) == (404, "index")
        uniform = create_study(client, name="u", engine={"strategy": "uniform", "mode": "async"})
        _ask(client, uniform["id"], 2)
        assert client.get(f"/v1/studies/{uniform['id']}/batches/0").json()["dictionary"] == []


def test_refused_rows_are_named_by_their_row_and_csv_line(database_url, tmp_path):
    """A value beyond the engine's +-1e100 was refused by the engine in the middle of the
    upload, naming only ``value``; and a CSV row's error named its place among the rows with
    a value, not its line. Both now name the row (the CSV line, blank rows counted), before
    anything changed."""
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine=ASYNC)["id"]
        a, b, c = _ask(client, sid, 3)
        huge = client.post(f"/v1/studies/{sid}/results", json={"results": [
            {"trial_id": a["id"], "value": 1.0}, {"trial_id": b["id"], "value": -2e100}]})
        assert (huge.status_code, huge.json()["field"]) == (422, "results.1.value")
        assert "1e+100" in huge.json()["detail"] and huge.json()["detail"].startswith("result 1")
        observed = client.post(f"/v1/studies/{sid}/observations", json={"observations": [
            {"candidate": 0, "value": 1.0}, {"candidate": 1, "value": 3e100}]})
        assert (observed.status_code, observed.json()["field"]) == (422, "observations.1.value")
        done = client.post(f"/v1/studies/{sid}/results",
                           json={"results": [{"trial_id": c["id"], "value": 0.5}]})
        assert done.status_code == 200
        sheet = f"trial_id,value\n{a['id']},\n{b['id']},\n{c['id']},9\n"  # c has 0.5 already
        conflict = client.post(f"/v1/studies/{sid}/results.csv", content=sheet)
        assert (conflict.status_code, conflict.json()["field"]) == (409, "body.line4.value")
        assert conflict.json()["detail"].startswith("CSV line 4: ")
        sheet = f"trial_id,value\n{a['id']},1\n{b['id']},\n{a['id']},2\n"
        twice = client.post(f"/v1/studies/{sid}/results.csv", content=sheet)
        assert (twice.status_code, twice.json()["field"]) == (422, "body.line4")
        assert "CSV line 2 and CSV line 4" in twice.json()["detail"]
        trials = _trials(client, sid)
        assert [trials[t["id"]]["status"] for t in (a, b, c)] == \
            ["running", "running", "completed"]
        assert client.post(f"/v1/studies/{sid}/results", json={"results": [
            {"trial_id": a["id"], "value": 1.0}]}).json()["completed"] == 1  # engine intact


def test_csv_ids_are_ascii_integers_and_columns_appear_once(database_url, tmp_path):
    """int() read "1_0" as 10 and "\u0662" (Arabic-Indic two) as 2, and of two ``value``
    columns DictReader kept the last: each now a 422 naming the line or the header."""
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine=ASYNC)["id"]
        (trial,) = _ask(client, sid, 1)
        url = f"/v1/studies/{sid}"
        for sheet, field in (
                (f"trial_id,value\n0_{trial['id']},1\n", "body.line2"),  # int(): the id
                ("trial_id,value\n\u0662,1\n", "body.line2"),
                (f"trial_id,value,value\n{trial['id']},1,2\n", "body")):
            answer = client.post(f"{url}/results.csv", content=sheet.encode())
            assert (answer.status_code, answer.json()["field"]) == (422, field), answer.text
        for sheet, field in (("candidate,value\n1_0,1\n", "body.line2"),
                             ("candidate,candidate,value\n1,2,1\n", "body")):
            answer = client.post(f"{url}/observations.csv", content=sheet.encode())
            assert (answer.status_code, answer.json()["field"]) == (422, field), answer.text
        assert _trials(client, sid)[trial["id"]]["status"] == "running"
        ok = client.post(f"{url}/results.csv", content=f"trial_id,value\n {trial['id']} ,1\n")
        assert ok.json()["completed"] == 1


def test_a_csv_line_counts_blank_lines_and_quoted_line_breaks(database_url, tmp_path):
    """The line was the row's place among the rows (DictReader skips blank lines, and a quoted
    cell may span lines): "CSV line 3" for a row on line 4."""
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine=ASYNC)["id"]
        (trial,) = _ask(client, sid, 1)
        for sheet, line in ((f"trial_id,value\n\n{trial['id']},abc\n", 3),
                            (f'trial_id,value,note\n{trial["id"]},1,"a\nb"\n\n'
                             f"{trial['id']},abc,x\n", 5)):
            answer = client.post(f"/v1/studies/{sid}/results.csv", content=sheet)
            assert answer.status_code == 422, answer.text
            assert answer.json()["field"] == f"body.line{line}", answer.json()
            assert answer.json()["detail"].startswith(f"CSV line {line}:")
