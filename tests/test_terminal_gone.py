"""The terminal going away under the TUI client (an SSH drop, a closed tmux pane, a harness that
closes its pty) detaches it, as `d` does, within seconds, and the trainer runs on.

The real client (`cockpit attach`) in a pseudo-terminal, attached to a live run: a run directory
whose recorded trainer is a stand-in process in a session of its own (a real trainer would only
add its start-up time here; `cockpit train` runs the same app). Then the master closes: with the
slave as the client's controlling terminal (SIGHUP, as sshd sets it up) and without (nothing but
the hung-up streams, as a harness that only hands the slave as stdin/stdout/stderr). Before the
fix the first was killed by SIGHUP (no detach) and the second never exited: Textual's input
thread read end-of-file from the hung-up terminal, found it readable again, and spun.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
import threading
import time

import psutil
import pytest
from conftest import FIXTURES, ROOT

from cockpit.run.exit_codes import EXIT_DETACHED
from cockpit.run.process import boot_id
from screens.hangup import GRACE_S


def _live_run(home, stand_in: subprocess.Popen):
    """A run directory that `cockpit attach` follows as live: the demo's events up to training,
    and a trainer record for `stand_in`."""
    run = home / "runs" / "20261130-120000-tiny"
    run.mkdir(parents=True)
    lines = (FIXTURES / "demo_run_events.jsonl").read_text().splitlines()
    live = [line for line in lines if json.loads(line)["type"] not in ("done",)][:60]
    (run / "events.jsonl").write_text("\n".join(live) + "\n")
    record = {
        "pid": stand_in.pid,
        "pgid": stand_in.pid,
        "create_time": psutil.Process(stand_in.pid).create_time(),
        "boot_id": boot_id(),
        "started": time.time(),
    }
    (run / "trainer.json").write_text(json.dumps(record))
    return run


def _drain(master: int, seen: list[int]) -> None:
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            return
        if not chunk:
            return
        seen[0] += len(chunk)


@pytest.mark.parametrize("controlling", [True, False], ids=["controlling-tty", "streams-only"])
def test_closing_the_terminal_detaches_the_client_and_the_trainer_runs_on(controlling, tmp_path):
    home = tmp_path / "home"
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    env.update(COCKPIT_HOME=str(home), PYTHONPATH=str(ROOT), TERM="xterm-256color")
    stand_in = subprocess.Popen(["sleep", "120"], start_new_session=True)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))

    def take_terminal() -> None:  # after setsid: the slave becomes the session's terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    client = None
    try:
        run = _live_run(home, stand_in)
        client = subprocess.Popen(
            [sys.executable, "-m", "cockpit", "attach", run.name],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=ROOT,
            start_new_session=True,
            preexec_fn=take_terminal if controlling else None,
        )
        os.close(slave)
        seen = [0]
        reader = threading.Thread(target=_drain, args=(master, seen), daemon=True)
        reader.start()
        deadline = time.monotonic() + 15
        while seen[0] < 3000 and client.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.poll() is None and seen[0] >= 3000, f"the screen was not drawn ({seen[0]} bytes)"
        time.sleep(0.5)  # drawing on
        os.close(master)
        master = None
        closed = time.monotonic()
        try:
            code = client.wait(timeout=GRACE_S + 3)
        except subprocess.TimeoutExpired:
            cpu = psutil.Process(client.pid).cpu_percent(interval=1.0)
            pytest.fail(f"still running {GRACE_S + 3:.0f} s after its terminal closed, at {cpu:.0f}% CPU")
        assert code == EXIT_DETACHED, f"exit code {code}, expected {EXIT_DETACHED} (detached)"
        took = time.monotonic() - closed
        assert took < GRACE_S, f"{took:.1f} s: the app did not leave by itself (the last-resort exit did)"
        assert stand_in.poll() is None, "the trainer must run on without its client"
    finally:
        if master is not None:
            os.close(master)
        if client is not None and client.poll() is None:
            os.killpg(client.pid, 9)
            client.wait()
        stand_in.kill()
        stand_in.wait()
        shutil.rmtree(home, ignore_errors=True)
