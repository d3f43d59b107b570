#!/usr/bin/env python3
"""The TUI as on a GPU box, without one: for profiling its own CPU here (issue 16, item 17).

A live-looking run: the recorded demo's events are written into a fresh run directory at one
optimizer step per second (their times rewritten to now), while a sleeping child process plays
the trainer (alive, its pid the trainer's). The TUI follows it with a real `LiveWatch` whose
sampler reads a fake NVML (tests/support/nvml_fake.py: one H100 under a LoRA run, every field
answering) and this host through psutil: the same threads, sampling, sparklines and redraws as
attached to a run on a GPU box, minus the driver's own call time.

  python bench/tui_fake_gpu.py            run it in a terminal (tmux), then profile its pid:
  py-spy record --pid PID --duration 30 --format speedscope -o tui.json
  python bench/tui_fake_gpu.py --cpu-window 30 --out cpu.json   the TUI's share of a core over
                                                 30 s, as JSON, then quit (run it in a terminal)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
FIXTURE = ROOT / "tests" / "fixtures" / "demo_run_events.jsonl"
STEP_EVERY_S = 1.0


def feed(events_path: Path, events: list[dict], stop: threading.Event) -> None:
    """The recording's events, one optimizer step a second, stamped now; then it starts over."""
    with events_path.open("a", encoding="utf-8") as out:
        while not stop.is_set():
            for event in events:
                if event["type"] == "done":
                    break
                if event["type"] == "log":
                    stop.wait(STEP_EVERY_S)
                    if stop.is_set():
                        return
                out.write(json.dumps(dict(event, ts=time.time())) + "\n")
                out.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--cpu-window", type=float, help="measure the TUI's CPU over this many seconds, then quit"
    )
    ap.add_argument(
        "--out", type=Path, help="with --cpu-window: write the JSON there (the TUI owns the terminal)"
    )
    a = ap.parse_args()
    from support.nvml_fake import GIB, FakeGpu, FakeNvml

    from cockpit.live.session import RunSession
    from cockpit.live.watch import LiveWatch
    from cockpit.run.rundir import RunDir
    from cockpit.telemetry.sampler import Sampler
    from screens.run.app import CockpitApp

    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    events = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    hello = next(e for e in events if e["type"] == "hello")
    hello.update(pid=trainer.pid, device={"kind": "cuda", "name": "NVIDIA H100 80GB HBM3 (fake NVML)"})
    run = RunDir(Path(tempfile.mkdtemp(prefix="tui-fake-gpu-")) / "20261201-000000-fake")
    run.path.mkdir()
    import psutil

    from cockpit.run.process import boot_id

    record = {
        "pid": trainer.pid,
        "pgid": trainer.pid,
        "create_time": psutil.Process(trainer.pid).create_time(),
    }
    run.trainer_path.write_text(json.dumps(record | {"boot_id": boot_id(), "started": time.time()}))
    stop = threading.Event()
    writer = threading.Thread(target=feed, args=(run.events_path, events, stop), daemon=True)
    writer.start()
    gpu = FakeGpu(processes=[(trainer.pid, 34 * GIB)])
    watch = LiveWatch(trainer.pid, sampler=Sampler(FakeNvml([gpu]), trainer_pid=trainer.pid)).start()
    app = CockpitApp(RunSession(run), watch=watch)
    if a.cpu_window:
        me = psutil.Process()

        def measure() -> None:
            time.sleep(5)  # imported, composed, the history drawn
            before, started = sum(me.cpu_times()[:2]), time.monotonic()
            time.sleep(a.cpu_window)
            share = (sum(me.cpu_times()[:2]) - before) / (time.monotonic() - started)
            result = {
                "tui_core_share": round(share, 4),
                "window_s": a.cpu_window,
                "load_avg": os.getloadavg(),
            }
            if a.out:
                a.out.write_text(json.dumps(result) + "\n")
            app.call_from_thread(app.exit, 0)

        threading.Thread(target=measure, daemon=True).start()
    try:
        app.run()
    finally:
        stop.set()
        trainer.kill()
        trainer.wait()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("COCKPIT_HOME", tempfile.mkdtemp(prefix="tui-fake-gpu-home-"))
    raise SystemExit(main())
