"""The README's engine snippet runs as printed and ends (it once looped over ever-doubling
sync batches for good)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_engine_snippet_runs_and_prints_what_the_readme_says():
    text = README.read_text()
    section = text[text.index("## The engine"):]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), {})
    claimed = re.search(r"\(Prints `([^`]+)`", section)
    assert claimed is not None and printed.getvalue().strip() == claimed.group(1)
