"""Run status from the history and the process table: after a crash or a reboot too."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cockpit.protocol.wire import encode
from cockpit.run import process, rundir
from cockpit.run.control import NotRunning, send_command
from cockpit.run.status import record_exit, run_status


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def make_run(lines: list[bytes], trainer: dict | None = None) -> rundir.RunDir:
    run = rundir.create(None, "synthetic:tiny", "model: {name: synthetic:tiny}\n")
    run.events_path.write_bytes(b"".join(lines))
    if trainer is not None:
        run.trainer_path.write_text(json.dumps(trainer))
    return run


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_finished_stopped_failed(home):
    base = [
        encode("hello", pid=1),
        encode("train_begin", total_steps=10),
        encode("log", step=10, total_steps=10),
    ]
    finished = make_run([*base, encode("done", status="finished", step=10)], {"pid": dead_pid()})
    stopped = make_run([*base, encode("done", status="stopped", step=4)], {"pid": dead_pid()})
    failed = make_run([*base, encode("error", kind="oom", message="CUDA out of memory")], {"pid": dead_pid()})
    assert run_status(finished).state == "finished"
    assert run_status(stopped).state == "stopped"
    status = run_status(failed)
    assert status.state == "failed" and status.detail.startswith("oom: CUDA out of memory")


def test_crash_without_final_event_is_failed_with_a_way_on(home):
    run = make_run(
        [encode("hello", pid=1), encode("log", step=3, total_steps=10), b'{"v":1,"ty'],
        {"pid": dead_pid(), "boot_id": process.boot_id()},
    )
    status = run_status(run)
    assert status.state == "failed" and "killed" in status.detail and "cockpit restart" in status.detail
    assert status.step == 3


def test_reboot_is_detected_by_boot_id(home):
    # a live pid, but recorded under another boot: it is not our trainer
    run = make_run(
        [encode("hello", pid=os.getpid())],
        {"pid": os.getpid(), "create_time": None, "boot_id": "another-boot"},
    )
    assert not process.is_alive(run)
    assert "machine rebooted" in run_status(run).detail


def test_pid_reuse_is_not_taken_for_the_trainer(home):
    run = make_run([encode("hello", pid=os.getpid())], {"pid": os.getpid(), "create_time": 1.0})
    assert not process.is_alive(run)


def test_live_process_is_running(home):
    import psutil

    me = psutil.Process()
    run = make_run(
        [encode("hello", pid=me.pid), encode("phase", phase="training")],
        {"pid": me.pid, "create_time": me.create_time(), "boot_id": process.boot_id()},
    )
    assert run_status(run).state == "running"


def test_a_step_of_the_clock_does_not_hide_a_running_trainer(home, monkeypatch):
    """psutil's create time is the start since boot plus the boot time, which Linux derives from
    the wall clock: after a clock step (NTP soon after boot, a VM resumed or moved) the trainer's
    recorded create time no longer matched it, and `cockpit stop` said "not running" of a trainer
    that trained on (the multi-GPU stop test failed so once, its ranks alive minutes later). Its
    start in ticks since boot, recorded beside it, does not move."""
    import psutil
    import psutil._pslinux as pslinux

    from cockpit.run import pids

    me = psutil.Process()
    record = {"pid": me.pid, **pids.identity(me.pid), "boot_id": process.boot_id()}
    assert isinstance(record["start_ticks"], int)
    run = make_run([encode("hello", pid=me.pid), encode("phase", phase="training")], record)
    assert process.is_alive(run)
    booted = pslinux.boot_time()
    monkeypatch.setattr(pslinux, "boot_time", lambda: booted + 30.0)  # the clock stepped 30 s on
    assert abs(psutil.Process(me.pid).create_time() - record["create_time"]) > 1.0  # what fooled it
    assert process.is_alive(run) and run_status(run).state == "running"
    old_style = make_run(
        [encode("hello", pid=me.pid)], {k: v for k, v in record.items() if k != "start_ticks"}
    )
    assert not process.is_alive(old_style)  # a record of before: judged by the create time, as it was
    reused = make_run([encode("hello", pid=me.pid)], record | {"start_ticks": record["start_ticks"] - 100})
    assert not process.is_alive(reused)  # another start under this pid: not the trainer


def test_find_by_id_prefix_path_and_latest(home):
    a = make_run([encode("hello", pid=1)])
    b = make_run([encode("hello", pid=1)])
    assert rundir.find(None) == b
    assert rundir.find(a.run_id) == a
    assert rundir.find(str(a.path)) == a
    with pytest.raises(rundir.RunNotFound, match="matches 2 runs"):
        rundir.find("tiny")
    with pytest.raises(rundir.RunNotFound, match="no run matches"):
        rundir.find("zzz")


def test_run_outside_the_default_root_is_listed(home, tmp_path):
    run = rundir.create(tmp_path / "elsewhere", "synthetic:tiny", "")
    assert run.path.parent == (tmp_path / "elsewhere")
    assert [r.path for r in rundir.all_runs()] == [run.path.resolve()]


def test_command_to_a_run_without_trainer_says_so(home):
    run = make_run([encode("hello", pid=1)])
    with pytest.raises(NotRunning, match="no live trainer"):
        send_command(run, "pause")


def test_runs_cli_lists_status(home, capsys):
    from cockpit.cli.main import main

    make_run([encode("hello", pid=1), encode("done", status="finished", step=5)], {"pid": dead_pid()})
    assert main(["runs"]) == 0
    assert "finished" in capsys.readouterr().out
    assert main(["attach", "nope", "--no-ui"]) == 2


def test_restart_refuses_a_finished_run(home, capsys):
    from cockpit.cli.main import main

    run = make_run([encode("hello", pid=1), encode("done", status="finished", step=5)], {"pid": dead_pid()})
    assert main(["restart", run.run_id, "--no-ui"]) == 2
    assert "nothing to continue" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
def test_a_full_disk_at_the_trainers_end_is_shown_not_raised(home, capsys):
    run = make_run([encode("hello", pid=1), encode("log", step=3, total_steps=10)])
    run.events_path.unlink()
    run.events_path.symlink_to("/dev/full")  # every write: ENOSPC, as on a full disk
    (unwritten,) = record_exit(run, -9)
    assert unwritten["type"] == "exit" and unwritten["reason"] == "trainer killed by SIGKILL"
    err = capsys.readouterr().err
    assert "could not record how the trainer ended" in err and "No space left on device" in err
    assert "df -h" in err


def test_the_trainers_end_is_recorded_when_the_disk_takes_it(home):
    run = make_run([encode("hello", pid=1), b'{"v":1,"ty'])  # killed mid-line
    assert record_exit(run, 3) == []
    last = json.loads(run.events_path.read_bytes().splitlines()[-1])
    assert last["type"] == "exit" and last["returncode"] == 3


def test_runs_cli_fits_80_columns_with_a_long_reason(home, capsys):
    from cockpit.cli.main import main

    reason = "method: qlora needs a CUDA GPU (bitsandbytes 4/8-bit kernels) and none is visible here. " * 2
    error = encode("error", kind="config", message=reason, hint="use method: lora")
    make_run([encode("hello", pid=1), error], {"pid": dead_pid()})
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80 and "failed" in out
    assert "none is visible" in " ".join(out.split())  # wrapped, not cut


def test_a_control_channel_that_is_not_the_fifo_is_said_and_stop_falls_back(home, capsys):
    """A regular file or a directory in the FIFO's place: nothing is written there (`sent` would be a
    lie), the command says what it found; `stop` goes on with SIGTERM."""
    from cockpit.cli.main import main
    from cockpit.run import pids
    from cockpit.run.control import NotTheFifo

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        record = {"pid": sleeper.pid, "pgid": sleeper.pid, **pids.identity(sleeper.pid)}
        run = make_run([encode("hello", pid=sleeper.pid)], record | {"boot_id": process.boot_id()})
        run.control_path.unlink()
        run.control_path.write_text("")
        with pytest.raises(NotTheFifo, match="is a regular file, not the FIFO"):
            send_command(run, "pause")
        assert run.control_path.read_text() == ""  # nothing written into the file
        assert main(["save", run.run_id]) == 1
        err = capsys.readouterr().err
        assert "'save' was not sent" in err and "regular file" in err and "cockpit stop" in err
        run.control_path.unlink()
        run.control_path.mkdir()
        assert main(["pause", run.run_id]) == 1  # was an IsADirectoryError traceback
        captured = capsys.readouterr()
        assert "is a directory, not the FIFO" in captured.err and "sent" not in captured.out
        said = []
        assert process.stop(run, grace_s=5, term_s=10, say=said.append) == "terminated"
        assert "is a directory" in said[0] and "SIGTERM" in said[0]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_runs_reads_what_the_checkpoints_show_when_the_events_stopped_early(home):
    """events.jsonl stopped taking events at step 1 (nothing else recorded); checkpoint-30 and final/
    exist: `cockpit runs` said `finished 1/30`."""
    from cockpit.results import runs_list

    began = [encode("hello", pid=1), encode("train_begin", total_steps=30)]
    run = make_run(
        [*began, encode("log", step=1, total_steps=30)], {"pid": dead_pid(), "boot_id": process.boot_id()}
    )
    for step in (20, 30):
        (run.checkpoints_dir / f"checkpoint-{step}").mkdir()
        (run.checkpoints_dir / f"checkpoint-{step}" / rundir.COMPLETE_MARKER).write_text("{}")
    run.final_dir.mkdir()
    status = run_status(run)
    assert status.state == "finished" and status.step == 30 and status.total_steps == 30
    assert "events.jsonl ends at step 1; checkpoint-30 shows the run reached step 30" in status.detail
    (row,) = runs_list.rows([run])
    assert row.step == 30 and "30/30" in runs_list.table_lines([row])[1]
