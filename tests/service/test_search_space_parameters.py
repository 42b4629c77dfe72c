"""Search-space parameters are checked key by key: an unknown key, a key of the other kind of
parameter, a boolean choice or a bad name is a 422 naming the field (they were ignored, or
coerced: ``"Log": true`` gave a linear parameter, ``choices: [true, false]`` the numbers 0 and
1). Studies stored before these checks still load."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from service.searchspace import Parameter, SearchSpace
from service.store.database import transaction
from service.store.models import Study

from .helpers import app_client

FLOAT = {"name": "lr", "low": 1e-5, "high": 1.0}
CATEGORICAL = {"name": "act", "type": "categorical", "choices": ["relu", "tanh"]}


def _create(client, space: list[dict], name: str = "s"):  # type: ignore[no-untyped-def]
    return client.post("/v1/studies", json={"name": name, "search_space": space,
                                            "n_candidates": 16})


@pytest.mark.parametrize("parameter, field, words", [
    (FLOAT | {"Log": True}, "search_space.0.Log", "not permitted"),
    (FLOAT | {"step": 0.1}, "search_space.0.step", "not permitted"),
    (FLOAT | {"choices": ["a", "b"]}, "search_space.0.choices", '"type": "categorical"'),
    (FLOAT | {"type": "int", "choices": [1, 2]}, "search_space.0.choices", "int parameter"),
    (CATEGORICAL | {"low": 0}, "search_space.0.low", "categorical parameter takes no low"),
    (CATEGORICAL | {"low": 0.0, "high": 1.0}, "search_space.0.low", "takes no low"),
    (CATEGORICAL | {"high": 1}, "search_space.0.high", "takes no high"),
    (CATEGORICAL | {"log": True}, "search_space.0.log", "takes no log"),
    (CATEGORICAL | {"choices": [True, False]}, "search_space.0.choices.0", "not a bool"),
    (CATEGORICAL | {"choices": ["a", False]}, "search_space.0.choices.1", "not a bool"),
    (CATEGORICAL | {"choices": ["a", None]}, "search_space.0.choices.1", "not a null"),
    (CATEGORICAL | {"choices": ["a", [1]]}, "search_space.0.choices.1", "not a list"),
    (CATEGORICAL | {"choices": ["a", 10**400]}, "search_space.0.choices.1", "finite"),
    (FLOAT | {"name": "a\nb"}, "search_space.0.name", "invisible characters (U+000A at 1)"),
    (FLOAT | {"name": "a\x00"}, "search_space.0.name", "invisible characters (U+0000 at 1)"),
    (FLOAT | {"name": " "}, "search_space.0.name", "blank"),
    (FLOAT | {"name": ""}, "search_space.0.name", "at least 1"),
    (FLOAT | {"name": "x" * 101}, "search_space.0.name", "at most 100"),
])
def test_a_bad_parameter_is_a_422_naming_its_field(tmp_path, parameter, field, words):
    with app_client(f"sqlite:///{tmp_path / 'p.db'}", tmp_path) as client:
        refused = _create(client, [CATEGORICAL | {"name": "ok"}, parameter])
        assert refused.status_code == 422, refused.text
        body = refused.json()
        assert body["field"] == field.replace(".0.", ".1.", 1), body
        assert words in body["detail"], body
        assert client.get("/v1/studies").json()["studies"] == []


def test_full_dumps_and_the_sdks_requests_are_accepted(database_url, tmp_path):
    """Null keys and ``log: false`` are what a full dump holds (a study's stored ``spec``, the
    SDK's request of a categorical): a stored space posted again makes the same study."""
    space = [FLOAT | {"log": True}, {"name": "n", "type": "int", "low": 1, "high": 8},
             CATEGORICAL | {"choices": ["relu", 2, 0.5]}]
    with app_client(database_url, tmp_path) as client:
        first = _create(client, space, "first")
        assert first.status_code == 201, first.text
        stored = first.json()["spec"]["parameters"]["space"]
        assert stored[2] == {"name": "act", "type": "categorical", "low": None, "high": None,
                             "log": False, "choices": ["relu", 2, 0.5]}
        assert type(stored[2]["choices"][1]) is int
        again = _create(client, stored, "again")
        assert again.status_code == 201, again.text
        assert again.json()["spec"]["parameters"]["space"] == stored
        trials = client.post(f"/v1/studies/{again.json()['id']}/suggestions",
                             json={"worker_id": "w", "count": 3}).json()["trials"]
        assert {p for t in trials for p in t["parameters"]} == {"lr", "n", "act"}
        assert all(1e-5 <= t["parameters"]["lr"] <= 1 for t in trials)


def test_numeric_choices_come_back_as_given(database_url, tmp_path):
    """Integer choices were stored and handed out as floats: a batch size of 32 reached the
    objective as 32.0, and ``range(bs)`` raised. Each choice now comes back as it was given
    (an int, a float or a string); a float choice given as 32.0 stays a float."""
    space = [{"name": "bs", "type": "categorical", "choices": [16, 32, 64]},
             {"name": "w", "type": "categorical", "choices": [0.5, 1.0, "none"]}]
    with app_client(database_url, tmp_path) as client:
        created = _create(client, space)
        assert created.status_code == 201, created.text
        stored = created.json()["spec"]["parameters"]["space"]
        assert [type(c) for c in stored[0]["choices"]] == [int, int, int]
        assert [type(c) for c in stored[1]["choices"]] == [float, float, str]
        trials = client.post(f"/v1/studies/{created.json()['id']}/suggestions",
                             json={"worker_id": "w", "count": 16}).json()["trials"]
        assert {type(t["parameters"]["bs"]) for t in trials} == {int}
        assert {t["parameters"]["bs"] for t in trials} <= {16, 32, 64}
        assert all(type(t["parameters"]["w"]) in (float, str) for t in trials)
def test_studies_stored_before_the_checks_still_load(database_url, tmp_path):
    """A spec the old checks let through (a name with a newline, a categorical with a stray
    low, choices coerced from booleans) is loaded as it was stored: its study keeps working."""
    with app_client(database_url, tmp_path) as client:
        sid = _create(client, [FLOAT, CATEGORICAL]).json()["id"]
    with app_client(database_url, tmp_path) as client:  # a fresh process: rebuilt from SQL
        with transaction(client.app.state.sessions) as session:
            study = session.scalars(select(Study).where(Study.id == sid)).one()
            spec = dict(study.spec)
            spec["parameters"] = {"kind": "space", "space": [
                FLOAT | {"name": "a\nb", "type": "float", "log": False, "choices": None},
                CATEGORICAL | {"low": 0.0, "high": None, "log": False, "choices": [1.0, 0.0]}]}
            study.spec = spec
        answer = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "w", "count": 2})
        assert answer.status_code == 200, answer.text
        for trial in answer.json()["trials"]:
            assert set(trial["parameters"]) == {"a\nb", "act"}
            assert trial["parameters"]["act"] in (1.0, 0.0)


def test_the_python_model_refuses_as_the_api_does():
    """The SDK validates with the same model before any request."""
    with pytest.raises(ValueError, match="takes no low"):
        Parameter(name="c", type="categorical", choices=["a"], low=0)
    with pytest.raises(ValueError, match="not a bool"):
        Parameter(name="c", type="categorical", choices=[True, False])
    with pytest.raises(ValueError, match="Extra inputs"):
        Parameter.model_validate(FLOAT | {"Log": True})
    space = SearchSpace(parameters=[Parameter(**FLOAT, log=True)])
    assert space.decode(space.sample(4, seed=0)[0])["lr"] >= 1e-5


def test_choices_are_distinct_as_they_compare():
    """With integer choices kept as ints, the distinctness check (on their str()) let 1 and
    1.0 through as two columns of one value and refused 1 and "1", which are two."""
    with pytest.raises(ValueError, match="distinct choices"):
        Parameter(name="c", type="categorical", choices=[1, 1.0])
    assert Parameter(name="c", type="categorical", choices=[1, "1"]).choices == [1, "1"]
