"""The worker tests' system: a real Redis and a real API server (SQLite) per test; the test
appends the worker processes it spawns to ``system["workers"]`` and may replace the server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service.processes import RedisProcess, ServerProcess
from workers import runner


@pytest.fixture
def system(tmp_path) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    redis = RedisProcess().start()
    env = {"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none", "BBKB_REDIS_URL": redis.url,
           "BBKB_REAPER_INTERVAL": "0.2", "BBKB_OBJECTIVE_MODULES": "tests"}
    parts: dict[str, Any] = {"redis": redis, "env": env, "workers": [],
                             "server": ServerProcess(env).start()}
    yield parts
    runner.stop(parts["workers"], timeout=5)
    parts["server"].stop()  # a test may have replaced it (a restarted server)
    redis.stop()
