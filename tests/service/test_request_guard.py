"""Checks made before the app reads a body (service/api/guards.py and the small routes' body
limit), found by the security review: a body of hundreds of megabytes with no key at all was
parsed before its 401 (9.5 s, +1.1 GB, /healthz waiting meanwhile); without API keys any web
page the user visited could post results or pause studies through the browser."""

from __future__ import annotations

import numpy as np

from service.auth import create_key
from service.store.database import transaction

from .helpers import app_client, create_study


def test_a_write_without_a_key_is_refused_before_its_body_is_read(tmp_path):
    with app_client(f"sqlite:///{tmp_path / 'g.db'}", tmp_path, auth="keys") as client:
        chunks_read = []

        def body():  # a chunked body: the guard answers without reading it
            for _ in range(64):
                chunks_read.append(1)
                yield b" " * 2**20

        answer = client.post("/v1/studies/1/suggestions", content=body(),
                             headers={"content-type": "application/json"})
        assert answer.status_code == 401 and answer.json() == {
            "detail": "missing 'Authorization: Bearer <api key>' header",
            "field": "authorization"}
        assert len(chunks_read) < 64  # not the whole 64 MB
        assert client.get("/v1/studies").status_code == 401  # reads: the routes' own check
        with transaction(client.app.state.sessions) as session:
            key = create_key(session, "lab")
        headers = {"Authorization": f"Bearer {key}"}
        sid = client.post("/v1/studies", headers=headers, json={
            "name": "s", "candidates": np.random.default_rng(0).random((20, 2)).tolist()}
        ).json()["id"]
        ask = client.post(f"/v1/studies/{sid}/suggestions", headers=headers,
                          json={"worker_id": "w"})
        assert ask.status_code == 200, ask.text
        big = client.post(f"/v1/studies/{sid}/suggestions", headers=headers,
                          json={"worker_id": "w", "padding": "x" * 2**20})
        assert big.status_code == 413 and big.json()["detail"] == "body larger than 1048576 bytes"


def test_without_keys_a_write_from_another_origin_is_refused(tmp_path):
    with app_client(f"sqlite:///{tmp_path / 'o.db'}", tmp_path) as client:  # auth none
        sid = create_study(client)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w"}).json()["trials"]
        page = {"origin": "http://localhost:8126"}  # what a browser adds to a page's fetch
        forged = client.post(f"/v1/studies/{sid}/results.csv", headers=page,
                             content=f"trial_id,value\n{trial['id']},123456\n")
        assert forged.status_code == 403 and forged.json()["field"] == "origin"
        assert client.post(f"/v1/studies/{sid}/pause", headers=page).status_code == 403
        assert client.get(f"/v1/studies/{sid}").json()["status"] == "active"
        assert client.get(f"/v1/studies/{sid}", headers=page).status_code == 200  # reads pass
        same = {"origin": "http://testserver"}  # the server's own page
        assert client.post(f"/v1/studies/{sid}/pause", headers=same).status_code == 200
        assert client.post(f"/v1/studies/{sid}/resume").status_code == 200  # tools: no Origin


def test_text_a_spreadsheet_would_run_is_exported_as_text(tmp_path):
    """Names, choices, worker ids and errors reached the CSV export raw: a cell beginning with
    = + - @ runs as a formula when a lab opens the file (``=HYPERLINK(...)`` in an error a
    worker reported). Such text now starts with an apostrophe; numbers are as they were."""
    import csv
    import io

    from service.api.schemas import spreadsheet_text

    space = [{"name": "=cmd", "low": -1, "high": 0},
             {"name": "kind", "type": "categorical", "choices": ["=1+2", "@x", "plain"]}]
    with app_client(f"sqlite:///{tmp_path / 'c.db'}", tmp_path) as client:
        sid = client.post("/v1/studies", json={"name": "s", "search_space": space,
                                               "n_candidates": 8}).json()["id"]
        trials = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "=w", "count": 2}).json()["trials"]
        base = f"/v1/studies/{sid}/trials"
        client.post(f"{base}/{trials[0]['id']}/fail",
                    json={"reason": '=HYPERLINK("http://x")', "retryable": False})
        client.post(f"{base}/{trials[1]['id']}/complete", json={"value": -0.5})
        rows = list(csv.reader(io.StringIO(client.get(f"/v1/studies/{sid}/export").text)))
    header, failed, done = rows[0], rows[1], rows[2]
    assert header[-2:] == ["'=cmd", "param_kind"]  # (kind is a trial field)
    column = dict(zip(header, done, strict=True))
    assert column["value"] == "-0.5" and float(column["'=cmd"]) < 0  # numbers untouched
    assert column["worker_id"] == "'=w"
    assert dict(zip(header, failed, strict=True))["error"].startswith("'=HYPERLINK")
    assert column["param_kind"] in ("'=1+2", "'@x", "plain")
    assert [spreadsheet_text(v) for v in ("-3", "+1", "\ttab", "a=b", 7, -1.5)] == [
        "'-3", "'+1", "'\ttab", "a=b", 7, -1.5]


def test_an_upload_to_a_study_not_awaiting_it_is_refused_before_it_is_read(tmp_path):
    """PUT .../candidates read and parsed the whole .npy (up to BBKB_MAX_UPLOAD_BYTES, 2 GiB by
    default: several GB of memory) before its 404 for another owner's study, or its 409."""
    with app_client(f"sqlite:///{tmp_path / 'u.db'}", tmp_path, auth="keys") as client:
        with transaction(client.app.state.sessions) as session:
            mine, theirs = create_key(session, "a"), create_key(session, "b")
        sid = client.post("/v1/studies", headers={"Authorization": f"Bearer {theirs}"},
                          json={"name": "s", "upload": True}).json()["id"]
        for key, status in ((mine, 404), (theirs, 200)):
            read: list[int] = []

            def body(read: list[int] = read):  # type: ignore[no-untyped-def]
                for _ in range(32):
                    read.append(1)
                    yield b"\0" * 2**20

            answer = client.put(f"/v1/studies/{sid}/candidates", content=body(),
                                headers={"Authorization": f"Bearer {key}"})
            if status == 404:
                assert answer.status_code == 404 and len(read) < 32, (answer.text, len(read))
            else:  # its owner's upload is read (and refused: not a .npy file)
                assert answer.status_code == 422 and len(read) == 32, answer.text


def test_an_import_or_results_upload_to_another_owners_study_is_a_404_before_it_is_read(
        tmp_path):
    """The four table uploads (observations and results, JSON and CSV) read and parsed their
    body (up to BBKB_MAX_JSON_BYTES) before the study was looked up: another owner's study
    answered the body's first error (422), or a 404 only after the whole read."""
    with app_client(f"sqlite:///{tmp_path / 'r.db'}", tmp_path, auth="keys") as client:
        with transaction(client.app.state.sessions) as session:
            mine, theirs = create_key(session, "a"), create_key(session, "b")
        sid = client.post("/v1/studies", headers={"Authorization": f"Bearer {theirs}"},
                          json={"name": "s", "candidates": [[0.0], [1.0]]}).json()["id"]
        for route in ("observations", "observations.csv", "results", "results.csv"):
            read: list[int] = []

            def body(read: list[int] = read):  # type: ignore[no-untyped-def]
                for _ in range(32):  # not JSON, not a CSV with the needed columns
                    read.append(1)
                    yield b"x" * 2**20

            answer = client.post(f"/v1/studies/{sid}/{route}", content=body(),
                                 headers={"Authorization": f"Bearer {mine}"})
            assert answer.status_code == 404 and len(read) < 32, (route, answer.text, len(read))
            # its owner's upload is read and refused for what it holds
            answer = client.post(f"/v1/studies/{sid}/{route}", content=b"x" * 100,
                                 headers={"Authorization": f"Bearer {theirs}"})
            assert answer.status_code == 422, (route, answer.text)
