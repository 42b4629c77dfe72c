"""Migration 0010: study names stored before names were kept in NFC are composed, unless the
owner has a study of the composed name already (then both stay, both found by name)."""

from __future__ import annotations

from sqlalchemy import select, update

from service.store.database import make_engine
from service.store.migrate import downgrade, upgrade
from service.store.models import Study

from .helpers import app_client, create_study

DECOMPOSED, COMPOSED = "e\u0301tude", "\u00e9tude"
#: 200 characters whose NFC has 400: U+0958 is excluded from composition (two code points).
LENGTHENED = "\u0958" * 200


def test_a_name_whose_composed_form_is_too_long_is_a_422(tmp_path):
    """It was a 500 on PostgreSQL (value too long for VARCHAR(200)): the length was checked
    before the name was composed."""
    with app_client(f"sqlite:///{tmp_path / 'n.db'}", tmp_path) as client:
        refused = client.post("/v1/studies", json={"name": LENGTHENED,
                                                   "candidates": [[0.0], [1.0]]})
        assert refused.status_code == 422 and refused.json()["field"] == "name", refused.text
        assert "composed (NFC) form has 400 characters" in refused.json()["detail"]
        assert client.post("/v1/studies", json={"name": LENGTHENED[:100],
                                                "candidates": [[0.0], [1.0]]}).status_code == 201


def test_old_decomposed_names_are_composed_where_no_study_has_that_name(database_url,
                                                                        tmp_path):
    with app_client(database_url, tmp_path) as client:
        ids = [create_study(client, name=name)["id"] for name in ("lone", "pair", "pair-nfc",
                                                                   "plain", "long")]
    engine = make_engine(database_url)
    try:
        downgrade(engine, "0009")
        stored = {ids[0]: "ca" + DECOMPOSED, ids[1]: DECOMPOSED, ids[2]: COMPOSED,
                  ids[4]: LENGTHENED}
        with engine.begin() as conn:  # as a server from before NFC stored them
            for study_id, name in stored.items():
                conn.execute(update(Study).where(Study.id == study_id).values(name=name))
        upgrade(engine)
        with engine.connect() as conn:
            names = dict(conn.execute(select(Study.id, Study.name)).all())
    finally:
        engine.dispose()
    assert names == {ids[0]: "ca" + COMPOSED,  # composed
                     ids[1]: DECOMPOSED, ids[2]: COMPOSED,  # a pair: both kept apart
                     ids[3]: "plain", ids[4]: LENGTHENED}  # its NFC would not fit

    with app_client(database_url, tmp_path) as client:  # found by name either way
        for typed, found in (("ca" + DECOMPOSED, ids[0]), ("ca" + COMPOSED, ids[0]),
                             (DECOMPOSED, ids[1])):
            listed = client.get("/v1/studies", params={"name": typed}).json()["studies"]
            assert [s["id"] for s in listed][:1] == [found], typed
