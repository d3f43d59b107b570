#!/usr/bin/env python3
"""CPU cost of watching a run: the TUI attached to a live demo run, measured over 60 s.

Starts the built-in demo (lengthened so it trains for the whole window), attaches the
TUI to it inside a detached tmux session (a real terminal, 100x30), and reads the TUI
process's CPU time from /proc before and after the window. The headless client
(`--no-ui`, plain lines) is measured the same way for comparison. Prints one JSON line.

  python bench/ui_overhead.py [--window-s 60] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def cpu_share(proc: psutil.Process, window_s: float) -> float:
    """Share of one core the process (and its threads) used over the window."""
    before = proc.cpu_times()
    started = time.monotonic()
    time.sleep(window_s)
    after = proc.cpu_times()
    used = (after.user + after.system) - (before.user + before.system)
    return used / (time.monotonic() - started)


def find_process(pattern: str, timeout_s: float = 30.0) -> psutil.Process:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = " ".join(proc.info["cmdline"] or [])
            if pattern in cmd and "tmux" not in cmd:
                return proc
        time.sleep(0.2)
    raise SystemExit(f"no process matching {pattern!r}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window-s", type=float, default=60.0)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="ui-overhead-"))
    env = dict(os.environ, COCKPIT_HOME=str(home), PYTHONPATH=str(ROOT))
    env.setdefault("COCKPIT_CACHE", str(home / "cache"))
    python = sys.executable
    # a demo long enough to outlast warm-up plus two windows
    trainer = subprocess.Popen(
        [python, "-m", "cockpit", "demo", "--no-ui", "--set", "training.epochs=200", "--log-every", "1000"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runs = home / "runs"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        '"train_begin"' in (p / "events.jsonl").read_text()
        for p in runs.glob("*")
        if (p / "events.jsonl").exists()
    ):
        time.sleep(0.5)
    run = next(runs.glob("*"))
    session = f"ui-overhead-{os.getpid()}"
    subprocess.run(
        [
            "tmux",
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            "100",
            "-y",
            "30",
            f"env COCKPIT_HOME={home} PYTHONPATH={ROOT} {python} -m cockpit attach {run.name}",
        ],
        check=True,
    )
    try:
        time.sleep(5)  # the TUI starts and replays the history
        tui = find_process(f"cockpit attach {run.name}")
        tui_share = cpu_share(tui, a.window_s)
        headless = find_process("cockpit demo --no-ui")
        headless_share = cpu_share(headless, min(a.window_s, 20.0))
        screen = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
        subprocess.run(
            [python, "-m", "cockpit", "stop", run.name, "--timeout", "30"],
            env=env,
            capture_output=True,
            check=False,
        )
        trainer.wait(timeout=60)
    result = {
        "bench": "ui_overhead",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": platform.node(),
        "cores": psutil.cpu_count(),
        "window_s": a.window_s,
        "tui_core_share": round(tui_share, 4),
        "headless_core_share": round(headless_share, 4),
        "screen_showed_run": run.name in screen,
    }
    print(json.dumps(result))
    if a.out:
        a.out.write_text(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
