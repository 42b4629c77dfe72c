"""SDK argument errors: refused before sending, as documented exception types; and the managed
loop riding out a server restart."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import client
from client import Client, ValidationError
from client.client import INLINE_LIMIT
from client.errors import InvalidArgument
from service.processes import ServerProcess

X = np.random.default_rng(0).random((20, 2))


def test_non_finite_numbers_are_refused_with_value_and_path(bbkb):
    cases = [
        ({"engine": {"strategy": "bbkb", "lam": float("nan")}}, "engine.lam", "nan"),
        ({"engine": {"kernel": {"name": "rbf", "lengthscale": float("inf")}}},
         "engine.kernel.lengthscale", "inf"),
        ({"engine": {"explore": [1.0, np.float32("-inf")]}}, "engine.explore.1", "-inf"),
        ({"candidates": [[0.0, 1.0], [float("nan"), 2.0]]}, "candidates.1.0", "nan"),
        ({"candidates": np.where(np.eye(2) > 0, np.inf, 0.0)}, "candidates.0.0", "inf"),
    ]
    for options, field, value in cases:
        options = {"candidates": X} | options
        with pytest.raises(InvalidArgument) as caught:
            bbkb.create_study("s", **options)
        error = caught.value
        assert isinstance(error, ValueError) and isinstance(error, ValidationError)
        assert error.field == field and str(error) == f"{field}: must be a finite number; " \
                                                      f"got {value}"
    assert bbkb.studies() == []


def test_an_integer_beyond_float64_is_the_servers_422_not_an_overflow(bbkb):
    """The SDK's finiteness check raised a bare OverflowError on 10**400 (and the server
    answered it with a 500); the server's 422 now names the field, without 400 digits."""
    for options, field in [({"lam": 10**400}, "engine.lam"),
                           ({"kernel": {"name": "rbf", "lengthscale": 10**400}},
                            "engine.kernel.lengthscale")]:
        with pytest.raises(ValidationError) as caught:
            bbkb.create_study("s", candidates=X, engine={"strategy": "bbkb"} | options)
        assert caught.value.field == field and "000000" not in str(caught.value)
    assert bbkb.studies() == []


def test_an_upload_that_is_not_numbers_creates_no_study(bbkb):
    text = np.full((INLINE_LIMIT // 2 + 1, 2), "x")  # the .npy upload path
    with pytest.raises(InvalidArgument, match="candidates: must be numbers"):
        bbkb.create_study("big", candidates=text)
    assert bbkb.studies() == []


@pytest.mark.parametrize("candidates, why", [
    ([], "the candidate matrix has no rows"),
    (np.zeros((0, 2)), "the candidate matrix has no rows"),
    ([[1.0, 2.0], [3.0]], "candidate rows have different lengths (1 and 2 numbers)"),
    ([[]], "candidate rows are empty"), ([["a", "b"]], "must be numbers: could not convert"),
    (np.array([[1 + 2j, 0.0]]), "must be numbers: complex complex128 values")])
def test_a_matrix_the_server_would_refuse_is_refused_before_any_request(bbkb, candidates, why):
    """As the README says: InvalidArgument (a ValueError). These used to reach the server and
    come back as its ValidationError (not a ValueError), or as numpy's bare ValueError."""
    with pytest.raises(InvalidArgument) as caught:
        bbkb.create_study("s", candidates=candidates)
    assert caught.value.field == "candidates" and why in str(caught.value), caught.value
    assert bbkb.studies() == []


def test_a_search_space_that_is_one_parameter_not_a_list_is_refused(bbkb):
    """list() of a dict took its keys: 'search_space.0: Input should be a valid dictionary;
    got 'name''. The CLI's --search-space reaches the same call."""
    for space in ({"name": "x", "low": 0, "high": 1}, '[{"name": "x"}]'):
        with pytest.raises(InvalidArgument) as caught:
            bbkb.create_study("s", search_space=space, n_candidates=10)  # type: ignore[arg-type]
        assert caught.value.field == "search_space" and "must be a list of parameters" in str(
            caught.value), caught.value
    assert bbkb.studies() == []
    assert bbkb.create_study("s", search_space=({"name": "x", "low": 0, "high": 1},),
                             n_candidates=10).info.dim == 1


def test_wrong_types_and_shapes(bbkb):
    with pytest.raises(TypeError, match="url must be a str or None, not int"):
        Client(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="api_key must be a str"):
        Client("http://x", api_key=b"key")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="printable ASCII"):
        Client("http://x", api_key="ключ")
    with pytest.raises(TypeError, match="http must be an httpx2.Client .*not builtins.object"):
        Client("http://x", http=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="engine must be a mapping"):
        bbkb.create_study("s", candidates=X, engine="bbkb")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="candidates must be a matrix"):
        bbkb.create_study("s", candidates=5)
    for study_id in (1.0, True, None):
        with pytest.raises(TypeError, match="study must be an int id or a str name"):
            bbkb.study(study_id)  # type: ignore[arg-type]
    for vector in (np.ones(3), [1.0, 2.0]):
        with pytest.raises(InvalidArgument, match="2-D matrix") as caught:
            bbkb.create_study("s", candidates=vector)
        assert caught.value.field == "candidates"
    assert bbkb.studies() == []


def test_client_side_validation_is_a_validation_error_and_a_value_error(study):
    (trial,) = study.ask("w").trials
    with pytest.raises(client.ValidationError) as caught:
        study.tell(trial.id, float("nan"))
    error = caught.value
    assert isinstance(error, ValueError) and isinstance(error, InvalidArgument)
    assert (error.status_code, error.field) == (422, "value")
    assert str(error) == "value: Input should be a finite number; got nan"
    for boolean in (True, np.bool_(True)):  # numpy's bool is no bool: it was taken as 1.0
        with pytest.raises(InvalidArgument, match="value: .*not a bool"):
            study.tell(trial.id, boolean)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="n_evaluations must be an int, not str '2'"):
        study.optimize(float, "2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="n_workers must be an int, not float"):
        study.optimize(float, 2, n_workers=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_evaluations must be >= 1, not 0"):
        study.optimize(float, np.int64(0))
    with pytest.raises(ValueError, match="name: String should have at least 1 character"):
        study.client.create_study("", candidates=X)
    with pytest.raises(ValidationError, match="worker_id"):
        study.ask("", count=1)

    with pytest.raises(ValidationError) as server_side:  # the server's answer: not a ValueError
        study.client.create_study("x", candidates=X, engine={"strategy": "nonsense"})
    assert not isinstance(server_side.value, ValueError)


def test_optimize_rides_out_a_server_restart(tmp_path):
    env = {"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none"}
    first = ServerProcess(env).start()
    second = ServerProcess(env, port=first.port)
    restarted = threading.Thread(target=lambda: (time.sleep(0.5), second.start()))
    killed = threading.Event()

    def fn(x0: float, x1: float) -> float:
        if not killed.is_set():
            killed.set()
            first.kill()  # SIGKILL while evaluating; each request gives up in ~0.1 s
            restarted.start()
        return x0 + x1

    try:
        with Client(first.url, retries=1, backoff=0.05) as sdk:
            study = sdk.create_study("restart", candidates=X, engine={"strategy": "uniform"})
            result = study.optimize(fn, 6, n_workers=2, progress=False)
            restarted.join()
            assert result.n_completed == 6
            done = list(study.trials(status="completed"))
            assert len(done) == 6 and all(t.value == sum(t.parameters.values()) for t in done)
            with pytest.raises(ValueError, match="max_outage"):
                study.optimize(fn, 1, max_outage=-1)
    finally:
        first.kill()
        if killed.is_set():
            restarted.join()  # even if optimize gave up: no server left running
        second.stop()
