"""GET .../trials filters (status, worker_id, batch, kind) across keyset pages in either order,
and parameter decoding from the candidates the runtime holds (no candidate block read)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from sqlalchemy import event

from service.store import queries
from service.store.arrays import BLOCK_ROWS
from service.store.database import transaction

from .helpers import app_client, create_study, objective

FILTERS = {"status": ["completed", "running", "pending", "failed"],
           "worker_id": ["w0", "w1", "nobody"], "batch": [0, 1, 2], "kind": ["suggested",
                                                                            "imported"]}


def _pages(client, url: str, **params) -> tuple[list[dict], int]:  # type: ignore[no-untyped-def]
    """Every trial of the listing, following next_after with pages of 3; and the page count."""
    out, after, pages = [], -1, 0
    while True:
        answer = client.get(url, params={"after": after, "limit": 3, **params})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        out += page["trials"]
        pages += 1
        if page["next_after"] is None:
            return out, pages
        assert page["next_after"] == page["trials"][-1]["t"]
        after = page["next_after"]


def _varied_study(client) -> int:  # type: ignore[no-untyped-def]
    """Imported and suggested trials of three workers over several batches, in every status."""
    sid = create_study(client, engine={"strategy": "bbkb", "mode": "async", "seed": 5,
                                       "kernel": {"name": "rbf", "lengthscale": 0.2}},
                       max_attempts=1)["id"]
    client.post(f"/v1/studies/{sid}/observations", json={"observations": [
        {"candidate": i, "value": 0.1 * i} for i in range(4)]}).raise_for_status()
    for i in range(24):
        trials = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": f"w{i % 3}", "count": 2}).json()["trials"]
        first = trials[0]
        if i % 4 == 3:
            client.post(f"/v1/studies/{sid}/trials/{first['id']}/fail",
                        json={"reason": "x", "retryable": False})
        else:
            client.post(f"/v1/studies/{sid}/trials/{first['id']}/complete",
                        json={"value": objective(list(first["parameters"].values()))})
        if i == 20:
            client.post(f"/v1/studies/{sid}/observations", json={"observations": [
                {"candidate": 7, "value": 0.5}]}).raise_for_status()
    return sid


def test_each_filter_and_pairs_of_them_across_pages(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = _varied_study(client)
        url = f"/v1/studies/{sid}/trials"
        everything = client.get(url, params={"limit": 1000}).json()["trials"]
        assert {t["batch"] for t in everything} >= {0, 1, 2}
        assert {t["kind"] for t in everything} == {"suggested", "imported"}
        assert {t["status"] for t in everything} >= {"completed", "running", "failed"}
        for name, values in FILTERS.items():
            for value in values:
                expected = [t for t in everything if t[name] == value]
                got, pages = _pages(client, url, **{name: value})
                assert got == expected, (name, value)
                assert pages == len(expected) // 3 + 1
        for pair in ({"worker_id": "w1", "status": "completed"},
                     {"kind": "suggested", "batch": 1},
                     {"status": "completed", "kind": "imported", "batch": 0}):
            expected = [t for t in everything if all(t[k] == v for k, v in pair.items())]
            assert expected
            assert _pages(client, url, **pair)[0] == expected, pair


def _newest_first(client, url: str, limit: int, **params) -> tuple[list[dict], int]:  # type: ignore[no-untyped-def]
    """Every trial of the listing with order=desc, from the newest (no after=) following
    next_after with pages of ``limit``; and the page count."""
    out: list[dict] = []
    cursor: dict[str, int] = {}
    pages = 0
    while True:
        answer = client.get(url, params={"order": "desc", "limit": limit, **cursor, **params})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert len(page["trials"]) <= limit
        out += page["trials"]
        pages += 1
        if page["next_after"] is None:
            return out, pages
        assert page["next_after"] == page["trials"][-1]["t"]
        cursor = {"after": page["next_after"]}


def test_newest_first_pages_are_the_ascending_list_reversed(database_url, tmp_path):
    """order=desc pages, alone or with filters, concatenate to the ascending listing reversed,
    whether the page size divides the count or not; order=asc is the default listing."""
    with app_client(database_url, tmp_path) as client:
        sid = _varied_study(client)
        url = f"/v1/studies/{sid}/trials"
        everything = client.get(url, params={"limit": 1000}).json()["trials"]
        assert client.get(url, params={"limit": 1000, "order": "asc"}).json()["trials"] == \
            everything
        divides = set()
        for params in ({}, {"status": "completed"}, {"status": "running"}, {"kind": "imported"},
                       {"worker_id": "w1", "status": "completed"}):
            ascending = [t for t in everything if all(t[k] == v for k, v in params.items())]
            assert len(ascending) >= 3, params
            assert _pages(client, url, **params)[0] == ascending, params
            for limit in (1, 2, 3, 4, 5, 7, len(ascending), len(ascending) + 1):
                got, pages = _newest_first(client, url, limit, **params)
                assert got == ascending[::-1], (params, limit)
                assert pages == len(ascending) // limit + 1  # a full last page: then an empty one
                divides.add(len(ascending) % limit == 0)
        assert divides == {True, False}

        # a keyset cursor: trials added meanwhile do not shift the older pages
        first = client.get(url, params={"order": "desc", "limit": 10}).json()
        client.post(f"/v1/studies/{sid}/suggestions",
                    json={"worker_id": "late", "count": 3}).raise_for_status()
        rest = client.get(url, params={"order": "desc", "limit": 1000,
                                       "after": first["next_after"]}).json()["trials"]
        assert first["trials"] + rest == everything[::-1]
        newest = client.get(url, params={"order": "desc", "limit": 1}).json()["trials"]
        assert newest[0]["t"] == everything[-1]["t"] + 3


def test_bad_order_or_cursor_is_422_naming_the_field(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]
        url = f"/v1/studies/{sid}/trials"
        for params, field, words in (
                ({"order": "sideways"}, "order", "'asc' or 'desc'"),
                ({"order": "DESC"}, "order", "'asc' or 'desc'"),
                ({"order": "desc", "after": -1}, "after", "omit it for the newest"),
                ({"order": "desc", "after": -7}, "after", "greater than or equal"),
                ({"after": -2}, "after", "greater than or equal"),
                ({"order": "desc", "after": "x"}, "after", "valid integer")):
            answer = client.get(url, params=params)
            assert answer.status_code == 422, (params, answer.text)
            assert answer.json()["field"] == field and words in answer.json()["detail"], params
        assert client.get(url, params={"order": "desc", "after": 0}).json() == {
            "trials": [], "next_after": None}


def test_bad_filters_are_422_naming_the_field(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]
        url = f"/v1/studies/{sid}/trials"
        for params, field in (({"kind": "guessed"}, "kind"), ({"batch": -1}, "batch"),
                              ({"batch": 2**40}, "batch"), ({"worker_id": "w" * 201}, "worker_id"),
                              ({"worker_id": ""}, "worker_id"), ({"worker_id": "a\x00b"},
                                                                 "worker_id"),
                              ({"status": "done"}, "status")):
            answer = client.get(url, params=params)
            assert answer.status_code == 422 and answer.json()["field"] == field, params


def test_a_page_decodes_from_the_runtime_candidates_without_reading_blocks(database_url,
                                                                          tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine={"strategy": "bbkb", "mode": "async", "seed": 1})["id"]
        client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": 5})
        statements: list[str] = []
        engine = client.app.state.sessions.kw["bind"]
        listen = lambda conn, cursor, sql, *rest: statements.append(sql)  # noqa: E731
        event.listen(engine, "before_cursor_execute", listen)
        try:
            held = client.get(f"/v1/studies/{sid}/trials").json()["trials"]
            assert statements and not any("candidate_blocks" in s for s in statements)
            client.app.state.runtimes.forget(sid)  # not held: the needed blocks are read
            read = client.get(f"/v1/studies/{sid}/trials").json()["trials"]
            assert any("candidate_blocks" in s for s in statements)
        finally:
            event.remove(engine, "before_cursor_execute", listen)
        assert len(held) == 5 and held == read


def test_candidate_rows_reads_the_rows_of_several_blocks(database_url, tmp_path):
    """Rows on both sides of a block boundary, the first and the last, in any order: the same
    as the stored matrix; a row past the end is a LookupError."""
    X = np.random.default_rng(3).random((BLOCK_ROWS + 70, 3))
    with app_client(database_url, tmp_path) as client:
        sid = client.post("/v1/studies", json={"name": "big", "upload": True, "engine": {
            "strategy": "bbkb", "mode": "async"}}).json()["id"]
        buffer = io.BytesIO()
        np.save(buffer, X)
        client.put(f"/v1/studies/{sid}/candidates", content=buffer.getvalue()).raise_for_status()
        rows = [BLOCK_ROWS + 69, 0, BLOCK_ROWS, 5, BLOCK_ROWS - 1, 40000]
        with transaction(client.app.state.sessions) as session:
            np.testing.assert_array_equal(queries.candidate_rows(session, sid, rows), X[rows])
            assert queries.candidate_rows(session, sid, []).shape[0] == 0
            with pytest.raises(LookupError):
                queries.candidate_rows(session, sid, [BLOCK_ROWS + 70])
            with pytest.raises(LookupError):
                queries.candidate_rows(session, sid, [3 * BLOCK_ROWS])
