"""API keys isolate owners; leases expire, are re-issued, and end in abandonment."""

from __future__ import annotations

import time

from service.auth import create_key
from service.store.database import transaction

from .helpers import app_client, create_study


def _keys(client) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    with transaction(client.app.state.sessions) as session:
        alice, bob = create_key(session, "alice"), create_key(session, "bob")
    return ({"Authorization": f"Bearer {alice}"}, {"Authorization": f"Bearer {bob}"})


def test_a_key_never_sees_another_owners_study(database_url, tmp_path):
    with app_client(database_url, tmp_path, auth="keys") as client:
        assert client.get("/v1/studies").status_code == 401
        assert client.get("/v1/studies",
                          headers={"Authorization": "Bearer nope"}).status_code == 401
        alice, bob = _keys(client)
        client.headers.update(alice)
        sid = create_study(client, name="mine")["id"]
        client.headers.update(bob)
        assert client.get(f"/v1/studies/{sid}").status_code == 404  # 404, not 403
        assert client.get("/v1/studies").json()["studies"] == []
        r = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "x"})
        assert r.status_code == 404
        assert client.get(f"/v1/studies/{sid}/export").status_code == 404
        create_study(client, name="mine")  # names are unique per owner only
        client.headers.update(alice)
        assert [s["name"] for s in client.get("/v1/studies").json()["studies"]] == ["mine"]


def test_expired_leases_are_reissued_then_abandoned(database_url, tmp_path):
    with app_client(database_url, tmp_path, reaper_interval=0.05) as client:
        sid = create_study(client, lease_seconds=0.2, max_attempts=2)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "dead", "count": 1}).json()["trials"]
        _wait_status(client, sid, trial["id"], "pending")
        (again,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "alive", "count": 1}).json()["trials"]
        assert again["id"] == trial["id"] and again["attempt"] == 2
        assert "lease expired" in again["error"]
        final = _wait_status(client, sid, trial["id"], "abandoned")
        assert final["attempt"] == 2
        (new,) = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "alive", "count": 1}).json()["trials"]
        assert new["t"] == 1  # the sync batch was released by the abandonment


def test_heartbeat_keeps_a_lease_alive(database_url, tmp_path):
    with app_client(database_url, tmp_path, reaper_interval=0.05) as client:
        sid = create_study(client, lease_seconds=2.0)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w", "count": 1}).json()["trials"]
        url = f"/v1/studies/{sid}/trials/{trial['id']}"
        expiry = trial["lease_expires_at"]
        for _ in range(7):  # 3.5 s in all: longer than one lease, 1.5 s margin per beat
            time.sleep(0.5)
            beat = client.post(f"{url}/heartbeat", json={"worker_id": "w"})
            assert beat.status_code == 200
            assert beat.json()["lease_expires_at"] > expiry
            expiry = beat.json()["lease_expires_at"]
        assert client.get(url).json()["status"] == "running"
        wrong = client.post(f"{url}/heartbeat", json={"worker_id": "other"})
        assert wrong.status_code == 409 and wrong.json()["field"] == "worker_id"


def _wait_status(client, sid: int, trial_id: int, status: str) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        trial = client.get(f"/v1/studies/{sid}/trials/{trial_id}").json()
        if trial["status"] == status:
            return trial
        time.sleep(0.05)
    raise AssertionError(f"trial {trial_id} never became {status}: {trial}")
