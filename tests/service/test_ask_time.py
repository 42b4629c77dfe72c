"""An ask's time budget (``trials.ASK_SECONDS``): a large ``count`` on a costly strategy held
the study's lock (on SQLite every write of every study) for minutes; it now hands out what it
has made once its time is up and says so, and the next ask goes on."""

from __future__ import annotations

from service import trials

from .helpers import app_client, create_study

ASYNC = {"strategy": "gp-ucb", "mode": "async", "seed": 5,
         "kernel": {"name": "rbf", "lengthscale": 0.2}, "lam": 0.5}


def test_an_ask_out_of_time_hands_out_what_it_made_and_says_ask_again(
        database_url, tmp_path, monkeypatch):
    with app_client(database_url, tmp_path) as client:
        timed = create_study(client, name="timed", engine=ASYNC)["id"]
        whole = create_study(client, name="whole", engine=ASYNC)["id"]
        url = "/v1/studies/{}/suggestions"
        expected = client.post(url.format(whole), json={"worker_id": "w", "count": 6}).json()
        assert len(expected["trials"]) == 6 and expected["waiting"] is None
        monkeypatch.setattr(trials, "ASK_SECONDS", 0.0)
        got = []
        for worker in ("a", "b", "c"):  # each worker holds what it got: the next is new
            answer = client.post(url.format(timed), json={"worker_id": worker, "count": 2})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert len(body["trials"]) == 1 and "1 of 2 trials" in body["waiting"]
            assert "ask again" in body["waiting"]
            got += body["trials"]
        assert [t["candidate"] for t in got] == [t["candidate"] for t in expected["trials"][:3]]
        monkeypatch.setattr(trials, "ASK_SECONDS", 5.0)
        rest = client.post(url.format(timed), json={"worker_id": "d", "count": 3}).json()
        assert rest["waiting"] is None
        assert [t["candidate"] for t in rest["trials"]] == \
            [t["candidate"] for t in expected["trials"][3:]]
