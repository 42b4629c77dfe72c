"""The studies page's header says whose key is in use, whether it is a worker key, and how much
of the owner's quotas its studies and running dispatches use (GET /v1/me)."""

from __future__ import annotations

import httpx2

from service.auth import create_key, revoke_key
from service.store.database import make_engine, session_factory, transaction

from .ui_helpers import create_study


def test_the_header_names_the_key_and_the_quotas_in_use(server_factory, tmp_path, page):
    url = f"sqlite:///{tmp_path / 'bbkb.db'}"
    server = server_factory({"BBKB_DATABASE_URL": url, "BBKB_AUTH": "keys",
                             "BBKB_DATA_DIR": str(tmp_path), "BBKB_OWNER_MAX_STUDIES": "5",
                             "BBKB_OWNER_MAX_PARALLELISM": "10"})
    engine = make_engine(url)
    with transaction(session_factory(engine)) as session:
        owner, worker = create_key(session, "lab"), create_key(session, "lab", "worker")
    engine.dispose()
    with httpx2.Client(base_url=server.url, timeout=30,
                       headers={"Authorization": f"Bearer {owner}"}) as as_owner:
        create_study(as_owner, name="one")
        create_study(as_owner, name="two")

    page.goto(f"{server.url}/ui/?poll=300")
    page.wait_for_selector("#key-form:not([hidden])")
    page.fill("#key-input", worker)
    page.click("#key-form button")
    page.wait_for_selector("#account:not([hidden])")
    assert page.text_content("#account") == (
        "lab · worker key (reads, asks and reports only) · 2 of 5 studies · "
        "parallelism 0 of 10 in use")
    assert sorted(page.eval_on_selector_all("#studies tbody tr a", "a => a.map(x => x.text)")
                  ) == ["one", "two"]  # a worker key reads them

    engine = make_engine(url)  # the worker key revoked meanwhile: its owner is not shown
    with transaction(session_factory(engine)) as session:
        revoke_key(session, worker)
    engine.dispose()
    page.wait_for_selector("#key-form:not([hidden])")
    assert page.is_hidden("#account")

    page.fill("#key-input", owner)  # an owner key: the owner, without the worker note
    page.click("#key-form button")
    page.wait_for_function("() => document.querySelector('#account').textContent"
                           ".startsWith('lab · 2 of 5')")
