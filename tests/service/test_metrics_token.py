"""BBKB_METRICS_TOKEN: /metrics answers only a scraper that sends the token as a Bearer
credential (Prometheus' `authorization` setting); unset, it stays open."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.settings import Settings

from .helpers import app_client

TOKEN = "scrape-" + "x" * 24


def test_metrics_need_the_token_when_one_is_set(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with app_client(url, tmp_path, metrics_token=TOKEN) as client:
        for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"},
                        {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}):
            refused = client.get("/metrics", headers=headers)
            assert refused.status_code == 401, headers
            assert refused.headers["WWW-Authenticate"] == "Bearer"
            assert refused.json()["field"] == "authorization"
            assert TOKEN not in refused.text
        for header in (f"Bearer {TOKEN}", f"bearer  {TOKEN} ", f"Bearer\t{TOKEN}"):
            scraped = client.get("/metrics", headers={"Authorization": header})
            assert scraped.status_code == 200 and "bbkb_request_seconds" in scraped.text
        assert client.get("/healthz").status_code == 200  # the probes stay open
    with app_client(url, tmp_path) as client:  # unset: open, as before
        assert client.get("/metrics").status_code == 200


def test_a_short_token_is_refused_and_never_shown(tmp_path):
    with pytest.raises(ValidationError, match="metrics_token"):
        Settings(data_dir=tmp_path, metrics_token="short")
    assert TOKEN not in repr(Settings(data_dir=tmp_path, metrics_token=TOKEN))
    assert Settings(data_dir=tmp_path, metrics_token="").metrics_token is None
