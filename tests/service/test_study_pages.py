"""GET /v1/studies and /v1/summaries a page at a time (keyset pagination on the study id), the
``name`` lookup, and the SDK's ``studies()`` / ``study(name)`` on top of them, on both databases."""

from __future__ import annotations

import pytest

from client import Client, NotFoundError
from service.auth import create_key
from service.store.database import transaction

from .helpers import app_client, create_study


def _pages(http, url: str, limit: int) -> tuple[list[int], int]:  # type: ignore[no-untyped-def]
    """Every id of the listing, following next_after; and the number of pages."""
    ids, after, pages = [], 0, 0
    while after is not None:
        answer = http.get(url, params={"after": after, "limit": limit})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        ids += [s["id"] for s in page["studies"]]
        pages += 1
        if page["next_after"] is not None:
            assert page["next_after"] == page["studies"][-1]["id"]
        after = page["next_after"]
    return ids, pages


def test_pages_names_and_owners(database_url, tmp_path):
    with app_client(database_url, tmp_path, auth="keys") as http:
        with transaction(http.app.state.sessions) as session:
            alice, bob = create_key(session, "alice"), create_key(session, "bob")
        http.headers["Authorization"] = f"Bearer {bob}"
        theirs = create_study(http, name="s2")["id"]  # bob's "s2" is not alice's
        http.headers["Authorization"] = f"Bearer {alice}"
        ids = [create_study(http, name=f"s{i}")["id"] for i in range(7)]
        assert http.delete(f"/v1/studies/{ids[3]}").status_code in (200, 204)
        live = ids[:3] + ids[4:]
        for url in ("/v1/studies", "/v1/summaries"):
            assert _pages(http, url, 4) == (live, 2), url  # 4 + 2: the short page is the last
            assert _pages(http, url, 3) == (live, 3), url  # 3 + 3 + an empty last page
            assert _pages(http, url, 1000) == (live, 1), url
            page = http.get(url, params={"after": ids[4], "limit": 2}).json()
            assert [s["id"] for s in page["studies"]] == ids[5:7], url
            default = http.get(url).json()
            assert [s["id"] for s in default["studies"]] == live and \
                default["next_after"] is None, url
            for bad in ({"limit": 0}, {"limit": 10_001}, {"after": -1}, {"after": "x"}):
                answer = http.get(url, params=bad)
                assert answer.status_code == 422 and answer.json()["field"], (url, bad)
        for limit in (1, 2, 100):  # a name lookup is one answer: never a next page
            named = http.get("/v1/studies", params={"name": "s2", "limit": limit}).json()
            assert [s["id"] for s in named["studies"]] == [ids[2]] \
                and named["next_after"] is None, limit  # not bob's "s2"
        for missing in ("s3", "nope", "", "x" * 300):  # s3 is deleted
            assert http.get("/v1/studies", params={"name": missing}).json() == {
                "studies": [], "next_after": None}, missing
        http.headers["Authorization"] = f"Bearer {bob}"
        for i in range(7):  # alice's names: bob finds none of her studies, only his own "s2"
            for limit in (1, 100):
                named = http.get("/v1/studies", params={"name": f"s{i}", "limit": limit}).json()
                assert [s["id"] for s in named["studies"]] == ([theirs] if i == 2 else []) \
                    and named["next_after"] is None, (i, limit)
        assert _pages(http, "/v1/studies", 1) == ([theirs], 2)


def test_sdk_lists_every_page_and_finds_by_name(database_url, tmp_path):
    with app_client(database_url, tmp_path) as http:
        sdk = Client(http=http)
        made = [sdk.create_study(f"study-{i}", candidates=[[0.0], [1.0]]).id for i in range(5)]
        assert [s.id for s in sdk.studies(page_size=2)] == made
        assert [s.id for s in sdk.studies()] == made
        assert sdk.study("study-3").id == made[3]
        for missing in ("study-9", ""):
            with pytest.raises(NotFoundError, match="no study named"):
                sdk.study(missing)


def test_pages_are_cut_to_the_page_limit(database_url, tmp_path):
    """A ``limit`` above ``BBKB_PAGE_LIMIT`` is cut to it (as for trials), and the pages still
    chain: ``next_after`` follows the page actually answered."""
    with app_client(database_url, tmp_path, page_limit=3) as http:
        ids = [create_study(http, name=f"s{i}")["id"] for i in range(5)]
        for url in ("/v1/studies", "/v1/summaries"):
            first = http.get(url, params={"limit": 1000}).json()
            assert [s["id"] for s in first["studies"]] == ids[:3], url
            assert first["next_after"] == ids[2], url
            assert _pages(http, url, 1000) == (ids, 2), url


def test_a_page_limit_above_what_a_list_accepts_is_refused():
    """``BBKB_PAGE_LIMIT`` above 10000 (the largest ``limit`` a list takes) could never apply:
    it is a settings error at start, not a silent cap."""
    from pydantic import ValidationError

    from service.settings import Settings

    assert Settings(page_limit=10_000).page_limit == 10_000
    with pytest.raises(ValidationError, match="less than or equal to 10000"):
        Settings(page_limit=10_001)
