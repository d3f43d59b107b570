"""Where a process's CPU goes: py-spy sampling a running process, and its samples summed up.

py-spy (an optional tool, `pip install py-spy`) reads the target's stacks from outside
(`--nonblocking`: the target is never paused, the sampling costs py-spy's CPU, not the target's)
and `--gil` keeps only the thread holding the GIL: Python work, not threads asleep in a wait.
`Spy` records from its start until `stop()`; `summary()` turns the collapsed stacks into the
functions with the most samples (inclusive: a function and what it called), each as a share of
all samples. Used by bench/attach_overhead.py --profile.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

RATE_HZ = 100
_LINE = re.compile(r":\d+\)$")


def py_spy() -> str | None:
    """The py-spy executable beside this Python or on PATH, or None (not installed)."""
    here = Path(sys.executable).parent / "py-spy"
    if here.exists():
        return str(here)
    for entry in sys.path:  # installed with `pip install --target DIR`: DIR/bin/py-spy
        candidate = Path(entry) / "bin" / "py-spy"
        if entry and candidate.exists():
            return str(candidate)
    return shutil.which("py-spy")


class Spy:
    """py-spy recording process `pid` into `path` (collapsed stacks, one per line with its count)."""

    def __init__(self, pid: int, path: Path, rate_hz: int = RATE_HZ) -> None:
        exe = py_spy()
        if exe is None:
            raise FileNotFoundError("py-spy is not installed (pip install py-spy)")
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate_hz),
                "--format",
                "raw",
                "--output",
                str(path),
                "--nonblocking",
                "--gil",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self, timeout_s: float = 30.0) -> str | None:
        """End the recording (py-spy writes its file on SIGINT); None when it worked, else why not."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _out, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return "py-spy did not stop"
        if not self.path.exists():
            why = (err or "").strip().splitlines()
            return f"py-spy wrote nothing (exit {self.proc.returncode}): {why[0] if why else ''}"
        return None


def _package(frame: str) -> str:
    """The top-level package a frame's file is in ("textual", "cockpit", "<frozen importlib>")."""
    inside = frame[frame.rfind("(") + 1 :].rstrip(")")
    if inside.startswith("<frozen"):
        return inside.split(">")[0].split(".")[0] + ">"
    return inside.split("/")[0].split(":")[0] or "?"


def summary(path: Path, top: int = 40) -> dict:
    """The functions with the most samples in a py-spy raw file: {"samples": N, "top": [[share,
    "function (file)"], ...], "by_package": {package: share}} (inclusive shares, a function's line
    numbers merged; by_package: where the innermost frame was, so it adds up to 1)."""
    total, inclusive, leaves = 0, Counter(), Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        seen = set()
        frames = stack.split(";")
        leaves[_package(frames[-1].strip())] += n
        for frame in frames:
            name = _LINE.sub(")", frame.strip())
            if name and name not in seen:
                seen.add(name)
                inclusive[name] += n
    rows = [[round(n / total, 3), name] for name, n in inclusive.most_common(top)] if total else []
    packages = {name: round(n / total, 3) for name, n in leaves.most_common()} if total else {}
    return {"samples": total, "rate_hz": RATE_HZ, "top": rows, "by_package": packages}
