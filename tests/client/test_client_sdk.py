"""The SDK against the real app (in-process): round trips, errors, retries, uploads, paging."""

from __future__ import annotations

import csv
import subprocess
import sys

import httpx2
import numpy as np
import pytest

import client
from client import (
    APIError,
    AuthenticationError,
    BBKBError,
    Client,
    ConflictError,
    InvalidArgument,
    NotFoundError,
    ServerUnavailable,
    ValidationError,
)
from service.processes import free_port


def test_create_ask_tell_best_round_trip(study):
    info = study.info
    assert info.status == "active" and info.n_candidates == 120
    assert study.parameter_names == ["x0", "x1"]
    assert study.best() is None
    (trial,) = study.ask("w1").trials
    assert set(trial.parameters) == {"x0", "x1"} and trial.status == "running"
    done = study.tell(trial.id, 0.75, worker_id="w1")
    assert done.status == "completed" and done.value == 0.75
    assert study.tell(trial.id, 0.75).status == "completed"  # same value again: a no-op
    assert study.best().id == trial.id
    assert study.trial(trial.id).value == 0.75
    assert study.info.counts["completed"] == 1


def test_fail_and_heartbeat(study):
    (trial,) = study.ask("w").trials
    assert study.heartbeat(trial.id, "w").lease_expires_at > trial.lease_expires_at
    assert study.fail(trial.id, "boom").status == "pending"
    (again,) = study.ask("w").trials
    assert again.id == trial.id and again.attempt == 2
    final = study.fail(trial.id, "bad input", retryable=False)
    assert final.status == "failed" and final.error == "bad input"


def test_errors_carry_status_detail_and_field(bbkb, study):
    with pytest.raises(NotFoundError) as missing:
        bbkb.study(99_999)
    assert missing.value.status_code == 404 and missing.value.field == "study_id"
    assert "study 99999 not found" in str(missing.value) and "study_id" in str(missing.value)
    (trial,) = study.ask().trials
    study.tell(trial.id, 1.0)
    with pytest.raises(ConflictError) as conflict:
        study.tell(trial.id, 2.0)
    assert conflict.value.status_code == 409 and conflict.value.field == "value"
    with pytest.raises(ConflictError, match="already exists"):
        bbkb.create_study("s", candidates=[[0.0], [1.0]])
    with pytest.raises(ValidationError) as invalid:
        bbkb.create_study("bad", candidates=[[0.0], [1.0]], engine={"strategy": "nope"})
    assert invalid.value.status_code == 422 and invalid.value.field == "engine.strategy"
    with pytest.raises(ValidationError) as outside:
        study.import_observations([(500, 1.0)])
    assert outside.value.field == "observations.0.candidate"
    for cls in (NotFoundError, ConflictError, ValidationError, AuthenticationError):
        assert issubclass(cls, APIError) and issubclass(cls, BBKBError)
    assert issubclass(ServerUnavailable, BBKBError) and not issubclass(ServerUnavailable, APIError)


def test_local_argument_errors_are_value_errors(study):
    (trial,) = study.ask().trials
    with pytest.raises(ValueError):
        study.tell(trial.id, float("nan"))
    with pytest.raises(ValueError):
        study.ask(count=0)


def test_a_count_given_as_the_worker_id_is_a_type_error(study):
    """The audit: study.ask(5) sent worker_id 5 and raised InvalidArgument "worker_id: Input
    should be a valid string". The first positional argument stays the worker's id (callers
    write ask("w")), so a count there is a TypeError saying how to ask for 5, before any
    request; keyword and string callers are unchanged."""
    with pytest.raises(TypeError, match=r"worker_id must be a str or None, not int; for 5 "
                                        r"trials call ask\(count=5\)"):
        study.ask(5)
    with pytest.raises(TypeError, match="not float$"):
        study.ask(2.0)
    with pytest.raises(TypeError, match="not bool$"):
        study.ask(True)
    assert study.info.counts.get("running", 0) == 0  # nothing was sent
    assert len(study.ask(count=2).trials) == 2
    assert len(study.ask("w", 3).trials) == 3
    assert len(study.ask(worker_id="w", count=3).trials) == 3  # its running trials again


def test_api_keys_401_and_env(tmp_path, make_app, monkeypatch):
    from fastapi.testclient import TestClient

    from service.auth import create_key
    from service.store.database import transaction

    app = make_app(tmp_path, auth="keys")
    with TestClient(app) as http:
        with transaction(app.state.sessions) as session:
            token = create_key(session, "alice")
        with pytest.raises(AuthenticationError) as denied:
            Client(http=http).studies()
        assert denied.value.status_code == 401 and denied.value.field == "authorization"
        with pytest.raises(AuthenticationError, match="unknown or revoked"):
            Client(http=http, api_key="bbkb_wrong").studies()
        assert Client(http=http, api_key=token).studies() == []
        monkeypatch.setenv("BBKB_API_KEY", token)
        Client(http=http).create_study("mine", candidates=[[0.0], [1.0]])
        assert [s.name for s in Client(http=http).studies()] == ["mine"]


def test_connection_errors_and_503_are_retried(relayed):
    sdk, relay = relayed(["connect", "503", "connect"])
    assert sdk.studies() == []
    assert [c[2] for c in relay.calls] == ["connect", "503", "connect", "ok"]


def test_4xx_is_never_retried(relayed):
    sdk, relay = relayed()
    with pytest.raises(NotFoundError):
        sdk.study(7)
    assert len(relay.calls) == 1


def test_tell_whose_answer_was_lost_is_retried_safely(relayed):
    sdk, relay = relayed()
    study = sdk.create_study("s", candidates=np.eye(3))
    (trial,) = study.ask().trials
    relay.plan = ["lost"]  # the server completes the trial, the answer never arrives
    assert study.tell(trial.id, 2.5).status == "completed"
    completes = [c for c in relay.calls if c[1].endswith("/complete")]
    assert [c[2] for c in completes] == ["lost", "ok"]
    assert study.info.counts["completed"] == 1


def test_non_idempotent_requests_are_not_retried_after_sending(relayed):
    sdk, relay = relayed(["lost"])
    with pytest.raises(ServerUnavailable, match="may have reached the server") as lost:
        sdk.create_study("s", candidates=np.eye(3))
    assert lost.value.attempts == 1
    assert [s.name for s in sdk.studies()] == ["s"]  # it was applied: a retry would be a 409
    relay.plan = ["connect"]  # never sent: safe to retry any request
    assert sdk.create_study("t", candidates=np.eye(3)).name == "t"


def test_closed_port_raises_server_unavailable_after_retries():
    with Client(f"http://127.0.0.1:{free_port()}", retries=2, backoff=0.01) as sdk:
        with pytest.raises(ServerUnavailable, match="after 3 attempt") as down:
            sdk.studies()
    assert down.value.attempts == 3 and down.value.status_code is None


def test_open_and_closed_state(app_http, monkeypatch):
    monkeypatch.delenv("BBKB_URL", raising=False)
    assert Client().url == "http://127.0.0.1:8000"
    monkeypatch.setenv("BBKB_URL", "http://bbkb.example:9000/")
    assert Client().url == "http://bbkb.example:9000"
    with pytest.raises(ValueError, match="http://"):
        Client("127.0.0.1:8000")
    sdk = Client(http=app_http)
    assert sdk.url == "http://testserver" and not sdk.is_closed
    with sdk:
        sdk.studies()
    assert sdk.is_closed and "closed" in repr(sdk)
    with pytest.raises(RuntimeError, match="closed"):
        sdk.studies()
    with pytest.raises(RuntimeError, match="reopen"):
        sdk.__enter__()
    assert app_http.get("/healthz").status_code == 200  # an injected client stays open


def test_large_numpy_matrix_is_uploaded_as_npy(relayed):
    sdk, relay = relayed()
    X = np.random.default_rng(1).random((60_000, 2))
    study = sdk.create_study("big", candidates=X, parameter_names=["a", "b"])
    assert study.info.n_candidates == 60_000 and study.parameter_names == ["a", "b"]
    (create, put) = relay.calls[:2]
    assert create[:2] == ("POST", "/v1/studies") and create[3] < 10_000
    assert put[:2] == ("PUT", f"/v1/studies/{study.id}/candidates") and put[3] >= X.nbytes
    (trial,) = study.ask().trials
    np.testing.assert_array_equal([trial.parameters["a"], trial.parameters["b"]],
                                  X[trial.candidate])
    relay.calls.clear()
    sdk.create_study("small", candidates=X[:100].tolist())
    assert [c[0] for c in relay.calls] == ["POST"]  # inline JSON


def test_failed_upload_leaves_no_half_created_study(bbkb):
    X = np.random.default_rng(1).random((60_000, 2))
    X[5, 1] = np.nan
    with pytest.raises(ValidationError) as bad:
        bbkb.create_study("big", candidates=X)
    assert bad.value.field == "body"
    assert bbkb.studies() == []


def _many_trials(sdk, relay, name: str):  # type: ignore[no-untyped-def]
    """A study with 250 trials handed out (t 0..249), the first 100 completed (value t)."""
    study = sdk.create_study(name, candidates=np.random.default_rng(0).random((400, 2)),
                             engine={"strategy": "uniform", "batch_size": 300})
    asked = study.ask("w", count=250).trials
    for trial in asked[:100]:
        study.tell(trial.id, float(trial.t))
    relay.calls.clear()
    return study


def test_trials_follow_pages(bbkb, relayed):
    sdk, relay = relayed()
    study = _many_trials(sdk, relay, "many")
    every = list(study.trials(page_size=100))
    assert [t.t for t in every] == list(range(250))
    assert sum(c[1].endswith("/trials") for c in relay.calls) == 3
    completed = list(study.trials(status="completed", page_size=30))
    assert [t.value for t in completed] == [float(t) for t in range(100)]


def test_trials_newest_first_page_by_page(bbkb, relayed):
    sdk, relay = relayed()
    study = _many_trials(sdk, relay, "recent")
    newest = list(study.trials(page_size=100, newest_first=True))
    assert [t.t for t in newest] == list(range(249, -1, -1))
    assert sum(c[1].endswith("/trials") for c in relay.calls) == 3
    completed = list(study.trials(status="completed", page_size=30, newest_first=True))
    assert [t.value for t in completed] == [float(t) for t in range(99, -1, -1)]
    relay.calls.clear()
    latest = next(study.trials(page_size=5, newest_first=True))  # one page, not every trial
    assert latest.t == 249 and sum(c[1].endswith("/trials") for c in relay.calls) == 1


def test_records_dataframe_and_csv(bbkb, tmp_path):
    space = [{"name": "lr", "low": 1e-4, "high": 1e-1, "log": True},
             {"name": "value", "type": "int", "low": 1, "high": 4}]  # clashes with a field
    study = bbkb.create_study("space", search_space=space, n_candidates=64)
    for trial in study.ask("w", count=3).trials:
        study.tell(trial.id, trial.parameters["lr"])
    running = study.ask("w").trials[0]
    records = [r for r in study.records() if r["trial_id"] != running.id]
    assert len(records) == 3 and records[0]["trial_id"] >= 1
    assert {"lr", "param_value", "value", "status"} <= set(records[0])
    assert all(r["value"] == r["lr"] for r in records)
    path = study.export_csv(tmp_path / "out.csv")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header, rows = reader.fieldnames, list(reader)
    # the export's columns are the records' (it lacked lease_expires_at)
    assert header == list(records[0])
    leased = next(r for r in rows if int(r["trial_id"]) == running.id)
    assert leased["status"] == "running" and leased["lease_expires_at"]
    rows = [r for r in rows if r is not leased]
    assert sorted(float(r["lr"]) for r in rows) == sorted(r["lr"] for r in records)
    # the server's export names the clashing parameter as the records do (it used to write a
    # second "value" column, which csv.DictReader took for the result)
    assert all(float(r["value"]) == float(r["lr"]) for r in rows)
    assert sorted(int(r["param_value"]) for r in rows) == sorted(r["param_value"] for r in records)
    pd = pytest.importorskip("pandas")
    frame = study.dataframe()
    assert isinstance(frame, pd.DataFrame) and frame.shape[0] == 4
    assert list(frame.columns[-2:]) == ["lr", "param_value"]


def test_an_export_keeps_links_modes_and_pipes(bbkb, tmp_path):
    """Writing beside the path and renaming (so that a broken download leaves no half file)
    replaced a symlink by a file, a pipe's reader got nothing, a 0600 file became 0644, and a
    name near the file system's limit failed (the temporary one was longer); now the link's file
    is replaced, a pipe is written to, the mode is kept and the longest name works."""
    import os
    import stat
    import threading

    study = bbkb.create_study("paths", candidates=np.eye(3))
    study.import_observations([(0, 1.0), (1, 2.0)])
    real = tmp_path / "real.csv"
    real.write_text("older\n")
    real.chmod(0o600)
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    assert study.export_csv(link) == link
    assert link.is_symlink() and real.read_text().startswith("trial_id,")
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_bytes()), daemon=True)
    reader.start()
    study.export_csv(pipe)
    reader.join(timeout=60)
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert received and received[0].decode().count("\n") == 3  # the header and 2 trials
    # /dev/stdout into a pipe: a link to /proc/self/fd/1, which resolves to "pipe:[N]", no
    # file name at all (the temporary file beside it could not be created)
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as source:
        drain = threading.Thread(target=lambda: received.append(source.read()), daemon=True)
        drain.start()
        try:
            study.export_csv(f"/proc/self/fd/{write_end}")
        finally:
            os.close(write_end)  # the reader's end of file
        drain.join(timeout=60)
    assert len(received) == 2 and received[1].decode().count("\n") == 3
    longest = tmp_path / ("x" * (os.pathconf(tmp_path, "PC_NAME_MAX") - 4) + ".csv")
    assert study.export_csv(longest).read_text().count("\n") == 3  # its temporary name fits
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]  # and is gone


def test_an_export_cut_off_raises_server_unavailable_and_leaves_the_path_alone(relayed,
                                                                             tmp_path):
    """A connection lost mid-download leaked httpx2's ReadError and left half a CSV at the
    path (here over an older export); now ServerUnavailable, and the file is replaced only by
    a complete export."""
    sdk, relay = relayed()
    study = sdk.create_study("cut", candidates=np.eye(3))
    study.import_observations([(0, 1.0), (1, 2.0), (2, 3.0)])
    folder = tmp_path / "exports"
    folder.mkdir()
    target = folder / "out.csv"
    target.write_text("older export\n")
    relay.plan = ["cut"]
    with pytest.raises(ServerUnavailable, match="ReadError: connection reset"):
        study.export_csv(target)
    assert [p.name for p in folder.iterdir()] == ["out.csv"]  # no partial file either
    assert target.read_text() == "older export\n"
    assert study.export_csv(target) == target
    with target.open(newline="") as handle:
        assert [float(r["value"]) for r in csv.DictReader(handle)] == [1.0, 2.0, 3.0]
    assert [p.name for p in folder.iterdir()] == ["out.csv"]
    with pytest.raises(FileNotFoundError) as missing:  # named by the path asked for
        study.export_csv(folder / "no" / "out.csv")
    assert missing.value.filename == str(folder / "no" / "out.csv")


def test_import_observations_forms(study):
    assert study.import_observations([(0, 1.0), (1, 2.0)]) == 2
    assert study.import_observations([{"candidate": 2, "value": 3.0}]) == 1
    assert study.import_observations({3: 0.5}) == 1
    best = study.best()
    assert best.kind == "imported" and best.value == 3.0 and best.candidate == 2


def test_tell_many_forms_failures_and_a_resend_whose_answer_was_lost(relayed, tmp_path):
    sdk, relay = relayed()
    study = sdk.create_study("s", candidates=np.eye(6), engine={"mode": "async"})
    a, b, c, d = study.ask(count=4).trials
    summary = study.tell_many({a.id: 1.0})
    assert (summary.completed, summary.unchanged) == (1, 0)
    relay.plan = ["lost"]  # values only: applied, the answer lost, sent again, nothing twice
    summary = study.tell_many([{"trial_id": a.id, "value": 1.0}, {"trial_id": b.id,
                                                                   "value": 2.0}])
    assert (summary.completed, summary.unchanged) == (0, 2)  # the resend found both done
    assert [call[2] for call in relay.calls if call[1].endswith("/results")][-2:] == \
        ["lost", "ok"]
    summary = study.tell_many([{"trial_id": c.id, "error": "spilled", "retryable": False}])
    assert summary.failed == 1 and study.trial(c.id).status == "failed"
    relay.plan = ["lost"]  # a failure is sent once: a resend could fail its next attempt
    with pytest.raises(ServerUnavailable):
        study.tell_many([{"trial_id": d.id, "error": "spilled"}])
    sheet = tmp_path / "sheet.csv"
    sheet.write_text(f"trial_id,value\n{d.id},\n{b.id},2.0\n")
    summary = study.upload_results_csv(sheet)
    assert (summary.completed, summary.unchanged, summary.skipped) == (0, 1, 1)
    with pytest.raises(ConflictError) as conflict:
        study.tell_many({b.id: 3.0})
    assert conflict.value.field == "results.0.value"
    with pytest.raises(InvalidArgument, match="either a value or an error"):
        study.tell_many([{"trial_id": b.id}])
    with pytest.raises(TypeError, match="to_dict"):
        study.tell_many("1,2")
    first = study.batch(0)
    assert first.index == 0 and len(first.dictionary) == first.dictionary_size
    with pytest.raises(NotFoundError):
        study.batch(99)


def test_frozen_engine_gives_a_new_study_the_kernel_the_study_chose(bbkb, study):
    """An automatic study's kernel, after a kept fit, frozen into a new study: every batch of
    the new one runs on the same lengthscales and lam, as "fixed"; the kernel's other settings
    (its variance) come along. A study without an automatic kernel says so."""
    X = np.random.default_rng(1).random((150, 3))
    f = np.exp(-((X[:, 0] - 0.6) ** 2) / 0.05) + 0.3 * X[:, 1]
    engine = {"strategy": "bbkb", "mode": "sync", "seed": 2, "lam": 0.5, "ard": True,
              "kernel": {"name": "matern52", "variance": 1.5}}
    auto = bbkb.create_study("auto", candidates=X, engine=engine)
    assert auto.import_observations({i: float(f[i]) for i in range(0, 90, 3)}) == 30
    for _ in range(3):  # the first batch opens on 30 arms: a fit
        suggestions = auto.ask(count=4)
        for trial in suggestions.trials:
            auto.tell(trial.id, float(f[trial.candidate]))
    chosen = auto.info.hyperparameters
    assert chosen["variance"] is not None  # a kept fit
    frozen = auto.frozen_engine()
    lengthscale = chosen["lengthscale"]  # one number, or one per column (ARD)
    assert frozen == {"hyperparameters": "fixed", "ard": False, "normalize": "zscore",
                      "lam": chosen["lam"],
                      "kernel": {"name": "matern52", "variance": 1.5, "lengthscale":
                                 lengthscale[0] if len(lengthscale) == 1 else lengthscale}}
    copy = bbkb.create_study("frozen", candidates=X, engine=engine | frozen)
    for _ in range(2):
        for trial in copy.ask(count=3).trials:
            copy.tell(trial.id, float(f[trial.candidate]))
    assert {(tuple(b.hyperparameters["lengthscale"]), b.hyperparameters["lam"],
             b.hyperparameters["source"]) for b in copy.batches()} == {
        (tuple(chosen["lengthscale"]), chosen["lam"], "fixed")}
    every = copy.batches()  # one page, and the same in pages of one batch
    assert len(every) > 1 and copy.batches(page_size=1) == every
    for unfrozen, why in ((study, "its kernel is fixed"), (copy, "its kernel is fixed"),
                          (bbkb.create_study("random", candidates=X, engine={
                              "strategy": "uniform", "batch_size": 2}), "uniform"),
                          (bbkb.create_study("new", candidates=X, engine=engine),
                           "no batch has opened yet")):
        with pytest.raises(InvalidArgument, match="no automatic kernel to freeze") as refused:
            unfrozen.frozen_engine()
        assert refused.value.field == "hyperparameters" and why in str(refused.value)


def test_import_observations_refuses_what_it_cannot_read(study):
    """A DataFrame (which iterates over its column names), a number or a string raised a bare
    ValueError or TypeError from tuple unpacking, and a dict without "value" a KeyError."""
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"candidate": [0, 1], "value": [1.0, 2.0]})
    for wrong in (frame, 5, None, "0,1.0"):
        with pytest.raises(TypeError, match=r"not \w+ .*frame.to_dict\('records'\)"):
            study.import_observations(wrong)
    with pytest.raises(InvalidArgument) as missing:
        study.import_observations([{"candidate": 1}])
    assert missing.value.field == "observations.0.value" and "Field required" in str(missing.value)
    with pytest.raises(InvalidArgument, match="must be a .candidate, value. pair") as triple:
        study.import_observations([(0, 1.0), (1, 2.0, 3.0)])
    assert triple.value.field == "observations.1" and "(1, 2.0, 3.0)" in str(triple.value)
    assert study.info.n_trials == 0  # all or nothing
    assert study.import_observations(frame.to_dict("records")) == 2  # what the error says


def test_lifecycle_and_lookup(bbkb, study):
    assert bbkb.study("s").id == study.id and bbkb.study(study.id).name == "s"
    with pytest.raises(NotFoundError):
        bbkb.study("nope")
    assert study.pause().status == "paused"
    with pytest.raises(ConflictError, match="resume"):
        study.ask()
    assert study.resume().status == "active"
    (trial,) = study.ask().trials
    study.tell(trial.id, 1.0)
    assert [b.index for b in study.batches()] == [0]
    study.delete()
    with pytest.raises(NotFoundError):
        _ = study.info
    assert bbkb.studies() == []


def test_a_handle_without_fetching(relayed):
    sdk, relay = relayed()
    sid = sdk.create_study("w", candidates=np.eye(3)).id
    relay.calls.clear()
    study = sdk.study(sid, fetch=False)  # a worker that only asks and tells
    assert relay.calls == [] and repr(study) == f"<Study {sid}>"
    (trial,) = study.ask("w").trials
    study.tell(trial.id, 1.0)
    assert study.name == "w" and study.parameter_names == ["x0", "x1", "x2"]
    assert study.name == "w" and len(relay.calls) == 3  # fetched once, then known
    with pytest.raises(NotFoundError):
        sdk.study(sid + 1, fetch=False).ask()


def test_two_handles_on_one_study_are_two_workers(bbkb, study):
    """ask()'s default worker id is the handle's own: a shared default ("sdk") handed every
    caller the same trial."""
    other = bbkb.study(study.id, fetch=False)
    (mine,) = study.ask().trials
    (theirs,) = other.ask().trials
    assert mine.id != theirs.id
    assert (mine.worker_id, theirs.worker_id) == (study.worker_id, other.worker_id)
    assert study.worker_id != other.worker_id
    (again,) = study.ask().trials  # a worker asking again gets its running trial back
    assert again.id == mine.id


def test_numpy_numbers_in_the_engine_are_sent_as_numbers(bbkb):
    """A finite numpy scalar in ``engine`` failed to serialise (a pydantic error, not the
    SDK's); numpy scalars and arrays are now sent as JSON numbers and lists."""
    engine = {"strategy": "bbkb", "seed": np.int64(3), "lam": np.float32(0.5),
              "kernel": {"name": "rbf", "lengthscale": np.float64(0.25)},
              "batch_size": np.array(4)}
    study = bbkb.create_study("numpy", candidates=np.eye(3), engine=engine)
    sent = study.info.spec["engine"]
    assert (sent["seed"], sent["lam"], sent["kernel"]["lengthscale"], sent["batch_size"]) \
        == (3, 0.5, 0.25, 4)
    with pytest.raises(InvalidArgument, match="finite"):
        bbkb.create_study("nan", candidates=np.eye(3), engine={"lam": np.float64("nan")})


def test_public_names_are_pinned():
    assert client.__all__ == [
        "APIError", "Account", "AuthenticationError", "BBKBError", "BatchDetail", "BatchPublic",
        "Client",
        "ConflictError", "DispatchCompleted", "DispatchStatus", "InvalidArgument",
        "NotFoundError", "OptimizeResult", "PermissionDeniedError", "QueueState",
        "ResultsSummary", "ServerUnavailable",
        "Study", "StudyPublic", "Suggestions", "TrialPublic", "ValidationError"]
    for name in client.__all__:
        assert getattr(client, name) is not None


def test_every_model_a_public_method_returns_is_exported():
    """A user annotating ``summary: client.ResultsSummary`` should not have to find the
    server's module: what the methods return is importable from ``client``."""
    import types
    import typing

    import pydantic

    returned = set()
    for cls in (client.Client, client.Study):
        for name, method in vars(cls).items():
            if name.startswith("_") or not callable(getattr(method, "fget", method)):
                continue
            hint = typing.get_type_hints(getattr(method, "fget", method), localns={
                "pandas": types.SimpleNamespace(DataFrame=object),  # imported when used
                "OptimizeResult": client.OptimizeResult}).get("return")
            for part in (hint, *typing.get_args(hint)):
                if isinstance(part, type) and issubclass(part, pydantic.BaseModel):
                    returned.add(part.__name__)
    assert returned and returned <= set(client.__all__), returned - set(client.__all__)
    from service.api import schemas
    assert client.TrialPublic is schemas.TrialPublic  # one definition, the server's
    with pytest.raises(AttributeError):
        client.Nope  # noqa: B018


HEAVY = "numpy scipy sqlalchemy fastapi pandas"


def _imports(code: str) -> list[str]:
    check = f"import sys; {code}; print(' '.join(m for m in {HEAVY.split()!r} if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          check=True).stdout.split()


def test_import_client_stays_light():
    assert _imports("import client") == []
    code = ("import client; client.StudyPublic; from service.api.schemas import StudyCreate;"
            " StudyCreate(name='s', search_space=[{'name': 'x', 'low': 0, 'high': 1}],"
            " n_candidates=10)")
    assert _imports(code) == []  # the models, search spaces included, need only pydantic


def test_httpx_client_is_injectable():
    seen: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers.get("authorization", ""))
        return httpx2.Response(200, json={"studies": []})

    with httpx2.Client(transport=httpx2.MockTransport(handler), base_url="http://x") as http:
        assert Client(http=http, api_key="bbkb_k").studies() == []
    assert seen == ["Bearer bbkb_k"]


@pytest.mark.parametrize("retry_after", [None, "1", "0"])
def test_a_workers_retries_last_its_budget_even_when_the_server_says_retry_after_1(
        monkeypatch, retry_after):
    """A database outage answers 503 with Retry-After: 1. The client waited exactly that, so
    the 16 retries that workers.job.retry_policy sizes for 60 s on the backoff took 16 s: a
    17 s outage lost the results of the evaluations then in flight."""
    from workers.job import retry_policy

    waits: list[float] = []
    monkeypatch.setattr("client.client.time.sleep", waits.append)

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(503, json={"detail": "the database is busy", "field": None},
                               headers={} if retry_after is None else {"Retry-After": retry_after})

    retries, backoff = retry_policy(60.0)
    with httpx2.Client(transport=httpx2.MockTransport(handler), base_url="http://x") as http:
        client = Client(http=http, retries=retries, backoff=backoff)
        with pytest.raises(ServerUnavailable, match=f"after {retries + 1} attempt"):
            client.request("POST", "/v1/studies/1/trials/1/heartbeat", idempotent=True)
    assert len(waits) == retries and sum(waits) >= 60.0
    if retry_after == "1":
        assert min(waits) >= 1.0  # and never shorter than the server asked
