"""Runs the torch probe (`python -m train_backend.probe`) in a subprocess and collects its answer.

The UI process never imports torch: CUDA versions, bitsandbytes and the matmul / copy measurements
come back as `probe` messages on the child's stdout. The child runs in its own process group with
a hard timeout; on timeout the whole group is killed and the findings that arrived so far are kept.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from cockpit.protocol.wire import Fault, LineDecoder
from cockpit.run.process import kill_group, project_root

# findings that come once per device (data["device"]); the answer keeps them as lists
LIST_FINDINGS = ("devices", "matmul", "h2d")
STDERR_TAIL_BYTES = 4000


@dataclass
class ProbeAnswer:
    findings: dict[str, Any] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    stderr_tail: str = ""
    returncode: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    samples: list[Any] = field(default_factory=list)  # what `sample` returned while the probe ran

    @property
    def complete(self) -> bool:
        """The probe said it was done and exited cleanly."""
        return "done" in self.findings and self.returncode == 0 and not self.timed_out

    def problem(self) -> str | None:
        """Why the answer is incomplete, for people; None when it is complete."""
        if self.timed_out:
            return f"the GPU probe did not finish within {self.duration_s:.0f} s and was killed"
        if self.returncode not in (0, None) or "done" not in self.findings:
            tail = self.stderr_tail.strip().splitlines()[-1:] or ["no output on stderr"]
            return f"the GPU probe exited with code {self.returncode}: {tail[0]}"
        return None


def add_message(findings: dict[str, Any], message: dict[str, Any]) -> None:
    """Fold one `probe` message into the findings (per-device findings append)."""
    name, data = message.get("finding"), message.get("data")
    if not isinstance(name, str) or not isinstance(data, dict):
        return
    if name in LIST_FINDINGS:
        findings.setdefault(name, []).append(data)
    else:
        findings[name] = data


def probe_command(quick: bool, multi: bool = False) -> list[str]:
    command = [sys.executable, "-m", "train_backend.probe"]
    return command + (["--quick"] if quick else []) + (["--multi"] if multi else [])


def run_probe(
    quick: bool = True,
    timeout_s: float = 180.0,
    *,
    multi: bool = False,
    command: list[str] | None = None,
    sample: Callable[[], Any] | None = None,
    sample_every_s: float = 0.5,
    env: dict[str, str] | None = None,
) -> ProbeAnswer:
    """Run the probe, wait at most `timeout_s`, and return what it found.

    `sample` (e.g. an NVML read of clocks, throttle reasons and PCIe link) is called every
    `sample_every_s` on a thread while the probe runs, so the GPU's state is seen under the
    probe's load; its results land in `ProbeAnswer.samples` (exceptions are skipped).
    `command` replaces the probe (tests).
    """
    child_env = _child_env(env)
    answer = ProbeAnswer()
    started = time.monotonic()
    deadline = started + timeout_s
    stop_sampling = threading.Event()
    sampler = None
    with tempfile.TemporaryFile() as stderr_file:
        proc = subprocess.Popen(
            command or probe_command(quick, multi),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr_file,  # a file, not a pipe: a chatty child can never block on it
            cwd=project_root(),
            env=child_env,
            start_new_session=True,  # its own process group: the timeout kills spawned helpers too
        )
        stdout = proc.stdout
        assert stdout is not None  # stdout=PIPE
        if sample is not None:
            sampler = threading.Thread(
                target=_sample_loop, args=(sample, sample_every_s, stop_sampling, answer.samples), daemon=True
            )
            sampler.start()
        try:
            _collect(proc, deadline, answer)
        finally:
            stop_sampling.set()
            if proc.poll() is None:
                kill_group(proc)
            stdout.close()
        answer.returncode = proc.returncode
        answer.duration_s = round(time.monotonic() - started, 2)
        answer.stderr_tail = _tail(stderr_file)
    if sampler is not None:
        sampler.join(timeout=2.0)
    return answer


def _child_env(env: dict[str, str] | None) -> dict[str, str]:
    """The probe's environment: the project importable, output unbuffered, NVLink multicast off."""
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (project_root(), child_env.get("PYTHONPATH", "")) if p
    )
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env["NCCL_NVLS_ENABLE"] = "0"
    return child_env


def _collect(proc: subprocess.Popen[bytes], deadline: float, answer: ProbeAnswer) -> None:
    """The child's messages into `answer` until it exits or `deadline` passes (then it is killed)."""
    decoder = LineDecoder()
    items = _read_until(proc, decoder, deadline)
    if items is None:
        answer.timed_out = True
        kill_group(proc)
        items = []
    items += decoder.finish()
    for item in items:
        if isinstance(item, Fault):
            answer.faults.append(item.describe())
        elif item.get("type") == "probe":
            add_message(answer.findings, item)
    if not answer.timed_out:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            answer.timed_out = True
            kill_group(proc)


def _tail(stderr_file: IO[bytes]) -> str:
    """The last STDERR_TAIL_BYTES of the child's stderr."""
    stderr_file.seek(0, os.SEEK_END)
    stderr_file.seek(max(0, stderr_file.tell() - STDERR_TAIL_BYTES))
    return stderr_file.read().decode("utf-8", errors="replace")


def _read_until(
    proc: subprocess.Popen[bytes], decoder: LineDecoder, deadline: float
) -> list[dict[str, Any] | Fault] | None:
    """Everything the child writes until it closes stdout; None when the deadline passes first."""
    items: list[dict[str, Any] | Fault] = []
    assert proc.stdout is not None  # run_probe starts the probe with stdout=PIPE
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not selector.select(timeout=min(left, 1.0)):
                continue
            data = os.read(fd, 65536)
            if not data:
                return items
            items += decoder.feed(data)


def _sample_loop(sample: Callable[[], Any], every_s: float, stop: threading.Event, out: list[Any]) -> None:
    while not stop.is_set():
        try:
            out.append(sample())
        except Exception:
            pass  # a failed NVML read is no reason to lose the probe
        stop.wait(every_s)
