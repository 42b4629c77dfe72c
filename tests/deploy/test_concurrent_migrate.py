"""Several processes starting at once on an empty database (`bbkb serve --workers N`
with the default BBKB_AUTO_MIGRATE=true, or api replicas) each upgrade the schema: only one may
run the migrations, the others must wait and then find the schema current."""

from __future__ import annotations

import subprocess
import sys
import time

from service.store.database import make_engine
from service.store.migrate import current, head

START_UP = """
import sys, time
from service.store.database import make_engine
from service.store.migrate import ensure_schema
engine = make_engine(sys.argv[1])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all processes upgrade together
ensure_schema(engine)
"""


def test_simultaneous_start_ups_migrate_an_empty_database_once(database_url):
    at = time.time() + 8  # after every process has imported
    procs = [subprocess.Popen([sys.executable, "-c", START_UP, database_url, str(at)],
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    failures = [err for p in procs for err in [p.communicate(timeout=120)[1]] if p.returncode]
    assert failures == []
    engine = make_engine(database_url)
    assert current(engine) == head()
    engine.dispose()


OPEN_FRESH = """
import sys, time
from service.store.database import make_engine
paths, at = sys.argv[1:-1], float(sys.argv[-1])
for i, path in enumerate(paths):  # every process opens database i at the same moment
    engine = make_engine(f"sqlite:///{path}")
    time.sleep(max(0.0, at + 0.3 * i - time.time()))
    with engine.connect():
        pass
    engine.dispose()
"""


def test_processes_opening_a_fresh_sqlite_file_together_all_connect(tmp_path):
    """Switching to WAL races for an exclusive lock and SQLite does not wait for it; before the
    retry in ``make_engine`` about 1 connection in 25 failed with "database is locked"."""
    paths = [str(tmp_path / f"fresh{i}.db") for i in range(10)]
    at = time.time() + 5
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_FRESH, *paths, str(at)],
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    failures = [err for p in procs for err in [p.communicate(timeout=120)[1]] if p.returncode]
    assert failures == []


MIGRATE = """
import sys, time
from service.store.database import make_engine
from service.store.migrate import upgrade
engine = make_engine(sys.argv[1])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
print(upgrade(engine))  # what `bbkb migrate` prints as the schema it found
"""


def test_two_migrates_at_once_say_which_one_migrated(database_url):
    """`bbkb migrate` read the revision before taking the migration lock: two at once both
    printed "empty -> head" though the second, waiting on the lock, found nothing to do."""
    at = time.time() + 8
    procs = [subprocess.Popen([sys.executable, "-c", MIGRATE, database_url, str(at)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outcomes = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outcomes
    assert sorted(out.strip() for out, _ in outcomes) == sorted(["None", head()])
