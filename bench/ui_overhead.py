#!/usr/bin/env python3
"""CPU cost of watching a run: the TUI attached to a live demo run, measured over 60 s windows.

Starts the built-in demo (lengthened so it trains for the whole bench), attaches the TUI to it
inside a detached tmux session (a real terminal, 100x30), and reads the TUI process's own CPU
time (user + system of that process and its threads, not its children) from /proc before and
after each window. Then it counts how often the screen changes (tmux pane captures, 20 a second
for 10 s) to show the refresh rate the cost was paid for, and measures the headless client
(`--no-ui`, plain lines) the same way for comparison, and, as a gauge of how slow the machine is
at the time, the same TUI with nothing to draw (attached to a recorded run that has ended, the
test fixture). Prints one JSON object.

The machine's load moves the figures (other processes evict the caches a TUI that wakes twice a
second works from), so `--rounds` measures several windows and the load average is recorded;
`--compare DIR` measures the TUI of another checkout (e.g. `git archive OLD | tar -x -C DIR`)
in alternation with this one (A B B A ...) against the same demo, which makes a ratio that the
load moves much less.

  python bench/ui_overhead.py [--window-s 60] [--rounds 2] [--compare DIR] [--out result.json]
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
from importlib import metadata
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
SIZE = ("100", "30")
START_S = 6.0  # the TUI imports, composes and replays the history before a window opens
CAPTURE_S = 10.0
CAPTURE_EVERY_S = 0.05
IDLE_WINDOW_S = 20.0
FIXTURE_RUN = ROOT / "tests" / "fixtures" / "demo_run_events.jsonl"


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def cpu_share(proc: psutil.Process, window_s: float) -> float:
    """Share of one core the process (all its threads) used over the window."""
    before, started = cpu_seconds(proc), time.monotonic()
    time.sleep(window_s)
    return (cpu_seconds(proc) - before) / (time.monotonic() - started)


def find_process(args: list[str], timeout_s: float = 30.0) -> psutil.Process:
    """The Python process whose arguments end with `args` (not the shell or tmux around it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if len(cmd) > len(args) and cmd[-len(args) :] == args and "python" in Path(cmd[0]).name:
                return proc
        time.sleep(0.2)
    raise SystemExit(f"no process running {' '.join(args)!r}")


def screen_changes_per_s(session: str) -> float:
    """How many times a second the pane's text changed, from captures CAPTURE_EVERY_S apart."""
    changes, last = 0, None
    started = time.monotonic()
    while time.monotonic() - started < CAPTURE_S:
        text = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout
        changes += last is not None and text != last
        last = text
        time.sleep(CAPTURE_EVERY_S)
    return changes / (time.monotonic() - started)


class Tui:
    """`cockpit attach RUN` in a detached tmux session, from the code under `pythonpath`."""

    def __init__(
        self, home: Path, run_id: str, pythonpath: Path, tag: str, program: str = "-m cockpit", env: str = ""
    ) -> None:
        self.session = f"ui-overhead-{os.getpid()}-{tag}"
        # the variables go on the command line: a tmux server started earlier keeps its own environment
        variables = f"COCKPIT_HOME={home} PYTHONPATH={pythonpath} {env}"
        command = f"env {variables} {sys.executable} {program} attach {run_id}"
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", self.session, "-x", SIZE[0], "-y", SIZE[1], command],
            check=True,
        )
        self.proc = find_process([*program.split()[-1:], "attach", run_id])

    def screen(self) -> str:
        return subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", self.session], capture_output=True, text=True
        ).stdout

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.session], check=False)
        try:
            self.proc.wait(timeout=10)
        except psutil.Error:
            pass


def idle_tui_share(home: Path) -> float:
    """The TUI showing an ended run (nothing to draw, no watch): what its threads cost at rest."""
    run = home / "runs" / "20261130-152228-tiny"
    run.mkdir(parents=True, exist_ok=True)
    (run / "events.jsonl").write_text(FIXTURE_RUN.read_text())
    tui = Tui(home, run.name, ROOT, "idle")
    try:
        time.sleep(START_S)
        return cpu_share(tui.proc, IDLE_WINDOW_S)
    finally:
        tui.close()


# `python COUNTER attach RUN`: the TUI with a hook counting the Python calls (and calls into C)
# of each thread; after COUNT_START_S it counts for COUNT_WINDOW_S and writes calls per second.
# A count of work done that the machine's load does not move, unlike CPU time.
COUNTER = """
import collections, json, os, runpy, sys, threading, time
counts = collections.Counter()
def hook(frame, event, arg):
    if event in ("call", "c_call"):
        counts[threading.current_thread().name] += 1
def report():
    time.sleep(float(os.environ["COUNT_START_S"]))
    counts.clear()
    started = time.monotonic()
    time.sleep(float(os.environ["COUNT_WINDOW_S"]))
    elapsed = time.monotonic() - started
    per_s = {name: round(n / elapsed) for name, n in counts.items() if name != "call-counter"}
    with open(os.environ["COUNT_OUT"], "w") as f:
        json.dump(per_s, f)
threading.setprofile(hook)
sys.setprofile(hook)
threading.Thread(target=report, daemon=True, name="call-counter").start()
sys.argv = ["cockpit", *sys.argv[1:]]
runpy.run_module("cockpit", run_name="__main__", alter_sys=True)
"""
COUNT_WINDOW_S = 30.0


def calls_per_s(home: Path, run_id: str, pythonpath: Path, tag: str) -> dict:
    """Python calls a second of each thread of the TUI (hooked, so not timed: a count of work)."""
    program, out = home / "count_calls.py", home / f"calls-{tag}.json"
    program.write_text(COUNTER)
    env = f"COUNT_START_S={START_S} COUNT_WINDOW_S={COUNT_WINDOW_S} COUNT_OUT={out}"
    tui = Tui(home, run_id, pythonpath, f"calls-{tag}", program=str(program), env=env)
    try:
        deadline = time.monotonic() + START_S + COUNT_WINDOW_S + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        per_thread = json.loads(out.read_text()) if out.exists() else {}
    finally:
        tui.close()
        time.sleep(1.0)
    return {"total": sum(per_thread.values()), "threads": per_thread}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("textual", "rich", "psutil"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def machine() -> dict:
    model = None
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "host": platform.node(),
        "cpu": model,
        "cores": psutil.cpu_count(),
        "platform": platform.platform(),
    }


def git_commit(path: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def start_demo(home: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, COCKPIT_HOME=str(home), PYTHONPATH=str(ROOT))
    env.setdefault("COCKPIT_CACHE", str(home / "cache"))
    # long enough to outlast every window (the demo trains ~8 steps a second here)
    trainer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cockpit",
            "demo",
            "--no-ui",
            "--set",
            "training.epochs=400",
            "--log-every",
            "1000",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runs = home / "runs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        started = [p for p in runs.glob("*") if '"train_begin"' in _read(p / "events.jsonl")]
        if started:
            return trainer, started[0].name
        time.sleep(0.5)
    trainer.kill()
    raise SystemExit("the demo did not begin training within 120 s")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window-s", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=1, help="TUI windows to measure (each a fresh attach)")
    ap.add_argument("--compare", type=Path, help="another checkout whose TUI is measured in alternation")
    ap.add_argument("--compare-label", help="what that checkout is (e.g. its commit), for the record")
    ap.add_argument("--count-calls", action="store_true", help="also count the TUI's Python calls a second")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="ui-overhead-"))
    trainer, run_id = start_demo(home)
    env = dict(os.environ, COCKPIT_HOME=str(home), PYTHONPATH=str(ROOT))
    order = ["this"] * a.rounds
    if a.compare:  # A B B A ...: a drift in the machine's load weighs on both alike
        order = [("this", "compare") if i % 2 == 0 else ("compare", "this") for i in range(a.rounds)]
        order = [tag for pair in order for tag in pair]
    windows: list[dict] = []
    refresh, screen_ok = None, False
    try:
        for n, tag in enumerate(order):
            tui = Tui(home, run_id, ROOT if tag == "this" else a.compare.resolve(), f"{n}")
            try:
                time.sleep(START_S)
                load_before = os.getloadavg()[0]
                share = cpu_share(tui.proc, a.window_s)
                windows.append(
                    {
                        "code": tag,
                        "tui_core_share": round(share, 4),
                        "load_1m": [load_before, os.getloadavg()[0]],
                    }
                )
                print(json.dumps(windows[-1]), file=sys.stderr)
                if n == 0:
                    refresh = round(screen_changes_per_s(tui.session), 2)
                    screen_ok = run_id in tui.screen()
            finally:
                tui.close()
                time.sleep(1.0)
        idle_share = idle_tui_share(home)
        calls = {}
        if a.count_calls:
            calls["this"] = calls_per_s(home, run_id, ROOT, "this")
            if a.compare:
                calls["compare"] = calls_per_s(home, run_id, a.compare.resolve(), "compare")
        headless = find_process(["demo", "--no-ui", "--set", "training.epochs=400", "--log-every", "1000"])
        headless_share = cpu_share(headless, min(a.window_s, 20.0))
    finally:
        subprocess.run(
            [sys.executable, "-m", "cockpit", "stop", run_id, "--timeout", "30"],
            env=env,
            capture_output=True,
            check=False,
        )
        trainer.wait(timeout=60)
    ours = [w["tui_core_share"] for w in windows if w["code"] == "this"]
    result = {
        "bench": "ui_overhead",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine(),
        "versions": versions(),
        "commit": git_commit(ROOT),
        "window_s": a.window_s,
        "terminal": "x".join(SIZE),
        "windows": windows,
        "tui_core_share": max(ours),  # the worst window: the figure to hold against the target
        "tui_core_share_mean": round(sum(ours) / len(ours), 4),
        "screen_changes_per_s": refresh,
        "headless_core_share": round(headless_share, 4),
        "idle_tui_core_share": round(idle_share, 4),
        "python_calls_per_s": calls or None,
        "screen_showed_run": screen_ok,
    }
    if a.compare:
        theirs = [w["tui_core_share"] for w in windows if w["code"] == "compare"]
        result["compare"] = {
            "path": str(a.compare),
            "label": a.compare_label or git_commit(a.compare),
            "mean": sum(theirs) / len(theirs),
        }
        result["ratio_this_over_compare"] = round(sum(ours) / len(ours) / result["compare"]["mean"], 3)
    print(json.dumps(result))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
