"""The README's SDK snippet runs as printed against a real server, Redis and workers: a local
loop, then a dispatch evaluated by `bbkb worker` processes."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from client import Client
from workers import runner

README = Path(__file__).resolve().parents[2] / "README.md"
URL = "http://127.0.0.1:8000"


def test_the_sdk_snippet_runs_on_a_real_system(system):
    text = README.read_text()
    section = text[text.index("## Workers, the SDK and the `bbkb` command"):]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert URL in code
    url = system["server"].url
    system["workers"] += runner.spawn(system["redis"].url, 2, env={"BBKB_URL": url})
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace(URL, url), str(README), "exec"), {})
    with Client(url) as client:
        study = client.study("branin")
        info = study.info
        candidates = [t.candidate for t in study.trials()]
    assert len(set(candidates)) == len(candidates) == 400  # deterministic: none twice
    assert info.counts.get("completed") == 400 and not info.counts.get("failed"), info.counts
    assert f"value={info.best.value!r}" in printed.getvalue()  # print(study.best())
