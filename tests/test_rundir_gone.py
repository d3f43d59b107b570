"""A run directory deleted while the trainer runs: the trainer notices within seconds and stops without
a checkpoint, with an error naming the cause; until it ends, `cockpit runs` lists it and `cockpit stop`
finds it by its command line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import psutil
import pytest
from conftest import cockpit_bg, wait_event, wait_run_dir, write_config

from cockpit.cli.main import main
from cockpit.run import process
from train_backend import test_aids
from train_backend.rundir_watch import RunDirWatch


def test_the_watch_notices_a_deleted_or_replaced_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    said = []
    watch = RunDirWatch(run, said.append, check_s=0.05).start()
    assert not watch.check()
    shutil.rmtree(run)
    run.mkdir()  # another directory with its name is not the run's
    deadline = time.monotonic() + 5
    while not watch.gone.is_set() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert watch.gone.is_set() and said == [
        f"the run directory {run} was deleted (or replaced) while the trainer ran"
    ]


@pytest.mark.parametrize(
    ("cmdline", "path"),
    [
        (["python", "-m", "train_backend", "train", "/r/run-1"], "/r/run-1"),
        (["python", "-m", "train_backend.launcher", "/r/run-2", "torchrun", "-m", "x"], "/r/run-2"),
        (["python", "-m", "cockpit", "train", "c.yaml"], None),
    ],
)
def test_a_trainers_run_directory_from_its_command_line(cmdline, path):
    assert process.trainer_run_path(cmdline) == path


def test_runs_lists_and_stop_ends_a_trainer_whose_directory_is_gone(tmp_path, env, capsys):
    gone = tmp_path / "home" / "runs" / "20261201-101010-tiny"  # never made: as if deleted
    # another COCKPIT_HOME's orphan (another user's home, or a parallel test's): not this home's list
    elsewhere = tmp_path / "other-home" / "runs" / "20261201-121212-tiny"
    sleeper = "import time; time.sleep(120)"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", sleeper, "-m", "train_backend", "train", str(path)], start_new_session=True
        )
        for path in (gone, elsewhere)
    ]
    proc = procs[0]
    try:
        assert main(["runs", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        (row,) = [r for r in rows if r["run"] == gone.name]
        assert row["status"] == "orphaned" and f"trainer pid {proc.pid} still runs" in row["detail"]
        assert not [r for r in rows if r["run"] == elsewhere.name], rows
        assert main(["stop", "20261201-101010", "--term-timeout", "5"]) == 0
        assert capsys.readouterr().out.strip() == f"{gone.name}: terminated"
        assert proc.wait(5) is not None
    finally:
        for each in procs:
            each.kill()
            each.wait()


def test_an_orphan_of_a_run_linked_from_elsewhere_is_this_homes(tmp_path):
    """A run with its own output.dir is linked into the runs root (rundir._register); deleted, its link
    dangles there and names it."""
    root = tmp_path / "runs"
    root.mkdir()
    target = tmp_path / "mine" / "20261201-131313-tiny"
    (root / target.name).symlink_to(target)
    assert process._of_root(target, root) and process._of_root(root / "20261201-141414-tiny", root)
    assert not process._of_root(tmp_path / "theirs" / "20261201-131313-tiny", root)


@pytest.mark.slow
def test_the_trainer_stops_within_seconds_of_its_directory_being_deleted(tmp_path, env):
    config = write_config(
        tmp_path / "c.yaml",
        {"training.max_steps": 400, "output.save_steps": 1000},
    )
    env = {**env, **test_aids.environ(step_sleep_s=0.2)}
    client = cockpit_bg(["train", str(config), "--no-ui", "--skip-preflight"], env)
    try:
        run = wait_run_dir(env)
        wait_event(run, lambda e: e["type"] == "log" and e["step"] >= 1, timeout=240)
        trainer = psutil.Process(json.loads((run / "trainer.json").read_text())["pid"])
        with open(run / "events.jsonl", "rb") as journal:  # held open: readable once unlinked
            shutil.rmtree(run)
            deleted_ts = time.time()
            trainer.wait(120)
            lines = [json.loads(line) for line in journal.read().splitlines() if line.strip()]
        out, _ = client.communicate(timeout=60)
    finally:
        client.kill()
    error = lines[-1]
    assert error["type"] == "error" and error["kind"] == "other", error
    noticed = next(e for e in lines if e["type"] == "warning" and "was deleted" in e["message"])
    assert noticed["ts"] - deleted_ts < 6, noticed["ts"] - deleted_ts  # CHECK_S, on a busy machine
    # once noticed, it stops at the end of the step under way (the next one, if it had just begun);
    # steps go on between the deletion and the notice (up to CHECK_S of them)
    step_at_notice = max([0] + [e["step"] for e in lines if e["type"] == "log" and e["ts"] <= noticed["ts"]])
    assert error["step"] <= step_at_notice + 2 and "with no checkpoint" in error["message"]
    assert not any(e["type"] == "checkpoint" for e in lines)
    assert client.returncode == 1
    assert f"the run directory {run} was deleted (or replaced) while the trainer ran" in out


def test_the_summary_of_a_deleted_run_offers_no_restart(tmp_path):
    """Its checkpoints went with the directory: `cockpit restart` (or chat, export) cannot work."""
    from cockpit.protocol.wire import encode
    from cockpit.results.summary import summarize, summary_lines
    from cockpit.run import journal

    events = tmp_path / "events.jsonl"
    events.write_bytes(
        encode("hello", pid=1)
        + encode("log", step=3, total_steps=10)
        + encode("error", kind="other", message="the run directory /r was deleted", step=3)
    )
    state = journal.fold(events)
    gone = tmp_path / "20261201-101010-tiny"  # not there
    lines = summary_lines(summarize(state, gone, []))
    assert not any("cockpit restart" in line for line in lines), lines
    assert "next: cockpit train CONFIG (a new run: this one's directory and checkpoints are gone)" in lines
    gone.mkdir()  # the same run with its directory: restart is the way on
    assert "next: cockpit restart 20261201-101010-tiny" in summary_lines(summarize(state, gone, []))


@pytest.mark.slow
def test_an_events_file_replaced_mid_run_stops_with_a_checkpoint_and_the_record_goes_on(
    tmp_path, env, capsys
):
    """Was: the trainer went on 'without events', the client said it silent, `cockpit runs` recorded
    how far the file got. Now the trainer notices, goes on in events-fallback.jsonl and stops with a
    checkpoint; the client follows it there and `cockpit runs` tells the truth."""
    import os

    from conftest import events

    config = write_config(tmp_path / "c.yaml", {"training.max_steps": 400, "output.save_steps": 1000})
    slow = {**env, **test_aids.environ(step_sleep_s=0.2)}
    client = cockpit_bg(["train", str(config), "--no-ui", "--skip-preflight"], slow)
    try:
        run = wait_run_dir(env)
        wait_event(run, lambda e: e["type"] == "log" and e["step"] >= 2, timeout=240)
        stand_in = run / "stand-in.jsonl"
        stand_in.write_text("")
        os.replace(stand_in, run / "events.jsonl")  # what a log rotation or a careless script does
        out, err = client.communicate(timeout=120)
    finally:
        client.kill()
    assert client.returncode == 3, out + err  # stopped
    fallback = [json.loads(line) for line in (run / "events-fallback.jsonl").read_text().splitlines()]
    assert fallback[0]["type"] == "warning" and "events.jsonl was replaced" in fallback[0]["message"]
    (checkpoint,) = [e for e in fallback if e["type"] == "checkpoint"]
    done = fallback[-1]
    assert done["type"] == "done" and done["status"] == "stopped" and done["step"] == checkpoint["step"]
    assert (
        "stopping with a checkpoint at the end of this step" in out and "no event from the trainer" not in out
    )
    assert events(run) == []  # the stand-in holds nothing of the trainer's
    capsys.readouterr()
    assert main(["runs", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["status"] == "stopped" and row["step"] == checkpoint["step"]
