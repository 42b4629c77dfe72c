"""The deployment's settings are documented once: the README's table, .env.example, compose."""

from __future__ import annotations

import re

from service.settings import Settings

from .deployfiles import ENV_EXAMPLE, ROOT, compose_config


def _readme_table() -> set[str]:
    readme = (ROOT / "README.md").read_text()
    assert readme.count("| environment variable |") == 1  # one table, in "## Deployment"
    deployment = readme.split("\n## Deployment\n", 1)[1]
    first_cells = [line.split("|")[1] for line in deployment.splitlines()
                   if line.startswith("| `")]
    return {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}


def test_every_setting_is_in_the_table_the_example_and_the_compose_api():
    """... and setting it in .env (or the shell) reaches the api container."""
    documented, example = _readme_table(), ENV_EXAMPLE.read_text()
    variables = [f"BBKB_{name.upper()}" for name in Settings.model_fields]
    assert set(variables) <= documented
    passed = [v for v in variables if v not in ("BBKB_DATA_DIR", "BBKB_AUTO_MIGRATE")]
    api_env = compose_config(**{v: f"set-{v}" for v in passed})["services"]["api"]["environment"]
    for variable in passed:
        assert re.search(rf"^#? ?{variable}=", example, re.M), f"{variable} not in .env.example"
        assert api_env[variable] == f"set-{variable}", f"{variable} does not reach the api"
    assert api_env["BBKB_AUTO_MIGRATE"] == "false"  # fixed: the migrate service upgrades
    assert "BBKB_DATA_DIR" not in api_env  # SQLite only; compose uses PostgreSQL


def test_every_variable_of_the_example_and_the_compose_file_is_in_the_table():
    documented = _readme_table()
    in_example = set(re.findall(r"^#? ?(\w+)=", ENV_EXAMPLE.read_text(), re.M))
    services = compose_config()["services"]
    in_compose = {k for s in ("migrate", "api", "worker") for k in services[s]["environment"]}
    assert in_example and in_compose
    assert (in_example | in_compose) - documented == set()


def test_every_worker_setting_reaches_the_compose_workers():
    """BBKB_WORKER_RETRY_SECONDS was in the table but not passed to the worker containers:
    setting it in .env did nothing. Every variable the table gives to the workers reaches them
    (BBKB_URL is the api service's address there; the key file is the worker-key volume's)."""
    readme = (ROOT / "README.md").read_text().split("\n## Deployment\n", 1)[1]
    rows = [line.split("|") for line in readme.splitlines() if line.startswith("| `")]
    variables = {name for row in rows if "worker" in row[3]
                 for name in re.findall(r"`(BBKB_\w+)`", row[1])}
    assert "BBKB_WORKER_RETRY_SECONDS" in variables
    fixed = {"BBKB_URL": "http://api:8000", "BBKB_API_KEY_FILE": None}
    passed = variables - set(fixed)
    worker = compose_config(**{v: f"set-{v}" for v in passed})["services"]["worker"]
    for variable in passed:
        assert worker["environment"][variable] == f"set-{variable}", variable
        assert re.search(rf"^#? ?{variable}=", ENV_EXAMPLE.read_text(), re.M), variable
    assert worker["environment"]["BBKB_URL"] == fixed["BBKB_URL"]


def test_every_api_route_is_in_the_readmes_endpoint_table(tmp_path):
    """The dispatch routes and the dashboard's views were missing from it. Each /v1 route's
    last fixed segment (``complete``, ``dispatch``, ``summaries``, ...) appears in the table."""
    from service.api.app import create_app

    readme = (ROOT / "README.md").read_text()
    table = readme.split("| resource | calls |", 1)[1].split("\n\n", 1)[0]
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", auth="none"))
    paths = [p for p in app.openapi()["paths"] if p.startswith("/v1/")]
    assert len(paths) > 20
    missing = []
    for path in paths:
        fixed = [part for part in path.split("/") if part and not part.startswith("{")]
        if not re.search(rf"[/.]{re.escape(fixed[-1])}\b", table):
            missing.append(path)
    assert missing == []
