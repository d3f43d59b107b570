"""train_backend.quick_exit: the trainer's and the export's exit without the interpreter's teardown
keeps what sys.exit would have done that matters: the exit code, the exit handlers, the non-daemon
threads' work and the buffered output."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

CHILD = """
import atexit, sys, threading, time
from pathlib import Path
from train_backend.quick_exit import exit_now
out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit.txt").write_text("ran"))
def late():
    time.sleep(0.3)
    (out / "thread.txt").write_text("done")
threading.Thread(target=late).start()
sys.stdout.write("buffered, no newline")
exit_now(3)
"""


def test_the_exit_keeps_the_code_the_handlers_the_threads_and_the_output(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered, no newline"
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "thread.txt").read_text() == "done"
