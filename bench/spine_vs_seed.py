#!/usr/bin/env python3
"""The article's QLoRA recipe through `cockpit train --no-ui` against the reference script.

Runs, in one process tree on one GPU, the reference `seed_recipe.py` (shared/bench) and
the same configuration through the product, alternating A B B A so that drift of the
machine shows, and prints one JSON object with both results and their ratios:

  python bench/spine_vs_seed.py --seed-script PATH/seed_recipe.py [--steps 12]
         [--lengths fixed|mixed] [--repeats 2] [--out result.json]

Same data: the product trains on the very token sequences the reference draws
(its generator, seed 0, lengths 512 or 32..512), written to a JSON-lines file of
`input_ids`. Same measures: tokens/s counts real tokens per optimizer step over the
median steady step time (steps after the first two), and device memory is the peak of
NVML 'used' above the idle baseline, sampled every 10 ms from outside the process.
The product's step time is the interval between consecutive step ends (it includes
logging and the next batch's loading); the reference times step begin to step end,
which leaves those out, so the comparison leans towards the reference.
Same settings: the product runs the configuration as written (`speed: {mode: off}`); what
speed: auto gains over the reference is bench/fast_vs_seed.py's question.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DevicePeak, build_synthetic, cockpit_env, read_events  # noqa: E402

VOCAB = {"llama-2-7b": 32000, "llama-2-13b": 32000}


def write_dataset(
    path: Path, arch: str, steps: int, lengths_mode: str, bs: int = 4, accum: int = 4, seq: int = 512
) -> list[int]:
    """The reference's samples, drawn the same way (torch generator, seed 0)."""
    import torch

    n = bs * accum * (steps + 2)
    g = torch.Generator().manual_seed(0)
    lengths = [seq] * n if lengths_mode == "fixed" else torch.randint(32, seq + 1, (n,), generator=g).tolist()
    with open(path, "w") as f:
        for k in lengths:
            ids = torch.randint(3, VOCAB[arch], (k,), generator=g).tolist()
            f.write(json.dumps({"input_ids": ids}) + "\n")
    return lengths


def cockpit_config(arch: str, data_path: Path, steps: int) -> str:
    return f"""
model: {{name: "synthetic:{arch}"}}
dataset: {{path: "{data_path}", format: tokens}}
method: qlora
quantization: {{bits: 4, quant_type: nf4, double_quant: true}}
lora: {{r: 64, alpha: 16, dropout: 0.1, target_modules: [q_proj, v_proj]}}
training:
  max_length: 512
  micro_batch_size: 4
  gradient_accumulation_steps: 4
  max_steps: {steps}
  learning_rate: 2.0e-4
  lr_scheduler: constant
  warmup: 0.03
  optimizer: paged_adamw_32bit
  max_grad_norm: 0.3
  gradient_checkpointing: true
  precision: bf16
  packing: false
  sampling: group_by_length
  logging_steps: 1
output: {{save_steps: 100000, save_final: false}}
speed: {{mode: off}}  # the settings as written, like the reference (speed: auto is fast_vs_seed.py)
"""


def run_seed(script: Path, arch: str, steps: int, lengths: str, workdir: Path) -> dict:
    out = workdir / f"seed-{time.time_ns()}.json"
    cmd = [
        sys.executable,
        str(script),
        "--arch",
        arch,
        "--steps",
        str(steps),
        "--lengths",
        lengths,
        "--workdir",
        str(workdir / "seed"),
        "--out",
        str(out),
    ]
    with open(workdir / "seed.log", "a") as log:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=log)
    return json.loads(out.read_text())


def run_cockpit(config_path: Path, lengths: list[int], env: dict, workdir: Path) -> dict:
    peak = DevicePeak()
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "cockpit", "train", str(config_path), "--no-ui"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.time() - started
    device_used = peak.stop()
    (workdir / "cockpit.log").open("a").write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"cockpit exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    runs = sorted((Path(env["COCKPIT_HOME"]) / "runs").iterdir())
    events = read_events(runs[-1])
    logs = [e for e in events if e["type"] == "log"]
    step_times = [e["step_time_s"] for e in logs if e["step"] > 2]
    med = statistics.median(step_times)
    bs_accum = 16
    mean_len = sum(lengths) / len(lengths)
    peak_alloc = max(e.get("mem_peak_bytes", 0) for e in logs) / 2**30
    peak_reserved = max(e.get("mem_reserved_bytes", 0) for e in logs) / 2**30
    return {
        "step_s_median": round(med, 4),
        "tokens_per_s": round(bs_accum * mean_len / med),
        "tokens_per_s_trainer": round(statistics.median(e["tokens_per_s"] for e in logs if e["step"] > 2)),
        "peak_allocated_gib": round(peak_alloc, 2),
        "peak_reserved_gib": round(peak_reserved, 2),
        "device_used_gib": round(device_used, 2),
        "final_loss": logs[-1]["loss"],
        "wall_s": round(wall, 1),
        "run_dir": str(runs[-1]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed-script", required=True, type=Path)
    ap.add_argument("--arch", default="llama-2-7b", choices=sorted(VOCAB))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--lengths", default="fixed", choices=["fixed", "mixed"])
    ap.add_argument("--repeats", type=int, default=2, help="A B pairs, run as A B B A ...")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "spine-bench")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    a.workdir.mkdir(parents=True, exist_ok=True)
    env = cockpit_env(a.workdir / "home", a.workdir / "cache")
    data = a.workdir / f"data-{a.arch}-{a.lengths}.jsonl"
    lengths = write_dataset(data, a.arch, a.steps, a.lengths)
    config_path = a.workdir / "cockpit.yaml"
    config_path.write_text(cockpit_config(a.arch, data, a.steps))
    # warm both caches (model built once, untimed, like a download)
    build_synthetic(a.arch, a.workdir / "cache", env)

    seed_runs, cockpit_runs = [], []
    order = []
    for i in range(a.repeats):
        order += ["seed", "cockpit"] if i % 2 == 0 else ["cockpit", "seed"]
    for which in order:
        t0 = time.time()
        if which == "seed":
            seed_runs.append(run_seed(a.seed_script, a.arch, a.steps, a.lengths, a.workdir))
            r = seed_runs[-1]
        else:
            cockpit_runs.append(run_cockpit(config_path, lengths, env, a.workdir))
            r = cockpit_runs[-1]
        print(
            f"{which}: {r['tokens_per_s']} tok/s, device {r['device_used_gib']} GiB "
            f"({time.time() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    def mean(rows, key):
        return statistics.mean(r[key] for r in rows)

    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    result = {
        "bench": "spine_vs_seed",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "gpu": pynvml.nvmlDeviceGetName(handle),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "host": platform.node(),
        "python": platform.python_version(),
        "arch": a.arch,
        "lengths": a.lengths,
        "steps": a.steps,
        "order": order,
        "seed": seed_runs,
        "cockpit": cockpit_runs,
        "ratio_tokens_per_s": round(mean(cockpit_runs, "tokens_per_s") / mean(seed_runs, "tokens_per_s"), 4),
        "ratio_device_used": round(
            mean(cockpit_runs, "device_used_gib") / mean(seed_runs, "device_used_gib"), 4
        ),
        "ratio_peak_allocated": round(
            mean(cockpit_runs, "peak_allocated_gib") / mean(seed_runs, "peak_allocated_gib"), 4
        ),
        "versions": seed_runs[0].get("versions"),
    }
    line = json.dumps(result)
    print(line)
    if a.out:
        a.out.write_text(line + "\n")


if __name__ == "__main__":
    main()
