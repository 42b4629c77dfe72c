"""Browser fixtures: Debian's chromium driven by Playwright (no Playwright browser download)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

CHROMIUM = os.environ.get("BBKB_CHROMIUM", "/usr/bin/chromium")


#: Set by .ci/run: a missing browser fails the browser tests instead of skipping them.
REQUIRE_BROWSER = bool(os.environ.get("BBKB_REQUIRE_BROWSER"))


def _unavailable(reason: str) -> NoReturn:
    if REQUIRE_BROWSER:
        pytest.fail(f"{reason}; BBKB_REQUIRE_BROWSER is set", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium_browser() -> Iterator:
    """One headless chromium for the session; skips (with the reason) when there is none,
    fails instead when BBKB_REQUIRE_BROWSER is set."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[test]')")
    if not Path(CHROMIUM).exists():
        _unavailable(f"no chromium at {CHROMIUM} (as root: apt-get install -y chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium_browser) -> Iterator:  # type: ignore[no-untyped-def]
    """A fresh tab (own sessionStorage); a JavaScript error in the page fails the test."""
    context = chromium_browser.new_context(viewport={"width": 1300, "height": 900},
                                           accept_downloads=True)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.set_default_timeout(20_000)
    yield tab
    context.close()
    assert not errors, f"JavaScript errors in the page: {errors}"


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    """Where screenshots go: $BBKB_UI_ARTIFACTS if set, else the test's tmp directory."""
    path = Path(os.environ.get("BBKB_UI_ARTIFACTS") or tmp_path / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path
