"""A bench/ script run from a test as CI runs it: its own process, the test's environment, its exit
status asserted with the end of what it said."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, env: dict, *args: str, timeout: float = 280) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
