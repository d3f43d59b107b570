#!/usr/bin/env python3
"""Record a real run on the GPU and keep it as an example anyone can replay without a GPU.

A short run through `cockpit train --no-ui` (the article's QLoRA recipe on `synthetic:llama-2-7b`,
512-token rows packed from the shipped demo dataset, so the loss falls; ~60-90 s of training with
two checkpoints), then its run directory is copied without checkpoints or weights: events.jsonl,
telemetry.jsonl (GPU and host, as the recorder wrote them), config.yaml and the tail of
backend.log. The copy is replayed (`cockpit replay DIR --no-ui --speed 0`) to check that it opens.

  python bench/record_example.py --out DIR [--steps 120] [--price-per-hour USD] [--smoke]

Writes DIR/h200-run/ (to commit as examples/h200-run/, under 1 MB) and DIR/record_example.json.
`--smoke` records the shipped tiny model on the CPU (the tests run it). Exits 1 when the run did
not finish, the copy is too big, or it does not replay.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_runs import (
    FULL,
    ROOT,
    SMOKE,
    bench_env,
    doctor_over_recording,
    ending,
    events_of,
    machine,
    prebuild,
    throughput,
    train_headless,
    versions,
    write_config,
    write_json,
)

KEPT = ("events.jsonl", "telemetry.jsonl", "config.yaml")
LOG_TAIL_LINES = 200
MAX_BYTES = 1_000_000


def copy_run(run: Path, dest: Path) -> dict:
    """The files a replay needs, and the log's tail; no checkpoints, no weights."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in KEPT:
        if (run / name).exists():
            shutil.copy2(run / name, dest / name)
    if (run / "backend.log").exists():
        (dest / "backend.log").write_text("\n".join(log_tail(run / "backend.log")) + "\n")
    return {p.name: p.stat().st_size for p in sorted(dest.iterdir())}


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 256_000) -> list[str]:
    """The last lines of a log as a terminal showed them (a progress bar's last rewrite)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        text = f.read().decode("utf-8", errors="replace")
    rows = text.split("\n")[1:] if size > max_bytes else text.split("\n")
    shown = [row.split("\r")[-1].rstrip() for row in rows]
    return [row for row in shown if row][-lines:]


def replays(dest: Path, env: dict) -> dict:
    """`cockpit replay DEST --no-ui --speed 0`: its exit code and how the run ended, as it says."""
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "replay", str(dest), "--no-ui", "--speed", "0"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {"exit_code": done.returncode, "last_lines": lines[-3:], "stderr": done.stderr[-500:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for h200-run/ and record_example.json")
    ap.add_argument("--steps", type=int, help="optimizer steps (default 120, ~60-90 s on an H200; smoke 30)")
    ap.add_argument("--price-per-hour", type=float, help="the instance's price, for the cost meter (USD)")
    ap.add_argument("--smoke", action="store_true", help="the tiny model on the CPU")
    a = ap.parse_args()
    shape = SMOKE if a.smoke else FULL
    steps = a.steps or (30 if a.smoke else 120)
    work = Path(tempfile.mkdtemp(prefix="record-example-"))
    env = bench_env(work / "home")
    overrides = {
        "dataset.path": "demo",  # the shipped text: a random model learns it, the loss falls
        "dataset.format": "auto",
        "training.packing": True,  # short samples packed into full rows: the GPU has work
        "training.gradient_accumulation_steps": 1,
        "training.learning_rate": 1e-3,
        "training.lr_scheduler": "cosine",
        "training.warmup": 5,
        "output.save_steps": max(1, steps // 3),
        "output.checkpoints_kept": 2,
        "cost.price_per_hour": a.price_per_hour,
    }
    config = write_config(work / "run.yaml", shape, Path("demo"), steps, **overrides)
    t0 = time.monotonic()
    prebuild(shape, env)
    run, done = train_headless(config, env)
    events = events_of(run)
    dest = a.out / "h200-run"
    sizes = copy_run(run, dest)
    replay = replays(dest, env)
    total = sum(sizes.values())
    result = {
        "bench": "record_example",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "smoke": a.smoke,
        "shape": shape.name,
        "steps": steps,
        "machine": machine(),
        "versions": versions(events),
        "run": run.name,
        "exit_code": done.returncode,
        **ending(events),
        **throughput(events, shape),
        "copied_to": str(dest),
        "files": sizes,
        "bytes": total,
        "under_1_mb": total < MAX_BYTES,
        "doctor_recorded": doctor_over_recording(dest),
        "replay": replay,
        "bench_s": round(time.monotonic() - t0, 1),
    }
    path = write_json(a.out, "record_example.json", result)
    print(
        f"run {result['status']}; {total} bytes in {dest}; replay exit {replay['exit_code']}; {path}",
        file=sys.stderr,
    )
    ok = result["status"] == "finished" and total < MAX_BYTES and replay["exit_code"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
