"""A run whose last event was cut (a crash while writing it) is judged by what it left: its final
adapter or its done phase say it finished, in `cockpit runs`, attach and replay alike."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cockpit.cli.main import main
from cockpit.protocol.wire import encode
from cockpit.run import process, rundir
from cockpit.run.status import run_status

CUT_DONE = b'{"v":1,"type":"done","status":"fini'


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def ended_run(tail: list[bytes], final: bool) -> rundir.RunDir:
    run = rundir.create(None, "synthetic:tiny", "model: {name: synthetic:tiny}\n")
    lines = [
        encode("hello", pid=1, run_id=run.run_id),
        encode("phase", phase="training"),
        encode("train_begin", total_steps=8),
        encode("log", step=8, total_steps=8, loss=1.0),
        *tail,
    ]
    run.events_path.write_bytes(b"".join(lines))
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    run.trainer_path.write_text(json.dumps({"pid": proc.pid, "boot_id": process.boot_id()}))
    if final:
        run.final_dir.mkdir()
        (run.final_dir / "adapter_model.safetensors").write_bytes(b"x")
    return run


@pytest.mark.parametrize(
    ("tail", "final"),
    [
        ([encode("phase", phase="saving"), encode("phase", phase="done"), CUT_DONE], True),
        ([encode("phase", phase="done"), CUT_DONE], False),  # output.save_final: false
        ([encode("phase", phase="saving"), b'{"v":1,"type":"pha'], True),
    ],
)
def test_runs_attach_and_replay_call_it_finished(tail, final, home, capsys):
    run = ended_run(tail, final)
    status = run_status(run)
    assert status.state == "finished" and "cut while written" in status.detail and status.step == 8
    assert main(["attach", run.run_id, "--no-ui"]) == 0
    assert main(["replay", run.run_id, "--no-ui", "--speed", "1000"]) == 0
    assert b'"type":"exit"' not in run.events_path.read_bytes()  # nothing was recorded as a death


def test_a_cut_line_before_the_end_is_still_a_killed_trainer(home):
    run = ended_run([b'{"v":1,"type":"lo'], final=False)
    status = run_status(run)
    assert status.state == "failed" and "killed" in status.detail
