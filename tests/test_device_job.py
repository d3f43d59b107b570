"""bench/device_job.py: a job started in one call runs on after it, and later calls wait for it,
read what it wrote since they last looked, and take its files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT

SCRIPT = ROOT / "bench" / "device_job.py"


@pytest.fixture
def job(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import device_job

    return device_job


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_job_runs_to_its_end_and_wait_says_its_exit_code(job, tmp_path, capsys):
    code = "print('first', flush=True); import time; time.sleep(0.3); print('last')"
    assert job.start(tmp_path, "t", py(code)) == 0
    assert job.wait(tmp_path, "t", max_s=30, poll_s=0.05) == job.DONE
    said = capsys.readouterr().out
    assert "first" in said and "last" in said
    assert "job t: done, exit code 0" in said
    assert job.state(tmp_path / "t")["state"] == "done"
    assert (tmp_path / "t" / "rc").read_text().strip() == "0"


def test_wait_returns_while_the_job_runs_and_next_time_prints_only_what_is_new(job, tmp_path, capsys):
    marker = tmp_path / "go"
    code = (
        "import pathlib, time\n"
        "print('before', flush=True)\n"
        f"while not pathlib.Path({str(marker)!r}).exists(): time.sleep(0.02)\n"
        "print('after', flush=True)\n"
    )
    job.start(tmp_path, "t", py(code))
    deadline = time.time() + 20
    while "before" not in (tmp_path / "t" / "log").read_text() and time.time() < deadline:
        time.sleep(0.02)
    capsys.readouterr()
    assert job.wait(tmp_path, "t", max_s=0.2, poll_s=0.05) == job.RUNNING
    said = capsys.readouterr().out
    assert "before" in said and "still running" in said
    marker.write_text("")
    assert job.wait(tmp_path, "t", max_s=30, poll_s=0.05) == job.DONE
    said = capsys.readouterr().out
    assert "after" in said and "before" not in said


def test_a_failed_job_fails_the_wait_and_a_job_never_started_says_so(job, tmp_path, capsys):
    job.start(tmp_path, "bad", py("import sys; print('no'); sys.exit(7)"))
    assert job.wait(tmp_path, "bad", max_s=30, poll_s=0.05) == 1
    assert "exit code 7" in capsys.readouterr().out
    assert job.wait(tmp_path, "never", max_s=1) == job.MISSING
    assert "none on this machine" in capsys.readouterr().out
    job.start(tmp_path, "absent", ["/no/such/program"])
    assert job.wait(tmp_path, "absent", max_s=30, poll_s=0.05) == 1
    assert "did not start" in (tmp_path / "absent" / "log").read_text()


def test_a_running_job_is_not_started_twice(job, tmp_path):
    job.start(tmp_path, "t", py("import time; time.sleep(30)"))
    try:
        assert job.start(tmp_path, "t", py("print('again')")) == job.RUNNING
        assert job.state(tmp_path / "t")["state"] == "running"
    finally:
        os.killpg(int((tmp_path / "t" / "pid").read_text()), signal.SIGKILL)  # the runner and its command
    deadline = time.time() + 20
    while job.state(tmp_path / "t")["state"] == "running" and time.time() < deadline:
        time.sleep(0.05)
    # its runner was killed before the command ended: no exit code, said as lost
    assert job.state(tmp_path / "t")["state"] == "lost"


def test_the_job_outlives_the_call_that_started_it(tmp_path):
    """The device ends every process of a call's command when it returns: here the caller's whole
    process group is killed right after `start`, and the job still runs to its end."""
    out = tmp_path / "written"
    write = f"import time, pathlib; time.sleep(1); pathlib.Path('{out}').write_text('ok')"
    caller = subprocess.Popen(
        [
            "bash",
            "-c",
            f"{sys.executable} {SCRIPT} start --jobs {tmp_path} --name t -- "
            f'{sys.executable} -c "{write}"'
            " && echo started && sleep 60",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert "started" in caller.stdout.readline() + caller.stdout.readline()
    os.killpg(caller.pid, signal.SIGKILL)
    caller.wait()
    waited = subprocess.run(
        [sys.executable, str(SCRIPT), "wait", "--jobs", str(tmp_path), "--name", "t", "--max-s", "30"],
        capture_output=True,
        text=True,
    )
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert out.read_text() == "ok"
    status = subprocess.run(
        [sys.executable, str(SCRIPT), "status", "--jobs", str(tmp_path), "--name", "t"],
        capture_output=True,
        text=True,
    )
    assert json.loads(status.stdout)["state"] == "done"


def test_collect_copies_the_log_and_the_files_and_says_which_are_missing(job, tmp_path, capsys):
    job.start(tmp_path / "jobs", "t", py("print('hello')"))
    job.wait(tmp_path / "jobs", "t", max_s=30, poll_s=0.05)
    made = tmp_path / "table.json"
    made.write_text("{}")
    assert job.collect(tmp_path / "jobs", "t", tmp_path / "out", [made, tmp_path / "absent.md"]) == 1
    assert "absent.md is not there" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["t-job.log", "table.json"]
    assert "hello" in (tmp_path / "out" / "t-job.log").read_text()


def test_collect_takes_the_files_after_the_options_as_the_docstring_writes_it(job, tmp_path):
    """`collect --name t --to OUT FILE ...` from the command line (a device call on 2026-12-07 lost its
    files to argparse's "unrecognized arguments" for the files after --to)."""
    job.start(tmp_path / "jobs", "t", py("print('hello')"))
    job.wait(tmp_path / "jobs", "t", max_s=30, poll_s=0.05)
    made = tmp_path / "table.json"
    made.write_text("{}")
    where = ["--jobs", str(tmp_path / "jobs"), "--name", "t", "--to", str(tmp_path / "out")]
    got = subprocess.run(
        [sys.executable, str(SCRIPT), "collect", *where, str(made)],
        capture_output=True,
        text=True,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["t-job.log", "table.json"]


def test_a_name_is_one_folder(job, tmp_path):
    with pytest.raises(SystemExit, match="plain folder name"):
        job.start(tmp_path, "../up", py("pass"))
