"""The deployment files, checked without a Docker engine: the compose file against the compose
specification and Compose's own loader, the Dockerfile with hadolint, and the properties the
deployment relies on (non-root, no compilers at run time, one BLAS thread, migrations first)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .deployfiles import (
    COMPOSE,
    DOCKERFILE,
    ROOT,
    compose_config,
    docker_compose,
    dockerfile_stages,
    tool,
)

BLAS_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.compose-spec", str(path)], capture_output=True, text=True,
                          check=False)


def _broken_compose(tmp_path: Path, old: str, new: str) -> Path:
    text = COMPOSE.read_text()
    assert old in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(old, new, 1))
    (tmp_path / "Dockerfile").write_text(DOCKERFILE.read_text())
    return broken


def test_the_compose_file_matches_the_compose_specification(tmp_path):
    ok = _check_jsonschema(COMPOSE)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = _check_jsonschema(_broken_compose(tmp_path, "service_completed_successfully",
                                               "service_finished"))
    assert broken.returncode == 1 and "service_finished" in broken.stdout + broken.stderr


def test_docker_compose_loads_the_file_with_the_example_env(tmp_path):
    config = compose_config()
    assert set(config["services"]) == {"postgres", "redis", "migrate", "worker-key", "api",
                                       "worker"}
    with pytest.raises(ValueError, match="undefined service \"migrator\""):
        compose_config(_broken_compose(tmp_path, "      migrate:\n        condition",
                                       "      migrator:\n        condition"))
    version = subprocess.run([docker_compose(), "version"], capture_output=True, text=True)
    assert version.returncode == 0 and "Docker Compose version v2" in version.stdout


def test_the_dockerfile_passes_hadolint(tmp_path):
    lint = subprocess.run([tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text().replace("RUN apt-get update \\",
                                                  "RUN cd /tmp && apt-get update \\", 1))
    assert subprocess.run([tool("hadolint"), str(bad)], capture_output=True).returncode != 0


def test_the_runtime_image_is_small_non_root_and_runs_bbkb():
    stages = dockerfile_stages()
    build, final = stages[0], stages[-1]
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert len(stages) == 2 and base and "-slim" in base.group(1)
    assert any("build-essential" in run for run in build.all("RUN"))
    assert not any("apt-get install" in run for run in final.all("RUN"))  # no compilers
    assert final.all("COPY") == ["--from=build /opt/bbkb /opt/bbkb"]
    user = final.all("USER")[-1]
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", user), user  # numeric, not root
    assert final.exec_form("ENTRYPOINT") == ["bbkb"]
    assert final.exec_form("CMD") == ["serve"]
    assert "/healthz" in final.all("HEALTHCHECK")[-1]
    assert BLAS_ONE_THREAD.items() <= final.env().items()


def test_migrations_run_first_and_the_state_is_kept_healthy():
    services = compose_config()["services"]
    for name in ("postgres", "redis"):
        assert services[name]["healthcheck"]["test"], name
        assert [v["type"] for v in services[name]["volumes"]] == ["volume"], name
    migrate, api, worker = services["migrate"], services["api"], services["worker"]
    assert migrate["command"] == ["migrate"] and migrate["restart"] == "no"
    assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert api["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert worker["depends_on"]["api"]["condition"] == "service_healthy"
    assert api["environment"]["BBKB_AUTO_MIGRATE"] == "false"
    assert int(api["environment"]["BBKB_API_WORKERS"]) > 1  # several uvicorn processes
    for service in (api, worker):  # one image, as the compose file builds it
        assert service["image"] == migrate["image"] and service["build"]["context"] == str(ROOT)
        assert BLAS_ONE_THREAD.items() <= service["environment"].items()
    assert compose_config(BBKB_WORKER_REPLICAS="5")["services"]["worker"]["deploy"][
        "replicas"] == 5


def test_the_workers_get_a_key_made_after_the_migration():
    """`docker compose up` alone gives the workers a key: worker-key writes it into a volume
    (owned by the image's user) that the workers mount read-only and name in BBKB_API_KEY_FILE."""
    services = compose_config()["services"]
    maker, worker = services["worker-key"], services["worker"]
    assert maker["command"][:2] == ["keys", "ensure"] and maker["restart"] == "no"
    assert maker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert worker["depends_on"]["worker-key"]["condition"] == "service_completed_successfully"
    (written,), (read,) = maker["volumes"], worker["volumes"]
    assert written["type"] == read["type"] == "volume" and written["source"] == read["source"]
    assert not written.get("read_only") and read["read_only"] is True
    key_file = maker["environment"]["BBKB_API_KEY_FILE"]
    assert worker["environment"]["BBKB_API_KEY_FILE"] == key_file
    assert key_file.startswith(read["target"] + "/") and written["target"] == read["target"]
    owner = maker["command"][maker["command"].index("--owner") + 1]
    assert owner == "lab"  # the README's `keys create --owner lab` gives the user's key
    command = compose_config(BBKB_WORKER_OWNER="team")["services"]["worker-key"]["command"]
    assert command[command.index("--owner") + 1] == "team"
    # a worker key: a worker machine's key asks for and reports trials, and changes no study
    assert maker["command"][maker["command"].index("--scope") + 1] == "worker"
    runtime = " ".join(dockerfile_stages()[-1].all("RUN"))
    assert f"install -d -o bbkb -g bbkb -m 0700 {read['target']}" in runtime



def _build_context(target: Path) -> Path:
    """The files `docker build .` sends: .dockerignore is `*` then `!path` for what is kept."""
    target.mkdir()
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert lines[lines.index("*") + 1].startswith("!")  # everything else is left out
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.db", "*.db-wal", "*.db-shm")
    for kept in (line[1:].rstrip("/") for line in lines if line.startswith("!")):
        source = ROOT / kept
        if source.is_dir():
            shutil.copytree(source, target / kept, ignore=skip)
        else:
            shutil.copy2(source, target / kept)
    return target


def test_the_build_context_holds_what_the_image_installs(tmp_path):
    """The Dockerfile's COPY sources are in the context, and `pip install .` there gives the
    migrations, data sets, dashboard files and the bbkb command the processes need."""
    context = _build_context(tmp_path / "context")
    for copy in dockerfile_stages()[0].all("COPY"):
        *sources, _ = copy.split()
        assert all((context / source).exists() for source in sources), copy
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                          str(tmp_path / "dist"), str(context)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("bbkb_service-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names
                            if n.endswith(".dist-info/entry_points.txt"))
    versions = {p.name for p in (ROOT / "migrations" / "versions").glob("[0-9]*.py")}
    assert versions and {f"migrations/versions/{v}" for v in versions} <= names
    data = {p.relative_to(ROOT).as_posix() for folder in ("service/ui/static",
                                                           "service/problems/data")
            for p in (ROOT / folder).iterdir() if p.is_file()}  # every one, whatever is added
    assert len(data) >= 7 and "service/ui/static/dashboard.css" in data
    assert data | {"migrations/script.py.mako", "workers/job.py", "client/__init__.py"} <= names, \
        data - names
    assert "bbkb = service.cli:main" in entry_points


def test_the_api_and_the_workers_get_the_same_objective_modules():
    """BBKB_OBJECTIVE_MODULES set in .env (or the shell) reaches the api, which refuses other
    import paths, and the workers, which import nothing else; unset, neither has it (default:
    built-ins only)."""
    services = compose_config(BBKB_OBJECTIVE_MODULES="mylab,otherlab.objectives")["services"]
    for name in ("api", "worker"):
        assert services[name]["environment"]["BBKB_OBJECTIVE_MODULES"] == \
            "mylab,otherlab.objectives", name
    services = compose_config()["services"]
    for name in ("api", "worker"):
        assert services[name]["environment"].get("BBKB_OBJECTIVE_MODULES") in (None, ""), name


def test_the_compose_database_url_keeps_its_password():
    """make_engine turned postgresql:// into postgresql+psycopg:// through str() of the URL,
    which SQLAlchemy 2 renders with the password as '***': the api and migrate containers
    would have logged in with the wrong password (the tests' embedded server trusts any)."""
    from service.store.database import make_engine

    url = compose_config(POSTGRES_PASSWORD="s3cret")["services"]["api"]["environment"][
        "BBKB_DATABASE_URL"]
    assert url.startswith("postgresql://") and ":s3cret@" in url
    engine = make_engine(url)
    assert (engine.url.drivername, engine.url.password) == ("postgresql+psycopg", "s3cret")
    engine.dispose()
