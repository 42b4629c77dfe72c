"""The ask/tell request path's bookkeeping: the study version, batch progress, requeued trials.

These are written with prebuilt Core statements (service.store.queries); the tests pin what they
record, on both databases.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
from sqlalchemy import func, insert, select

from service.store import queries
from service.store.database import make_engine, transaction
from service.store.migrate import ensure_schema
from service.store.models import Batch, Study, Trial, utcnow

from .helpers import app_client, create_study, objective


def _study_row(client, sid: int) -> Study:  # type: ignore[no-untyped-def]
    with transaction(client.app.state.sessions) as session:
        return session.get(Study, sid)


def test_each_change_bumps_the_version_once_and_the_cached_engine_follows(database_url,
                                                                          tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine={"strategy": "bbkb", "mode": "async", "seed": 1})["id"]
        before = _study_row(client, sid)
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w", "count": 1}).json()["trials"]
        runtime = client.app.state.runtimes._cache[sid]
        asked = _study_row(client, sid)
        assert asked.version == before.version + 1 == runtime.version
        assert asked.updated_at > before.updated_at and asked.updated_at.tzinfo is not None
        client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                    json={"value": objective(list(trial["parameters"].values()))})
        told = _study_row(client, sid)
        assert told.version == asked.version + 1 == runtime.version
        assert told.updated_at >= asked.updated_at
        # the cached engine was current: the next ask reuses it rather than rebuilding
        client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": 1})
        assert client.app.state.runtimes._cache[sid] is runtime


def test_batch_progress_sizes_and_closing_time_are_recorded(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]  # sync mode: batches close and wait for results
        for _ in range(30):
            answer = client.post(f"/v1/studies/{sid}/suggestions",
                                 json={"worker_id": "w", "count": 1}).json()
            for trial in answer["trials"]:
                client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                            json={"value": objective(list(trial["parameters"].values()))})
        trials = client.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()["trials"]
        batches = client.get(f"/v1/studies/{sid}/batches").json()["batches"]
        assert len(batches) >= 3
        for b in batches:
            assert b["size"] == sum(t["batch"] == b["index"] for t in trials)
        for b in batches[:-1]:
            assert b["stop_reason"] and b["closed_at"] is not None
            assert b["opened_at"] <= b["closed_at"]
        with transaction(client.app.state.sessions) as session:
            closed = {b.index: b.closed_at for b in session.scalars(
                select(Batch).where(Batch.study_id == sid))}
        # a closing time is written once: later asks leave it alone
        client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": 1})
        with transaction(client.app.state.sessions) as session:
            for b in session.scalars(select(Batch).where(Batch.study_id == sid)):
                if closed.get(b.index) is not None:
                    assert b.closed_at == closed[b.index]


def test_a_worker_gets_its_running_trials_then_requeued_ones(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine={"strategy": "bbkb", "mode": "async", "seed": 2})["id"]
        ask = lambda worker, n: client.post(  # noqa: E731
            f"/v1/studies/{sid}/suggestions", json={"worker_id": worker, "count": n}
        ).json()["trials"]
        mine = ask("a", 2)
        other = ask("b", 3)
        client.post(f"/v1/studies/{sid}/trials/{other[1]['id']}/fail",
                    json={"reason": "x", "retryable": True})
        client.post(f"/v1/studies/{sid}/trials/{other[0]['id']}/fail",
                    json={"reason": "x", "retryable": True})
        again = ask("a", 4)  # its 2 running ones, then the 2 requeued ones (t order)
        assert [t["id"] for t in again] == [t["id"] for t in mine] + [other[0]["id"],
                                                                        other[1]["id"]]
        assert [t["attempt"] for t in again[2:]] == [2, 2]
        assert [t["id"] for t in ask("a", 1)] == [mine[0]["id"]]  # at most count


def _folded(client, sid: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    with transaction(client.app.state.sessions) as session:
        return np.array(session.scalars(select(Trial.folded).where(Trial.study_id == sid)
                                        .order_by(Trial.t)).all())


def test_folded_outcomes_in_the_database_mirror_the_engine(database_url, tmp_path):
    """Imported, completed, failed, requeued and running trials across several batch openings:
    the database's ``folded`` column is the engine's (what a rebuild restores)."""
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine={"strategy": "bbkb", "mode": "async", "seed": 4})["id"]
        client.post(f"/v1/studies/{sid}/observations", json={"observations": [
            {"candidate": i, "value": 0.1 * i} for i in range(5)]}).raise_for_status()
        for i in range(60):
            trials = client.post(f"/v1/studies/{sid}/suggestions",
                                 json={"worker_id": f"w{i % 3}", "count": 2}).json()["trials"]
            first, second = trials
            client.post(f"/v1/studies/{sid}/trials/{first['id']}/complete",
                        json={"value": objective(list(first["parameters"].values()))})
            if i % 3 == 1:
                client.post(f"/v1/studies/{sid}/trials/{second['id']}/fail",
                            json={"reason": "x", "retryable": i % 2 == 0})
        engine = client.app.state.runtimes._cache[sid].strategy
        folded = engine.records["folded"]
        assert engine.batch >= 2 and len(np.unique(folded[folded >= 0])) >= 2
        np.testing.assert_array_equal(_folded(client, sid), folded)


def test_fold_outcomes_writes_exactly_the_given_records(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]
        now = utcnow()
        with transaction(client.app.state.sessions) as session:
            session.execute(insert(Trial), [
                {"study_id": sid, "t": t, "candidate": t, "batch": 0, "kind": "imported",
                 "status": "completed", "value": 1.0, "folded": -1, "var_start": 1.0,
                 "attempt": 0, "created_at": now} for t in range(10)])
            queries.fold_outcomes(session, sid, np.array([0, 1, 2, 5, 7, 8]),
                                  np.array([3, 3, 4, 4, 4, 4]))
            queries.fold_outcomes(session, sid, np.array([], dtype=np.int64),
                                  np.array([], dtype=np.int64))
        np.testing.assert_array_equal(_folded(client, sid), [3, 3, 4, -1, -1, 4, -1, 4, 4, -1])


#: The statements run per request or per read (trial pages, best trial, counts): each must
#: read an index range, never scan or sort a study's trials (the reads stay fast at 10^6 trials).
PAGES = {(name, descending): queries.page_statement(frozenset({name} if name else ()),
                                                    descending)
         for name in (*queries.PAGE_FILTERS, None) for descending in (False, True)}
STATEMENTS = (queries._FOLD_RUN, queries._RUNNING_FOR_WORKER, queries._REQUEUED,
              queries._BATCH_PROGRESS, queries._BUMP_VERSION, queries._RUNNING_ON,
              queries._NOT_COMPLETED, queries._LAST_T, queries._BEST_MAX, queries._BEST_MIN,
              queries._BEST_ROW, *PAGES.values())


def _sample(bind) -> object:  # type: ignore[no-untyped-def]
    kind = getattr(bind.type, "impl", bind.type).python_type  # impl: the UTC datetime columns
    return {int: 1, str: "x", float: 1.0, datetime: utcnow()}.get(kind, 1)


def _compiled(statement, engine) -> tuple[str, dict]:  # type: ignore[no-untyped-def]
    """The statement's SQL for ``engine`` with its IN (...) lists expanded, and its parameters:
    the given ones, else a sample value of the column's type."""
    compiled = statement.compile(engine)
    expanded = compiled.construct_expanded_state({
        name: value if value is not None else _sample(compiled.binds[name])
        for name, value in compiled.params.items()})
    return expanded.statement, expanded.parameters


def test_request_path_statements_search_an_index(tmp_path):
    """SQLite's plans of the per-request statements: index searches, never a scan of trials
    nor a sort; a filtered trial page searches an index on its filter column."""
    engine = make_engine(f"sqlite:///{tmp_path / 'plans.db'}")
    ensure_schema(engine, auto_upgrade=True)
    with engine.connect() as connection:
        def plan(statement) -> list[str]:  # type: ignore[no-untyped-def]
            sql = _compiled(statement, engine)[0]
            return [row[3] for row in connection.exec_driver_sql(
                f"EXPLAIN QUERY PLAN {sql}", (1,) * sql.count("?"))]
        for statement in STATEMENTS:
            steps = plan(statement)
            assert steps and all(step.startswith("SEARCH") for step in steps), (statement,
                                                                                 steps)
        for (name, descending), statement in PAGES.items():
            (step,) = plan(statement)  # newest first: the same range, no sort
            bound = "t<?" if descending else "t>?"
            assert f"study_id=? AND {name}=? AND {bound}" in step if name else \
                f"study_id=? AND {bound}" in step, step
        (step,) = plan(queries._FOLD_RUN)
        assert "study_id=? AND t>? AND t<?" in step  # a range of t, not the study's trials
    engine.dispose()


def test_request_path_statements_search_an_index_on_postgresql(pg_database_url):
    """PostgreSQL's plans of the same statements (sequential scans priced out, as a planner
    facing 10^6 rows would): index scans only, no sort, a trial page's filter in the index
    condition."""
    engine = make_engine(pg_database_url)
    ensure_schema(engine, auto_upgrade=True)
    with engine.connect() as connection:
        connection.exec_driver_sql("SET enable_seqscan = off")
        def plan(statement) -> str:  # type: ignore[no-untyped-def]
            sql, values = _compiled(statement, engine)
            return "\n".join(row[0] for row in connection.exec_driver_sql(f"EXPLAIN {sql}",
                                                                          values))
        for statement in STATEMENTS:
            text = plan(statement)
            assert "Index" in text and "Seq Scan" not in text and "Sort" not in text, text
        for (name, descending), statement in PAGES.items():
            text = plan(statement)
            conditions = [line for line in text.splitlines() if "Index Cond" in line]
            assert conditions and all(f"{name or 't'}" in line for line in conditions), conditions
            assert ("Index Scan Backward" in text) == descending, text  # newest first: no sort
    engine.dispose()


def test_status_counts_match_a_full_count(database_url, tmp_path):
    """GET study counts completed trials as n - the rest (t is dense): every status present."""
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine={"strategy": "bbkb", "mode": "async", "seed": 1,
                                           "kernel": {"name": "rbf", "lengthscale": 0.2}},
                           max_attempts=2)["id"]
        client.post(f"/v1/studies/{sid}/observations", json={"observations": [
            {"candidate": i, "value": 0.1 * i} for i in range(7)]})
        trials = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "w", "count": 6}).json()["trials"]
        url = f"/v1/studies/{sid}/trials"
        client.post(f"{url}/{trials[0]['id']}/complete", json={"value": 1.0})
        client.post(f"{url}/{trials[1]['id']}/complete", json={"value": 2.0})
        client.post(f"{url}/{trials[2]['id']}/fail", json={"reason": "x", "retryable": False})
        client.post(f"{url}/{trials[3]['id']}/fail", json={"reason": "x", "retryable": True})
        counts = client.get(f"/v1/studies/{sid}").json()["counts"]
        with transaction(client.app.state.sessions) as session:
            full = dict(session.execute(select(Trial.status, func.count()).where(
                Trial.study_id == sid).group_by(Trial.status)).all())
        assert counts == {"pending": 1, "running": 2, "completed": 9, "failed": 1,
                          "abandoned": 0}
        assert {s: n for s, n in counts.items() if n} == full
