"""``bbkb study dispatch | wait | pause | resume | delete``: the shell's whole workflow on a real
Redis, a real server and real worker processes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from client import Client
from service.cli import main
from workers import runner

OBJECTIVE = "tests.workers.objective_fns:quadratic"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dispatch_wait_pause_resume_delete_from_the_shell(system, tmp_path, capsys):
    url = ["--url", system["server"].url]
    path = tmp_path / "x.csv"
    np.savetxt(path, np.random.default_rng(0).random((200, 2)), delimiter=",",
               header="x0,x1", comments="")
    assert run(capsys, "study", "create", "shell", "--candidates", str(path), "--objective",
               OBJECTIVE, "-e", "seed=1", *url)[0] == 0

    code, out, _ = run(capsys, "study", "wait", "shell", *url)  # nothing dispatched yet
    assert code == 0 and "no dispatch" in out

    code, out, _ = run(capsys, "study", "dispatch", "shell", "-n", "12", "-p", "4", *url)
    assert code == 0 and "dispatch running, 0 of 12 evaluations done" in out, out
    code, _, err = run(capsys, "study", "wait", "shell", "--timeout", "0.5", "-q", *url)
    assert code == 1 and "still running after 0.5 s" in err  # no worker yet: nothing moves

    system["workers"] += runner.spawn(system["redis"].url, 2,
                                      env={"BBKB_URL": system["server"].url})
    code, out, _ = run(capsys, "study", "wait", "shell", "--json", "-q", "--timeout", "120",
                       *url)
    status = json.loads(out)
    assert code == 0 and (status["status"], status["finished"]) == ("done", 12), status

    code, out, err = run(capsys, "study", "dispatch", "shell", "-n", "5", "--wait",
                         "--timeout", "120", *url)  # counted from this dispatch's start
    assert code == 0 and "dispatch done, 5 of 5 evaluations done" in out, (out, err)
    assert "the study has 17 completed and 0 failed trials" in out
    assert "evaluations" in err  # the progress bar
    code, out, _ = run(capsys, "study", "show", "shell", "--json", *url)
    assert json.loads(out)["counts"]["completed"] == 17, out

    assert run(capsys, "study", "pause", "shell", *url)[1].strip().endswith(
        ": paused, dispatch done")  # (a done dispatch stays done)
    assert run(capsys, "study", "resume", "shell", *url)[1].strip().endswith(
        ": active, dispatch done")
    with Client(system["server"].url) as bbkb:  # as a worker refusing the objective does
        study = bbkb.study("shell")
        study.dispatch(4, parallelism=2)
        study.pause_dispatch()
    code, _, _ = run(capsys, "study", "wait", "shell", "-q", "--timeout", "30", *url)
    assert code == 1  # it ended paused
    assert run(capsys, "study", "resume", "shell", *url)[1].strip().endswith(
        ": active, dispatch running")
    code, out, _ = run(capsys, "study", "wait", "shell", "-q", "--timeout", "120", *url)
    assert code == 0 and "dispatch done, 4 of 4" in out
    assert run(capsys, "study", "pause", "shell", *url)[0] == 0

    code, _, err = run(capsys, "study", "delete", "shell", *url)  # stdin is not a terminal
    assert code == 1 and "pass --yes" in err
    code, out, _ = run(capsys, "study", "delete", "shell", "--yes", "--json", *url)
    assert code == 0 and "deleted" in json.loads(out)
    code, _, err = run(capsys, "study", "show", "shell", *url)
    assert code == 1 and "shell" in err


@pytest.mark.parametrize("argv, message", [
    (["dispatch", "s"], "required: --n-evaluations"),
    (["dispatch", "s", "-n", "3", "--timeout", "0"], "expected a finite number > 0"),
    (["wait", "s", "--timeout", "soon"], "not a number: 'soon'"),
])
def test_bad_arguments_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(["study", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_dispatch_whose_every_evaluation_failed_exits_1(system, tmp_path, capsys):
    """An objective that fails every trial for good (here: it returns a string) made
    ``dispatch --wait`` print "dispatch done, 4 of 4 evaluations done ... 0 completed and 4
    failed trials" and exit 0, as if all went well. ``wait`` alone says so too, from the
    dispatch's own counts (it judged from the study's, and could not tell where the study had
    a completed trial from before)."""
    url = ["--url", system["server"].url]
    path = tmp_path / "x.csv"
    np.savetxt(path, np.random.default_rng(0).random((50, 2)), delimiter=",",
               header="x0,x1", comments="")
    assert run(capsys, "study", "create", "bad", "--candidates", str(path), "--objective",
               "tests.workers.objective_fns:text", "-e", "seed=1", *url)[0] == 0
    system["workers"] += runner.spawn(system["redis"].url, 1,
                                      env={"BBKB_URL": system["server"].url})
    code, out, err = run(capsys, "study", "dispatch", "bad", "-n", "4", "-p", "2", "--wait",
                         "-q", "--timeout", "120", *url)
    assert "dispatch done, 4 of 4" in out and "0 completed and 4 failed trials" in out, out
    assert code == 1 and err.startswith("error: the dispatch completed none of its "
                                        "evaluations: 4 trial(s) failed for good, the latest "
                                        "trial "), err
    assert "objective returned str 'not a number', not a number" in err, err
    code, out, err = run(capsys, "study", "wait", "bad", "--json", "-q", *url)
    assert code == 1 and json.loads(out)["status"] == "done" and "4 trial(s)" in err, err

    with Client(system["server"].url) as bbkb:  # one value: the next dispatch did complete
        study = bbkb.study("bad")           # something, though not by itself
        trial = study.ask("me").trials[0]
        study.tell(trial.id, 1.0, worker_id="me")
    code, _, err = run(capsys, "study", "dispatch", "bad", "-n", "2", "--wait", "-q", *url)
    assert code == 1 and "2 trial(s) failed for good" in err, err
    code, _, err = run(capsys, "study", "wait", "bad", "-q", *url)  # the study has a
    assert code == 1 and "2 trial(s) failed for good" in err, err  # value: the dispatch's counts
    with Client(system["server"].url) as bbkb:
        status = bbkb.study("bad").dispatch_status()
    assert (status.finished, status.completed) == (2, 0)
