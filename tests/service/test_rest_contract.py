"""What an integrator in another language relies on, from the README and ``/openapi.json`` alone
(a review over plain REST found each of these wrong): the documented statuses and scheme, the
one error shape with its field named, CSV errors by line, and no 500 on any input."""

from __future__ import annotations

import unicodedata

import pytest
from sqlalchemy import update

from service.store.database import transaction
from service.store.models import Study

from .helpers import app_client, create_study

CSV = {"content-type": "text/csv"}


@pytest.fixture
def client(tmp_path):  # type: ignore[no-untyped-def]
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        yield client


def test_the_schema_documents_the_bearer_scheme_and_the_403(client):
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"] == {"HTTPBearer": {
        "type": "http", "scheme": "bearer", "description": spec["components"][
            "securitySchemes"]["HTTPBearer"]["description"]}}
    for path, methods in spec["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in methods.items():
            assert operation["security"] == [{"HTTPBearer": []}], (method, path)
            assert "authorization" not in {p["name"] for p in operation.get("parameters", [])}
            assert {"401", "403", "404", "422"} <= set(operation["responses"]), (method, path)
            assert "400" not in operation["responses"]  # no route answers 400: see below
    assert "503" in spec["paths"]["/readyz"]["get"]["responses"]
    imported = spec["paths"]["/v1/studies/{study_id}/observations"]["post"]["responses"]["200"]
    assert imported["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ImportSummary"}


def test_a_401_names_its_scheme(tmp_path):
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, auth="keys") as client:
        for response in (client.get("/v1/studies"),  # the route's check
                         client.post("/v1/studies", json={}),  # the guard's, before the body
                         client.get("/v1/studies", headers={"Authorization": "Bearer nope"})):
            assert response.status_code == 401
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["field"] == "authorization"


def test_a_405_allows_every_method_of_its_path_and_probes_take_head(client):
    sid = create_study(client)["id"]
    for path, allowed in (("/v1/studies", "GET, POST"), (f"/v1/studies/{sid}", "GET, DELETE"),
                          (f"/v1/studies/{sid}/dispatch", "GET, POST"),
                          ("/healthz", "GET, HEAD")):
        response = client.request("PATCH", path)
        assert response.status_code == 405 and response.headers["allow"] == allowed, path
        assert response.json() == {"detail": "Method Not Allowed", "field": None}
    for probe in ("/healthz", "/readyz"):
        response = client.head(probe)
        assert response.status_code == 200 and response.content == b""


@pytest.mark.parametrize("body, reason", [
    (b'{"worker_id": "Ger\xe4t-1", "count": 1}', "not UTF-8 (invalid continuation byte at byte"),
    (b'{"worker_id": "w", "count": 1' + b"0" * 5000 + b"}", "Exceeds the limit (4300 digits)"),
], ids=["cp1252", "5000 digits"])
def test_a_body_that_cannot_be_read_is_a_422_on_every_route(client, body, reason):
    """FastAPI's own parsing answered these with a 400 and no field, the routes that read their
    body themselves with a 422 naming it: now both the latter."""
    sid = create_study(client)["id"]
    trial = client.post(f"/v1/studies/{sid}/suggestions",
                        json={"worker_id": "w", "count": 1}).json()["trials"][0]
    study, trial = f"/v1/studies/{sid}", f"/v1/studies/{sid}/trials/{trial['id']}"
    for path in (f"{study}/suggestions", f"{trial}/complete", f"{trial}/heartbeat",
                 "/v1/studies", f"{study}/results", f"{study}/observations"):
        response = client.post(path, content=body, headers={"content-type": "application/json"})
        assert response.status_code == 422, (path, response.text)
        assert response.json()["field"] == "body", path
        assert response.json()["detail"].startswith("malformed JSON: "), path
        if not path.endswith(("/results", "/observations")):  # (pydantic's parser: its words)
            assert reason in response.json()["detail"], path


@pytest.mark.parametrize("fields, field", [
    ({"search_space": [{"name": "x", "low": 0, "high": 1}]}, "n_candidates"),
    ({}, "candidates"),
    ({"candidates": [[0.0], [1.0]], "upload": True}, "upload"),
    ({"candidates": [[0.0]], "search_space": [{"name": "x", "low": 0, "high": 1}],
      "n_candidates": 4}, "search_space"),
    ({"candidates": [[0.0]], "n_candidates": 4}, "n_candidates"),
])
def test_a_study_body_that_contradicts_itself_names_the_field(client, fields, field):
    response = client.post("/v1/studies", json={"name": "s"} | fields)
    assert response.status_code == 422 and response.json()["field"] == field, response.text


def test_booleans_are_json_booleans(client):
    space = [{"name": "x", "low": 1, "high": 2, "log": "on"}]
    for body, field in (({"name": "s", "upload": "yes"}, "upload"),
                        ({"name": "s", "search_space": space, "n_candidates": 4},
                         "search_space.0.log")):
        response = client.post("/v1/studies", json=body)
        assert response.status_code == 422 and response.json()["field"] == field, response.text
    sid = create_study(client)["id"]
    trial = client.post(f"/v1/studies/{sid}/suggestions",
                        json={"worker_id": "w", "count": 1}).json()["trials"][0]
    for retryable in ("yes", 1):
        response = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/fail",
                               json={"retryable": retryable})
        assert response.status_code == 422 and response.json()["field"] == "retryable"
    assert client.get(f"/v1/studies/{sid}/trials/{trial['id']}").json()["status"] == "running"


@pytest.mark.parametrize("hidden", ["\x7f", "\x85", "\u200b", "\u200e", "\u2028", "\u202e",
                                    "\u2066", "\ufeff"])
def test_names_and_worker_ids_refuse_invisible_characters(client, hidden):
    response = client.post("/v1/studies", json={
        "name": f"a{hidden}b", "candidates": [[0.0], [1.0]]})
    assert response.status_code == 422 and response.json()["field"] == "name"
    assert f"U+{ord(hidden):04X} at 1" in response.json()["detail"]
    sid = create_study(client, name=f"ok-{ord(hidden)}")["id"]
    response = client.post(f"/v1/studies/{sid}/suggestions",
                           json={"worker_id": f"w{hidden}", "count": 1})
    assert response.status_code == 422 and response.json()["field"] == "worker_id"
    assert client.get("/v1/studies", params={"name": f"a{hidden}b"}).json()["studies"] == []


def test_a_name_is_one_name_however_its_accents_are_typed(client):
    """"étude" as one character (NFC) or as "e" and a combining accent (NFD) looked the same
    and made two studies; now the second is a 409 and either form finds the first."""
    composed = "\u00e9tude"
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    sid = create_study(client, name=decomposed)["id"]
    assert client.get(f"/v1/studies/{sid}").json()["name"] == composed
    again = client.post("/v1/studies", json={"name": composed, "candidates": [[0.0], [1.0]]})
    assert again.status_code == 409
    for name in (composed, decomposed):
        assert [s["id"] for s in client.get("/v1/studies", params={"name": name}).json()[
            "studies"]] == [sid]
    assert "\u200d" in create_study(client, name="a\u200db")["name"]  # a joiner stays allowed


def test_the_sdk_and_the_name_filter_find_a_name_however_typed_and_as_stored_before(client):
    """Names are stored composed now; the SDK compared the raw name it was given, and studies
    created before hold whatever form (and character) they were given: each is still found."""
    from client import Client

    decomposed = unicodedata.normalize("NFD", "caf\u00e9")
    sdk = Client(http=client)
    sid = create_study(client, name=decomposed)["id"]
    assert sdk.study(decomposed).id == sdk.study("caf\u00e9").id == sid
    for legacy in (unicodedata.normalize("NFD", "r\u00e9sum\u00e9"), "exp\u200b1"):
        old = create_study(client, name=f"then-{len(legacy)}")["id"]
        with transaction(client.app.state.sessions) as session:  # as the old server kept it
            session.execute(update(Study).where(Study.id == old).values(name=legacy))
        found = client.get("/v1/studies", params={"name": legacy}).json()["studies"]
        assert [s["id"] for s in found] == [old], legacy
        assert sdk.study(legacy).id == old


def test_results_csv_never_answers_500_and_counts_a_sheet_not_filled_in(client):
    sid = create_study(client, engine={"strategy": "uniform", "batch_size": 3})["id"]
    trials = client.post(f"/v1/studies/{sid}/suggestions",
                         json={"worker_id": "w", "count": 3}).json()["trials"]
    assert len(trials) > 1
    url = f"/v1/studies/{sid}/results.csv"
    for trial_id in (2**63, -(2**63) - 1, 2**62 + 1, 10**30):
        response = client.post(url, content=f"trial_id,value\n{trial_id},0.5\n", headers=CSV)
        assert response.status_code == 422, response.text
        assert response.json()["field"] == "body.line2" and "2^62" in response.json()["detail"]
    sheet = "trial_id,value\n" + "".join(f"{t['id']},\n" for t in trials)
    for body, skipped in ((sheet, len(trials)), ("trial_id,value\n", 0)):  # nothing measured yet
        response = client.post(url, content=body, headers=CSV)
        assert response.status_code == 200, response.text
        assert response.json() == {"completed": 0, "failed": 0, "unchanged": 0,
                                   "skipped": skipped}
    assert {t["status"] for t in client.get(f"/v1/studies/{sid}/trials").json()["trials"]} == {
        "running"}
    response = client.post(url, content=b"no header at all", headers=CSV)
    assert response.status_code == 422 and response.json()["field"] == "body"


def test_observations_csv_errors_name_the_line(client):
    sid = create_study(client)["id"]  # 120 candidates
    url = f"/v1/studies/{sid}/observations.csv"
    for body, line, column in (("candidate,value\n1,0.5\n2,NaN\n", 3, "value"),
                               ("candidate,value\n\n999,0.1\n", 3, "candidate"),
                               ("candidate,value\n1,0.5\n2,1e300\n", 3, "value")):
        response = client.post(url, content=body, headers=CSV)
        assert response.status_code == 422, body
        assert response.json()["field"] == f"body.line{line}.{column}", body
        assert response.json()["detail"].startswith(f"CSV line {line}: "), body
    assert client.get(f"/v1/studies/{sid}").json()["n_trials"] == 0  # all or nothing
    ok = client.post(url, content="candidate,value\n1,0.5\n", headers=CSV)
    assert ok.status_code == 200 and ok.json() == {"imported": 1}
    as_json = client.post(f"/v1/studies/{sid}/observations",
                          json={"observations": [{"candidate": 999, "value": 0.1}]})
    assert as_json.json()["field"] == "observations.0.candidate"


def test_delete_answers_204_without_a_body_and_the_export_writes_times_as_json_does(client):
    sid = create_study(client)["id"]
    trial = client.post(f"/v1/studies/{sid}/suggestions",
                        json={"worker_id": "w", "count": 1}).json()["trials"][0]
    client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete", json={"value": 1.0})
    done = client.get(f"/v1/studies/{sid}/trials/{trial['id']}").json()
    header, row = client.get(f"/v1/studies/{sid}/export").text.splitlines()[:2]
    cells = dict(zip(header.split(","), row.split(","), strict=False))
    assert (cells["created_at"], cells["completed_at"]) == (done["created_at"],
                                                            done["completed_at"])
    assert cells["completed_at"].endswith("Z")
    response = client.delete(f"/v1/studies/{sid}")
    assert response.status_code == 204 and response.content == b""
    assert "content-type" not in response.headers


def test_a_short_answer_says_why_when_every_candidate_is_proposed(client):
    sid = create_study(client, candidates=[[float(i)] for i in range(5)], engine={
        "strategy": "uniform", "deterministic": True, "batch_size": 10})["id"]
    answer = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": 10})
    assert answer.status_code == 200 and len(answer.json()["trials"]) == 5
    assert answer.json()["waiting"] == ("5 of 10 trials: every candidate has now been proposed "
                                        "(a deterministic study proposes each once)")
    again = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "v", "count": 1})
    assert again.status_code == 422 and again.json()["field"] == "candidates"


def test_the_schemas_examples_are_requests_the_server_takes(client):
    """/docs' "Try it out" starts from these: each one runs as it stands, in a flow."""
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]

    def example(schema: dict) -> dict:
        (only,) = schema["examples"]
        return only

    def body(path: str) -> dict:
        return example(spec["paths"][f"/v1/studies/{{study_id}}/{path}"]["post"][
            "requestBody"]["content"]["application/json"]["schema"])

    studies = []
    for _ in range(2):
        created = client.post("/v1/studies", json=example(schemas["StudyCreate"]) | {
            "name": f"example-{len(studies)}"})
        assert created.status_code == 201, created.text
        studies.append(f"/v1/studies/{created.json()['id']}")
    first, second = studies
    # the first study's trials are 1 and 2, which the bulk example names
    asked = client.post(f"{first}/suggestions", json=example(schemas["SuggestRequest"]))
    assert [t["id"] for t in asked.json()["trials"]] == [1, 2]
    bulk = client.post(f"{first}/results", json=body("results"))
    assert bulk.json() == {"completed": 1, "failed": 1, "unchanged": 0, "skipped": 0}
    assert client.post(f"{second}/observations", json=body("observations")).json() == {
        "imported": 2}
    trials = [t["id"] for t in client.post(f"{second}/suggestions", json=example(
        schemas["SuggestRequest"])).json()["trials"]]
    done = client.post(f"{second}/trials/{trials[0]}/complete",
                       json=example(schemas["CompleteRequest"]))
    assert done.status_code == 200 and done.json()["value"] == 0.93
    failed = client.post(f"{second}/trials/{trials[1]}/fail", json=example(schemas["FailRequest"]))
    assert failed.status_code == 200 and failed.json()["status"] == "pending", failed.text
