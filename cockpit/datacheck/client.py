"""Runs the data check (`python -m train_backend.datacheck`) in a subprocess and collects its report.

The client never imports transformers or datasets: the reading and tokenizing happen in the
child, which gets the resolved config on its stdin and answers with `data_check_progress`
messages and one `data_check` message on its stdout. The child runs in its own process group;
on a timeout the group is killed.
"""

from __future__ import annotations

import copy
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cockpit.config import load as config_load
from cockpit.config.schema import TrainConfig, dump_config
from cockpit.protocol.wire import Fault, LineDecoder
from cockpit.run.process import kill_group, project_root

STDERR_TAIL_BYTES = 4000
MAX_REPORT_BYTES = 16 << 20


@dataclass
class DataCheckAnswer:
    report: dict[str, Any] | None = None
    error: str | None = None  # the check itself failed (not a data error: those are in the report)
    returncode: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    stderr_tail: str = ""
    cached: bool = False  # the report of an earlier check on the same files (cockpit.datacheck.cache)

    def problem(self) -> str | None:
        """Why there is no report, for people; None when there is one."""
        if self.report is not None:
            return None
        if self.timed_out:
            return f"the data check did not finish within {self.duration_s:.0f} s and was stopped"
        if self.error:
            return f"the data check failed: {self.error}"
        tail = self.stderr_tail.strip().splitlines()[-1:] or ["no output on stderr"]
        return f"the data check exited with code {self.returncode} without a report: {tail[0]}"


def check_command() -> list[str]:
    return [sys.executable, "-m", "train_backend.datacheck"]


def resolved_config_text(cfg: TrainConfig) -> str:
    """The config as the child reads it: local paths absolute (it runs in the project's folder)."""
    return dump_config(config_load.with_absolute_paths(copy.deepcopy(cfg)))


def run_datacheck(
    cfg: TrainConfig,
    *,
    timeout_s: float | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    command: list[str] | None = None,
) -> DataCheckAnswer:
    """Run the check on `cfg` and wait for its report (at most `timeout_s`; None: as long as it
    takes). `on_progress` gets each progress message's fields. `command` replaces the child (tests)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root(), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "true")
    answer = DataCheckAnswer()
    decoder = LineDecoder(max_line_bytes=MAX_REPORT_BYTES)
    started = time.monotonic()
    deadline = None if timeout_s is None else started + timeout_s
    with tempfile.TemporaryFile() as stderr_file, tempfile.TemporaryFile() as stdin_file:
        stdin_file.write(resolved_config_text(cfg).encode("utf-8"))
        stdin_file.seek(0)
        proc = subprocess.Popen(
            command or check_command(),
            stdin=stdin_file,
            stdout=subprocess.PIPE,
            stderr=stderr_file,  # a file, not a pipe: a chatty library can never block the child
            cwd=project_root(),
            env=env,
            start_new_session=True,
        )
        try:
            for item in _messages(proc, decoder, deadline):
                if isinstance(item, Fault):
                    continue
                if item.get("type") == "data_check_progress" and on_progress is not None:
                    on_progress(item)
                elif item.get("type") == "data_check":
                    answer.report, answer.error = item.get("report"), item.get("error")
            if deadline is not None and time.monotonic() >= deadline and proc.poll() is None:
                answer.timed_out = True
            proc.wait(timeout=None if deadline is None else max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            answer.timed_out = True
        except KeyboardInterrupt:
            kill_group(proc)
            raise
        finally:
            if proc.poll() is None:
                kill_group(proc)
            if proc.stdout is not None:
                proc.stdout.close()
        answer.returncode = proc.returncode
        answer.duration_s = round(time.monotonic() - started, 2)
        stderr_file.seek(0, os.SEEK_END)
        stderr_file.seek(max(0, stderr_file.tell() - STDERR_TAIL_BYTES))
        answer.stderr_tail = stderr_file.read().decode("utf-8", errors="replace")
    return answer


def _messages(
    proc: subprocess.Popen[bytes], decoder: LineDecoder, deadline: float | None
) -> Iterator[dict[str, Any] | Fault]:
    """Every message the child writes until it closes stdout or the deadline passes."""
    assert proc.stdout is not None  # started with stdout=PIPE
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            if not selector.select(timeout=1.0 if left is None else min(left, 1.0)):
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                yield from decoder.finish()
                return
            yield from decoder.feed(data)
