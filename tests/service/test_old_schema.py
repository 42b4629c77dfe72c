"""A real database file made at schema revision 0001 (tests/assets) upgrades and keeps working."""

from __future__ import annotations

import shutil
from pathlib import Path

from service.store.database import make_engine
from service.store.migrate import current, head

from .helpers import app_client

ASSET = Path(__file__).parent.parent / "assets" / "schema_0001.db"


def test_a_0001_database_upgrades_and_its_study_carries_on(tmp_path):
    db = tmp_path / "bbkb.db"
    shutil.copy(ASSET, db)
    engine = make_engine(f"sqlite:///{db}")
    assert current(engine) == "0001"
    engine.dispose()
    with app_client(f"sqlite:///{db}", tmp_path) as client:  # upgrades at start-up
        study = client.get("/v1/studies/1").json()
        assert study["name"] == "old" and study["counts"]["completed"] > 0
        completed = study["counts"]["completed"]
        answer = client.post("/v1/studies/1/suggestions", json={"worker_id": "w"}).json()
        assert answer["trials"] and answer["trials"][0]["t"] == completed
    engine = make_engine(f"sqlite:///{db}")
    assert current(engine) == head()
    engine.dispose()
