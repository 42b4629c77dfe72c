"""Study.optimize: the managed loop against the real app (in-process)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import pytest

from client import ConflictError, OptimizeResult, ServerUnavailable
from client.loop import _Run, as_value
from client.streak import Streak
from service.api.schemas import REASON_LIMIT

from .conftest import ENGINE


def bump(x0: float, x1: float) -> float:
    return math.exp(-((x0 - 0.6) ** 2 + (x1 - 0.4) ** 2) / 0.05)


def _completed(study) -> list:  # type: ignore[no-untyped-def]
    return list(study.trials(status="completed"))


def test_threads_complete_exactly_n_with_fn_values(study):
    result = study.optimize(bump, 25, n_workers=4, progress=False)
    assert isinstance(result, OptimizeResult)
    assert (result.n_completed, result.n_failed, result.n_retried) == (25, 0, 0)
    done = _completed(study)
    assert len(done) == 25 and study.info.n_trials == 25
    assert all(t.value == bump(**t.parameters) for t in done)
    assert result.best.value == max(t.value for t in done) and result.elapsed > 0
    assert len({t.worker_id for t in done}) > 1  # several slots worked


def test_sync_mode_waits_for_the_batch_and_carries_on(bbkb):
    X = np.random.default_rng(2).random((150, 2))
    study = bbkb.create_study("sync", candidates=X, direction="minimize",
                              engine={"strategy": "bbkb", "mode": "sync", "seed": 1})
    result = study.optimize(bump, 12, n_workers=3, progress=False)
    assert result.n_completed == 12 and study.info.counts["completed"] == 12
    assert result.best.value == min(t.value for t in _completed(study))


def test_a_sync_batch_held_by_a_dead_run_is_waited_for_and_said(tmp_path, make_app, caplog):
    """A run resumed after another died in sync mode waits for the dead run's trials until
    their leases run out (300 s by default), and said nothing of it, even at INFO: the
    server's reason (``waiting``) is now logged once and shown on the progress bar."""
    from fastapi.testclient import TestClient

    from client import Client

    with TestClient(make_app(tmp_path, reaper_interval=0.05)) as http, \
            Client(http=http, backoff=0.001) as sdk:
        study = sdk.create_study("sync", candidates=np.random.default_rng(2).random((60, 2)),
                                 engine={"strategy": "bbkb", "mode": "sync", "seed": 1},
                                 lease_seconds=1.0)
        (dead,) = study.ask("dead-run", count=1).trials
        with caplog.at_level(logging.INFO, logger="bbkb.client"):
            result = study.optimize(bump, 8, n_workers=2, progress=False)
        assert result.n_completed == 8
        assert study.trial(dead.id).status == "completed"  # handed again once its lease ran out
        waits = [r.getMessage() for r in caplog.records if "no trial for now" in r.getMessage()]
        assert waits == ["study 1: no trial for now, and none running here: batch 0 is "
                         "complete; waiting for 1 pending result(s)"], caplog.text
def test_a_deterministic_study_ends_the_loop_once_every_candidate_is_evaluated(bbkb, caplog):
    X = np.random.default_rng(3).random((15, 2))
    study = bbkb.create_study("once", candidates=X, engine={
        "strategy": "bbkb", "mode": "async", "seed": 1, "deterministic": True})
    with caplog.at_level(logging.WARNING, logger="bbkb.client"):
        result = study.optimize(bump, 40, n_workers=3, progress=False)
    assert result.n_completed == 15  # not 40: each candidate once, then the loop ended
    assert sorted(t.candidate for t in _completed(study)) == list(range(15))
    assert "every one of the 15 candidates" in caplog.text and "ends after 15" in caplog.text


def test_exceptions_fail_the_trial_retryably_and_the_study_carries_on(bbkb):
    seen: set[int] = set()
    lock = threading.Lock()

    def flaky(x0: float, x1: float) -> float:
        with lock:
            first = (x0, x1) not in seen
            seen.add((x0, x1))
        if first and x0 < 0.5:
            raise RuntimeError(f"flaky at {x0:.2f}")
        return bump(x0, x1)

    X = np.random.default_rng(3).random((150, 2))
    study = bbkb.create_study("flaky", candidates=X, engine={"strategy": "uniform"})
    result = study.optimize(flaky, 20, n_workers=4, progress=False)
    assert result.n_completed == 20 and result.n_failed == 0 and result.n_retried > 0
    retried = [t for t in _completed(study) if t.attempt == 2]
    assert len(retried) == result.n_retried
    assert all(t.error.startswith("RuntimeError: flaky at") for t in retried)


def wrong_signature(x: float) -> float:  # the study's parameters are x0 and x1
    return x


def test_a_broken_fn_is_reported_once_as_a_warning(bbkb, caplog):
    """Without a progress bar or logging set up, a fn that cannot run returned best=None and
    n_failed quietly; each distinct reason is now one warning (Python prints warnings)."""
    X = np.random.default_rng(5).random((40, 2))
    study = bbkb.create_study("broken", candidates=X, engine={"strategy": "uniform"})
    caplog.set_level(logging.WARNING, logger="bbkb.client")
    result = study.optimize(wrong_signature, 6, n_workers=2, progress=False,
                            max_consecutive_errors=None)  # every failure counts, as before
    assert result.best is None and result.n_failed == 6
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "unexpected keyword argument 'x0'" in warnings[0], warnings


@pytest.mark.parametrize("n_workers, max_attempts", [(1, 3), (4, 3), (1, 1), (2, 5)])
def test_a_broken_fn_stops_the_loop_with_its_exception(bbkb, n_workers, max_attempts):
    """A fn that raises on every call (here a wrong parameter name) used to fail every trial
    for good (after max_attempts tries each): 25 evaluations, 25 candidates the engine never
    proposed again, and optimize() returned. It now raises fn's own exception once fn failed
    on max_consecutive_errors trials in a row, every trial back in the pool."""
    X = np.random.default_rng(5).random((40, 2))
    study = bbkb.create_study("broken", candidates=X, engine={"strategy": "uniform"},
                              max_attempts=max_attempts)
    with pytest.raises(TypeError, match="unexpected keyword argument 'x0'") as raised:
        study.optimize(wrong_signature, 25, n_workers=n_workers, progress=False)
    assert "fn failed on 5 trials in a row" in "".join(raised.value.__notes__)
    trials = list(study.trials())
    assert {t.status for t in trials} == {"pending"}, [(t.status, t.error) for t in trials]
    assert len(trials) >= 5 and all(t.attempt < max_attempts for t in trials), trials
    assert all("unexpected keyword argument 'x0'" in (t.error or "") or
               t.error == "optimize() stopped before the evaluation finished"
               for t in trials), [t.error for t in trials]


def test_a_fn_that_returns_no_number_stops_the_loop_with_a_valueerror(bbkb):
    """A forgotten ``return``: each None failed its trial for good at once."""
    def no_return(x0: float, x1: float) -> None:
        x0 + x1  # noqa: B018

    X = np.random.default_rng(6).random((40, 2))
    study = bbkb.create_study("none", candidates=X, engine={"strategy": "uniform"})
    with pytest.raises(ValueError, match="fn returned NoneType None, not a number"):
        study.optimize(no_return, 25, n_workers=3, progress=False)
    assert study.info.counts.get("failed", 0) == 0


def test_a_broken_fn_after_values_costs_at_most_one_candidate(bbkb):
    """fn works, then breaks (a full disk, a dead instrument): the first trial it fails on
    alone fails for good (a bad candidate, as far as one slot can tell), the next ones wait
    for a value that never comes, and the loop stops."""
    calls = 0

    def breaks(x0: float, x1: float) -> float:
        nonlocal calls
        calls += 1
        if calls > 4:
            raise OSError(28, "No space left on device")
        return bump(x0, x1)

    X = np.random.default_rng(7).random((40, 2))
    study = bbkb.create_study("breaks", candidates=X, engine={"strategy": "uniform"})
    with pytest.raises(OSError, match="No space left"):
        study.optimize(breaks, 25, n_workers=1, progress=False)
    counts = study.info.counts
    assert (counts.get("completed"), counts.get("failed", 0)) == (4, 1), counts


def _first_candidate_fails() -> tuple[Callable[[float, float], float], list[float]]:
    """An fn that fails on the first candidate it sees (kept in the list), whenever it sees
    it again, and gives :func:`bump` elsewhere."""
    first: list[float] = []

    def first_is_bad(x0: float, x1: float) -> float:
        if not first:
            first.append(x0)
        if x0 == first[0]:
            raise ArithmeticError("diverged")
        return bump(x0, x1)
    return first_is_bad, first


def test_a_held_failure_fails_for_good_once_fn_gives_a_value(bbkb):
    """The first candidate fn sees always fails (one slot: the server hands it again at once,
    max_attempts times): with no value yet, the trial is held while the others are evaluated,
    and fails for good at the first value. The budget counts it: exactly n outcomes."""
    first_is_bad, first = _first_candidate_fails()
    X = np.random.default_rng(9).random((40, 2))
    study = bbkb.create_study("first", candidates=X,
                              engine={"strategy": "uniform", "deterministic": True})
    result = study.optimize(first_is_bad, 6, n_workers=1, progress=False)
    assert (result.n_completed, result.n_failed) == (5, 1), result
    (failed,) = study.trials(status="failed")
    assert failed.parameters["x0"] == first[0] and failed.attempt == 3, failed


def test_in_sync_mode_a_held_trial_the_batch_waits_for_is_settled(bbkb):
    """A held trial can hold up a sync batch, so that no value can come: alone, it fails for
    good (a bad first candidate: the run goes on); with another trial failed too, the loop
    stops (a broken fn: one candidate lost at most)."""
    engine = {"strategy": "bbkb", "mode": "sync", "seed": 1}
    X = np.random.default_rng(2).random((150, 2))
    first_is_bad, _ = _first_candidate_fails()

    study = bbkb.create_study("bad-first", candidates=X, engine=engine)
    result = study.optimize(first_is_bad, 12, n_workers=1, progress=False)
    assert (result.n_completed, result.n_failed) == (11, 1), result

    study = bbkb.create_study("broken", candidates=X, engine=engine)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        study.optimize(wrong_signature, 12, n_workers=3, progress=False)
    counts = study.info.counts
    assert counts["failed"] <= 1 and counts["running"] == 0 and not counts["completed"], counts


def test_failures_between_values_fail_their_trials_and_the_loop_goes_on(bbkb):
    """A candidate fn always fails on (a bad region) fails for good after max_attempts, as
    before, while the other candidates give values; the loop does not stop, although the
    failing trial is handed again at once and fails max_attempts times in a row."""
    def bad_region(x0: float, x1: float) -> float:
        if x0 < 0.2:
            raise ArithmeticError(f"diverged at {x0:.2f}")
        return bump(x0, x1)

    X = np.random.default_rng(8).random((150, 2))
    study = bbkb.create_study("region", candidates=X, engine={
        "strategy": "uniform", "seed": 2, "deterministic": True})  # a fixed order of draws
    result = study.optimize(bad_region, 40, n_workers=1, progress=False)
    assert result.n_completed + result.n_failed == 40 and result.n_failed >= 2, result
    failed = list(study.trials(status="failed"))
    assert all(t.attempt == 3 and t.parameters["x0"] < 0.2 for t in failed), failed


@pytest.mark.parametrize("limit", [0, -1, 2.5, "5"])
def test_max_consecutive_errors_is_checked(study, limit):
    with pytest.raises(ValueError, match="max_consecutive_errors must be None or an int"):
        study.optimize(bump, 5, progress=False, max_consecutive_errors=limit)


@pytest.mark.parametrize("bad, reason", [(float("nan"), "not a finite number"),
                                         (1e200, "outside +-1e+100")])
def test_non_numbers_fail_for_good(bbkb, bad, reason):
    """A value the server would refuse fails its trial for good; the run goes on (a value
    beyond 1e100 used to end optimize() with the server's ValidationError)."""
    def sometimes_bad(x0: float, x1: float) -> float:
        return bad if x0 < 0.3 else x0

    X = np.random.default_rng(4).random((150, 2))
    study = bbkb.create_study("bad", candidates=X, engine={"strategy": "uniform"})
    result = study.optimize(sometimes_bad, 20, n_workers=2, progress=False,
                            max_consecutive_errors=None)  # 5 bad in a row: 1 run in ~25
    assert result.n_completed + result.n_failed == 20 and result.n_failed > 0
    failed = list(study.trials(status="failed"))
    assert len(failed) == result.n_failed
    assert all(t.attempt == 1 and reason in t.error for t in failed)


def test_as_value():
    assert as_value(np.float32(1.5)) == (1.5, None)
    assert as_value(np.array(2.0)) == (2.0, None)
    assert as_value(-1e100) == (-1e100, None)
    for bad in ("1.5", None, True, np.bool_(True), np.array(False), [1.0], np.ones(2),
                float("inf"), 1.1e100, -(10**400)):
        value, reason = as_value(bad)
        assert value is None and "fn returned" in reason


def test_the_sdk_and_the_engine_agree_on_the_largest_value():
    from service.api.schemas import VALUE_LIMIT
    from service.engine.strategy import MAX_MAGNITUDE

    assert VALUE_LIMIT == MAX_MAGNITUDE


def test_process_executor_and_vector_mode(study):
    result = study.optimize(sum, 8, n_workers=2, executor="process", vector=True,
                            progress=False)
    assert result.n_completed == 8
    assert all(t.value == t.parameters["x0"] + t.parameters["x1"] for t in _completed(study))


def test_process_executor_needs_a_picklable_fn(study):
    with pytest.raises(TypeError, match="picklable"):
        study.optimize(lambda x0, x1: x0, 2, executor="process")
    with pytest.raises(ValueError, match="executor"):
        study.optimize(bump, 2, executor="fiber")  # type: ignore[arg-type]
    assert study.info.n_trials == 0


def test_progress_bar_shows_evaluations_best_and_batch(study, capsys):
    pytest.importorskip("tqdm")
    study.optimize(bump, 6, n_workers=2, progress=True)
    err = capsys.readouterr().err
    assert "6/6" in err and "best=" in err and "batch=" in err


def test_an_error_in_the_loop_gives_running_trials_back(bbkb):
    """Without counting an attempt (``release``): with max_attempts 1, the trial the loop was
    evaluating failed for good instead."""
    study = bbkb.create_study("s", candidates=np.random.default_rng(0).random((120, 2)),
                              engine=ENGINE, max_attempts=1)
    both_asked = threading.Barrier(2, timeout=10)
    calls = 0
    lock = threading.Lock()

    def pause_then_slow(x0: float, x1: float) -> float:
        nonlocal calls
        both_asked.wait()
        with lock:
            calls += 1
            first = calls == 1
        if first:
            study.pause()  # the loop's next ask is a 409 and it stops
        else:
            time.sleep(0.5)
        return x0

    with pytest.raises(ConflictError, match="paused"):
        study.optimize(pause_then_slow, 10, n_workers=2, progress=False)
    counts = study.info.counts
    assert (counts["completed"], counts["running"], counts["pending"]) == (1, 0, 1)
    (given_back,) = study.trials(status="pending")
    assert given_back.error == "optimize() stopped before the evaluation finished"
    assert given_back.attempt == 0 and study.info.counts["failed"] == 0


@pytest.mark.parametrize("message", ["x" * 20_000, "instrument replied: OK\x00\x01"],
                         ids=["long", "nul"])
def test_a_reason_the_server_would_refuse_is_cut_or_escaped(bbkb, message):
    """An error message longer than the server keeps, or with a NUL, made the fail request
    invalid: optimize() stopped with an InvalidArgument and left the trial leased."""
    def odd(x0: float, x1: float) -> float:
        if x0 < 0.5:
            raise ValueError(message)
        return x0

    X = np.random.default_rng(6).random((60, 2))
    study = bbkb.create_study("odd", candidates=X, engine={"strategy": "uniform"})
    result = study.optimize(odd, 12, n_workers=2, progress=False,
                            max_consecutive_errors=None)  # half the candidates fail
    assert result.n_completed + result.n_failed == 12 and result.n_failed > 0
    errors = {t.error for t in study.trials() if t.error}
    expected = ("ValueError: " + message)[: REASON_LIMIT - 1] + "\u2026" if len(message) > 100 \
        else "ValueError: " + message.replace("\x00", "\\x00")
    assert errors == {expected}
    assert study.info.counts["running"] == 0


def test_giving_back_releases_and_stops_at_the_first_unreachable_server():
    """Ctrl-C during an outage: each give-back went through the client's whole retry schedule
    (about 4.6 s per running trial, 33 s for 8 slots); the first ServerUnavailable now ends
    them. A fake study: the logic under test is what give_back does with the answers."""
    calls: list[tuple[int, dict]] = []

    class Down:
        def fail(self, trial_id: int, *args: object, **kwargs: object) -> None:
            calls.append((trial_id, kwargs))
            raise ServerUnavailable("down", attempts=6)

    run = object.__new__(_Run)
    run.study, run.workers, run.streak = Down(), ["w-0", "w-1", "w-2"], None
    run.running = {object(): (slot, SimpleNamespace(id=10 + slot), 0.0) for slot in range(3)}
    run.give_back("stopped")
    assert calls == [(10, {"worker_id": "w-0", "release": True})] and run.running == {}



def test_a_held_trial_handed_again_to_the_run_counts_once_in_progress():
    """A held trial (client.streak) keeps its heartbeats, but if its lease is lost anyway the
    server may hand it to another slot of the same run: it was counted twice among the trials
    in progress, so near its end the run asked for one trial fewer than it had room for."""
    run = object.__new__(_Run)
    run.streak = Streak(5, 3)
    run.streak.held[11] = SimpleNamespace(trial=SimpleNamespace(id=11))
    run.running = {object(): (0, SimpleNamespace(id=11), 0.0),
                   object(): (1, SimpleNamespace(id=12), 0.0),
                   object(): (2, SimpleNamespace(id=13), 0.0)}
    run.counted = {13}
    assert run.n_in_progress == 2
    del run.streak.held[11]
    assert run.n_in_progress == 2
    run.streak = None
    assert run.n_in_progress == 2

@contextmanager
def _heartbeats_lost(tmp_path, make_app, monkeypatch) -> Iterator:  # type: ignore[no-untyped-def]
    """A uniform study on a real app whose leases (0.3 s) the reaper (every 0.05 s) takes back:
    the SDK's heartbeats never arrive."""
    from fastapi.testclient import TestClient

    from client import Client

    with TestClient(make_app(tmp_path, reaper_interval=0.05)) as http, \
            Client(http=http, backoff=0.001) as sdk:
        study = sdk.create_study("lease", candidates=np.random.default_rng(7).random((40, 2)),
                                 engine={"strategy": "uniform"}, lease_seconds=0.3)
        monkeypatch.setattr(study, "heartbeat", lambda *args, **kwargs: None)
        yield study


@pytest.mark.parametrize("outcome", ["value", "nan"])
def test_a_trial_handed_again_after_its_lease_was_lost_counts_once(tmp_path, make_app,
                                                                   monkeypatch, outcome):
    """The lease of a slot's trial expires while fn runs (its heartbeats lost) and the server
    hands the trial again (attempt 2) to the run's other slot. Both evaluations end the same
    way: the second tell of the same value (or final failure) is a no-op on the server, and the
    run counted the trial twice, returning before n_evaluations trials were done."""
    with _heartbeats_lost(tmp_path, make_app, monkeypatch) as study:
        first: list[tuple[float, float]] = []
        handed_again = threading.Event()
        lock = threading.Lock()

        def fn(x0: float, x1: float) -> float:
            with lock:
                role = "again" if first and first[0] == (x0, x1) else "other" if first \
                    else "first"
                if role == "first":
                    first.append((x0, x1))
            if role == "first":  # outlives its lease, ends after the second evaluation's tell
                assert handed_again.wait(30)
                while study.info.counts["running"]:
                    time.sleep(0.02)
            elif role == "again":
                handed_again.set()
            else:  # the other slot asks again only once the first trial is back in the pool
                while not handed_again.is_set() and study.info.counts["pending"] == 0:
                    time.sleep(0.02)
                return x0
            return x0 if outcome == "value" else float("nan")

        result = study.optimize(fn, 3, n_workers=2, progress=False)
        counts = study.info.counts
        assert handed_again.is_set() and max(t.attempt for t in study.trials()) == 2
        n_failed = 0 if outcome == "value" else 1
        assert (result.n_completed, result.n_failed) == (3 - n_failed, n_failed)
        assert (counts["completed"], counts["failed"], counts["running"]) == \
            (3 - n_failed, n_failed, 0)


def test_a_slot_asks_for_a_new_trial_while_a_counted_trial_still_runs(tmp_path, make_app,
                                                                       monkeypatch):
    """A trial handed again after its lost lease, and told by its second copy, still took a
    place among the trials in progress while its first copy ran: with two slots and three
    evaluations, the free slot sat idle until that copy ended. Now it asks for the third."""
    with _heartbeats_lost(tmp_path, make_app, monkeypatch) as study:
        seen: list[tuple[float, float]] = []
        third = threading.Event()
        lock = threading.Lock()
        while_first_ran: list[bool] = []

        def fn(x0: float, x1: float) -> float:
            with lock:
                first = not seen
                if (x0, x1) not in seen:
                    seen.append((x0, x1))
                if len(seen) == 3:
                    third.set()
            if first:  # outlives its lease; its second copy is told meanwhile
                while_first_ran.append(third.wait(10))
                return x0
            while len(seen) < 3 and study.info.counts["pending"] == 0:
                time.sleep(0.02)  # the other slot asks again once the first trial is back
            return x0

        result = study.optimize(fn, 3, n_workers=2, progress=False)
        assert while_first_ran == [True], "the free slot waited for the first copy to end"
        assert result.n_completed == 3 and study.info.counts["completed"] == 3
