#!/usr/bin/env python3
"""How long `cockpit data` takes, and how much memory its subprocess tree holds at its peak, on a
big file and a small one.

  python bench/data_check.py --out bench/results/2026-12-07-data-check-cpu.txt [--work /tmp/dcb]
      [--gib 1.0] [--huge-mb 100] [--model smollm2-135m]

Writes under --work (generated once, never committed): a JSON-lines file of chat rows of about
--gib GiB with one line of --huge-mb MB among them, and a 10-row file. Runs `cockpit data CONFIG
--fresh --json` on each (the client and its `train_backend.datacheck` child, a real tokenizer
from the model cache: smollm2-135m, fetched once with cockpit fetch, else the shipped one),
samples the RSS of the whole process tree every 0.1 s, and checks the targets: the big file in at
most 120 s and 1 GiB peak RSS, the 10-row file in at most 3 s. The record holds the date,
`uname -a`, nproc, the load average and the versions, then each run's figures: wall time, CPU
time of the whole tree (what an idle box's wall time is bounded by, on its cores) and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
TOPICS = ["LoRA", "QLoRA", "a GPU", "gradient checkpointing", "a tokenizer", "the learning rate", "an epoch"]
TARGETS = {"big": (120.0, 1 << 30), "small": (3.0, None)}


def chat_row(i: int, rng: random.Random) -> dict:
    """One chat row of about 2 KB: a system turn, two questions and two answers."""
    topic = TOPICS[i % len(TOPICS)]
    words = " ".join(
        rng.choice(["fine", "tune", "model", "memory", "batch", "token", "speed"]) for _ in range(60)
    )
    return {
        "id": i,
        "messages": [
            {"role": "system", "content": "You answer questions about training language models."},
            {"role": "user", "content": f"Question {i}: what is {topic}, and why does it matter? {words}"},
            {"role": "assistant", "content": f"{topic} is a part of training. In short: {words} ({i})."},
            {"role": "user", "content": f"And how does {topic} change the cost of a run of row {i}?"},
            {"role": "assistant", "content": f"It changes the time, so the cost: {words[: 200 + i % 100]}."},
        ],
    }


def make_big(path: Path, gib: float, huge_mb: int) -> None:
    if path.is_file() and path.stat().st_size >= gib * (1 << 30) * 0.98:
        return
    rng = random.Random(0)
    target = int(gib * (1 << 30))
    written, i, huge_done = 0, 0, False
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            if not huge_done and written >= target // 2:
                huge = {"messages": [{"role": "user", "content": "x" * (huge_mb * 1_000_000)}]}
                line = json.dumps(huge) + "\n"
                huge_done = True
            else:
                line = json.dumps(chat_row(i, rng)) + "\n"
                i += 1
            f.write(line)
            written += len(line)


def make_small(path: Path) -> None:
    rng = random.Random(1)
    path.write_text("".join(json.dumps(chat_row(i, rng)) + "\n" for i in range(10)), encoding="utf-8")


def tree_rss(root: psutil.Process) -> int:
    total = 0
    try:
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:  # the root ended between two samples
        return 0
    for proc in tree:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_data(config: Path, env: dict) -> dict:
    command = [sys.executable, "-m", "cockpit", "data", str(config), "--fresh", "--json"]
    load_before = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    root = psutil.Process(proc.pid)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(root))
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.monotonic() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    done.set()
    sampler.join()
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    report = json.loads(out) if out.strip() else {}
    return {
        "returncode": proc.returncode,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),  # user + system of the whole tree (client, check, its workers)
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "peak_tree_rss_bytes": peak[0],
        "check_elapsed_s": report.get("elapsed_s"),
        "check_peak_rss_bytes": report.get("peak_rss_bytes"),
        "rows_read": (report.get("totals") or {}).get("rows_read"),
        "tokens_per_epoch": (report.get("totals") or {}).get("tokens_per_epoch"),
        "exact": (report.get("totals") or {}).get("exact"),
        "problems": [p["message"][:200] for p in report.get("problems") or []],
        "stderr_tail": err.decode(errors="replace")[-400:],
    }


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("transformers", "tokenizers", "datasets", "torch", "pyarrow"):
        try:
            from importlib.metadata import version

            out[name] = version(name)
        except Exception:
            out[name] = None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", default="/tmp/data-check-bench")
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--huge-mb", type=int, default=100)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from cockpit.models import packaged

    model = (
        args.model
        if not packaged.is_packaged(args.model) or packaged.is_fetched(args.model)
        else "synthetic:tiny"
    )
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    big, small = work / "chat-big.jsonl", work / "chat-10.jsonl"
    make_big(big, args.gib, args.huge_mb)
    make_small(small)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COCKPIT_HOME": str(work / "home")}
    results = {}
    for name, data in (("small", small), ("big", big)):
        config = work / f"{name}.yaml"
        config.write_text(
            f"model: {{name: {model}}}\ndataset: {{path: {data}}}\nmethod: lora\n"
            "training: {max_length: 1024, optimizer: adamw_torch}\n",
            encoding="utf-8",
        )
        results[name] = {"file_bytes": data.stat().st_size, **run_data(config, env)}
    verdicts = {}
    for name, (seconds, rss) in TARGETS.items():
        r = results[name]
        ok = r["wall_s"] <= seconds and (rss is None or r["peak_tree_rss_bytes"] <= rss)
        verdicts[name] = "met" if ok else "MISSED"
    lines = [
        f"# bench/data_check.py, {date.today().isoformat()}",
        f"uname -a: {' '.join(platform.uname())}",
        f"nproc: {os.cpu_count()}",
        f"load average at the end (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"versions: {json.dumps(versions())}",
        f"model (tokenizer): {model}; max_length 1024",
        f"command: python bench/data_check.py --out {args.out} --work {args.work} --gib {args.gib} "
        f"--huge-mb {args.huge_mb}",
        "",
    ]
    for name in ("big", "small"):
        r = results[name]
        seconds, rss = TARGETS[name]
        target = f"<= {seconds:g} s" + (f", <= {rss / (1 << 30):g} GiB peak RSS" if rss else "")
        lines.append(
            f"{name}: {r['file_bytes']:,} bytes, {r['rows_read']} rows; target {target}: {verdicts[name]}"
        )
        lines.append(
            f"  CPU (user + system, the whole tree) {r['cpu_s']} s; load average {r['load_before']} at the "
            f"start, {r['load_after']} at the end"
        )
        lines.append(
            f"  wall {r['wall_s']} s (the check itself {r['check_elapsed_s']} s), peak RSS of the process "
            f"tree {r['peak_tree_rss_bytes'] / (1 << 20):.0f} MiB (the check's own "
            f"{(r['check_peak_rss_bytes'] or 0) / (1 << 20):.0f} MiB), exit {r['returncode']}"
        )
        lines.append(f"  tokens per epoch {r['tokens_per_epoch']}, every row tokenized: {r['exact']}")
        lines += [f"  data error: {p}" for p in r["problems"]]
    lines.append("")
    lines.append("raw: " + json.dumps(results))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[:-1]))
    return 0 if all(v == "met" for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
