#!/usr/bin/env python3
"""Measure device memory and throughput of training configurations through the product.

Each configuration runs as a real `cockpit train --no-ui` on synthetic weights with
full-length token sequences (no padding), while NVML's 'used' memory of GPU 0 is
sampled every 10 ms from outside (above the idle baseline, as `nvidia-smi` shows it).
The peak is split at the `train_begin` event into the load-time peak and the training
peak. Results are appended as JSON lines: they calibrate and test the estimator
(`cockpit estimate`) and the speed model.

  python bench/memory_points.py [--only NAME ...] [--new] [--budget-s 430] [--out points.jsonl]

`--new` measures the points issue 15 added (NEW_POINTS) only; `--liger` the points with speed: auto's
Liger kernels and the layer inputs in host memory (LIGER_POINTS), which fit LIGER_ACTIVATION_SCALE.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from common import DevicePeak, build_synthetic, cockpit_env, host_probes, read_events, write_tokens  # noqa: E402

from cockpit.models import shipped as shapes  # noqa: E402

STEPS = 5

ISSUE_15_MORE = (
    "l32-1b-lora-2x8192-ckpt",
    "q25-1.5b-full-adamw-ckpt",
    "l32-1b-full-fp32",
    "l32-1b-full-paged32",
    "l2-7b-qlora-adamw8bit-nockpt",
    "l2-7b-lora-paged8bit-ckpt",
)
# name: (arch, method, overrides). Ordered by value: the time budget cuts the tail.
CONFIGS: dict[str, tuple[str, str, dict]] = {
    "S0-recheck": (
        "llama-2-7b",
        "qlora",
        {
            "lora.r": 64,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 512,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": False,
            "training.optimizer": "paged_adamw_32bit",
        },
    ),
    "l31-8b-qlora-all-ckpt": (
        "llama-3.1-8b",
        "qlora",
        {
            "lora.r": 16,
            "lora.target_modules": "all-linear",
            "training.max_length": 1024,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": True,
            "training.optimizer": "paged_adamw_8bit",
        },
    ),
    "l32-1b-full-adamw": (
        "llama-3.2-1b",
        "full",
        {
            "training.max_length": 512,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": False,
            "training.optimizer": "adamw_torch",
        },
    ),
    "q25-1.5b-lora-long-ckpt": (
        "qwen2.5-1.5b",
        "lora",
        {
            "lora.r": 32,
            "lora.target_modules": "all-linear",
            "training.max_length": 2048,
            "training.micro_batch_size": 2,
            "training.gradient_checkpointing": True,
            "training.optimizer": "adamw_torch",
        },
    ),
    "l2-7b-qlora-long-ckpt-8bit": (
        "llama-2-7b",
        "qlora",
        {
            "lora.r": 64,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 2048,
            "training.micro_batch_size": 1,
            "training.gradient_checkpointing": True,
            "training.optimizer": "paged_adamw_8bit",
        },
    ),
    "l31-8b-qlora-qv-mb8": (
        "llama-3.1-8b",
        "qlora",
        {
            "lora.r": 64,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 512,
            "training.micro_batch_size": 8,
            "training.gradient_checkpointing": False,
            "training.optimizer": "paged_adamw_32bit",
        },
    ),
    "l32-1b-full-8bit-ckpt": (
        "llama-3.2-1b",
        "full",
        {
            "training.max_length": 1024,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": True,
            "training.optimizer": "adamw_8bit",
        },
    ),
    "q25-1.5b-qlora-mb16": (
        "qwen2.5-1.5b",
        "qlora",
        {
            "lora.r": 64,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 512,
            "training.micro_batch_size": 16,
            "training.gradient_checkpointing": False,
            "training.optimizer": "paged_adamw_32bit",
        },
    ),
    "l2-7b-lora-all-ckpt": (
        "llama-2-7b",
        "lora",
        {
            "lora.r": 16,
            "lora.target_modules": "all-linear",
            "training.max_length": 512,
            "training.micro_batch_size": 2,
            "training.gradient_checkpointing": True,
            "training.optimizer": "adamw_torch",
        },
    ),
    # issue 15's points: large vocabularies with many tokens per micro-batch (the fused loss past
    # 4096 tokens), long sequences, full fine-tunes of other sizes and dtypes, 8-bit and paged optimizers
    "l32-1b-lora-8x2048-vocab128k": (
        "llama-3.2-1b",
        "lora",
        {
            "lora.r": 16,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 2048,
            "training.micro_batch_size": 8,
            "training.gradient_checkpointing": False,
            "training.optimizer": "adamw_torch",
        },
    ),
    "q25-1.5b-lora-8x2048-vocab152k": (
        "qwen2.5-1.5b",
        "lora",
        {
            "lora.r": 16,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 2048,
            "training.micro_batch_size": 8,
            "training.gradient_checkpointing": False,
            "training.optimizer": "adamw_torch",
        },
    ),
    "l32-1b-lora-2x8192-ckpt": (
        "llama-3.2-1b",
        "lora",
        {
            "lora.r": 16,
            "lora.target_modules": "all-linear",
            "training.max_length": 8192,
            "training.micro_batch_size": 2,
            "training.gradient_checkpointing": True,
            "training.optimizer": "adamw_torch",
        },
    ),
    "l31-8b-qlora-4x2048-vocab128k": (
        "llama-3.1-8b",
        "qlora",
        {
            "lora.r": 16,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 2048,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": True,
            "training.optimizer": "paged_adamw_8bit",
        },
    ),
    "q25-1.5b-full-adamw-ckpt": (
        "qwen2.5-1.5b",
        "full",
        {
            "training.max_length": 1024,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": True,
            "training.optimizer": "adamw_torch",
        },
    ),
    "l32-1b-full-fp32": (
        "llama-3.2-1b",
        "full",
        {
            "training.max_length": 512,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": True,
            "training.optimizer": "adamw_torch",
            "training.precision": "fp32",
        },
    ),
    "l32-1b-full-paged32": (
        "llama-3.2-1b",
        "full",
        {
            "training.max_length": 512,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": True,
            "training.optimizer": "paged_adamw_32bit",
        },
    ),
    "l2-7b-qlora-adamw8bit-nockpt": (
        "llama-2-7b",
        "qlora",
        {
            "lora.r": 64,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 1024,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": False,
            "training.optimizer": "adamw_8bit",
        },
    ),
    "l2-7b-lora-paged8bit-ckpt": (
        "llama-2-7b",
        "lora",
        {
            "lora.r": 16,
            "lora.target_modules": "all-linear",
            "training.max_length": 1024,
            "training.micro_batch_size": 4,
            "training.gradient_checkpointing": True,
            "training.optimizer": "paged_adamw_8bit",
        },
    ),
    "l32-1b-lora-4k": (
        "llama-3.2-1b",
        "lora",
        {
            "lora.r": 8,
            "lora.target_modules": ["q_proj", "v_proj"],
            "training.max_length": 4096,
            "training.micro_batch_size": 1,
            "training.gradient_checkpointing": False,
            "training.optimizer": "adamw_torch",
        },
    ),
}


NEW_POINTS = [name for name in CONFIGS if "vocab1" in name or name in ISSUE_15_MORE]
# speed: auto with the batch keys as written: Liger's kernels (on a GPU where they import), the
# bench's 7B QLoRA of bench/vs_unsloth.py (r16 on all seven linears, 8-bit AdamW, no dropout)
_VS = {
    "lora.r": 16,
    "lora.dropout": 0.0,
    "lora.target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "training.max_length": 512,
    "training.optimizer": "adamw_8bit",
    "speed.mode": "auto",
}
LIGER_POINTS = {
    "l2-7b-qlora-liger-8x512": {"training.micro_batch_size": 8, "training.gradient_checkpointing": False},
    "l2-7b-qlora-liger-8x512-ckpt": {"training.micro_batch_size": 8, "training.gradient_checkpointing": True},
    "l2-7b-qlora-liger-2x512-ckpt": {"training.micro_batch_size": 2, "training.gradient_checkpointing": True},
    "l2-7b-qlora-liger-8x512-host": {
        "training.micro_batch_size": 8,
        "training.gradient_checkpointing": True,
        "training.checkpoint_offload": True,
    },
    "l2-7b-qlora-liger-16x512-host": {
        "training.micro_batch_size": 16,
        "training.gradient_checkpointing": True,
        "training.checkpoint_offload": True,
    },
}
for _name, _keys in LIGER_POINTS.items():
    CONFIGS[_name] = ("llama-2-7b", "qlora", {**_VS, **_keys})


def config_yaml(arch: str, method: str, overrides: dict, data: Path) -> dict:
    cfg = {
        "model": {"name": f"synthetic:{arch}"},
        "dataset": {"path": str(data), "format": "tokens"},
        "method": method,
        "lora": {"alpha": 16, "dropout": 0.1},
        "training": {
            "gradient_accumulation_steps": 1,
            "max_steps": STEPS,
            "learning_rate": 2e-4,
            "lr_scheduler": "constant",
            "precision": "bf16",
            "logging_steps": 1,
            "max_grad_norm": 0.3,
        },
        "output": {"save_steps": 100000, "save_final": False},
        "speed": {"mode": "off"},  # the settings as written: these points calibrate the models
    }
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        cfg[section][key] = value
    return cfg


SLOW_HOST = False  # --slow-host: the trainer shares one CPU core with a busy loop


def _on_core_zero() -> None:
    os.sched_setaffinity(0, {0})


def slow_host_burner() -> subprocess.Popen:
    """A busy loop on CPU core 0, where --slow-host pins the trainer (every thread it starts): the
    trainer's host work gets about half of a core, a slower host by a known mechanism, which its own
    host probe (train_backend/speed/host_probe.py, run in the trainer) measures as it is."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_on_core_zero)


def measure(name: str, workdir: Path, env: dict) -> dict:
    import yaml

    arch, method, overrides = CONFIGS[name]
    cfg = config_yaml(arch, method, overrides, Path())
    seq, mb = cfg["training"]["max_length"], cfg["training"]["micro_batch_size"]
    vocab = shapes.hf_config_dict(arch)["vocab_size"]
    data = workdir / f"tokens-{arch}-{seq}-{mb}.jsonl"
    if not data.exists():
        write_tokens(data, vocab, seq, mb * (STEPS + 1))
    cfg["dataset"]["path"] = str(data)
    config_path = workdir / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(cfg))
    peak = DevicePeak()
    started = time.time()
    burner = slow_host_burner() if SLOW_HOST else None
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "cockpit", "train", str(config_path), "--no-ui"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            preexec_fn=_on_core_zero if SLOW_HOST else None,
        )
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
    peak.stop()
    events = read_events(sorted((Path(env["COCKPIT_HOME"]) / "runs").iterdir())[-1])
    result = {
        "name": name + ("-slowhost" if SLOW_HOST else ""),
        "arch": arch,
        "method": method,
        "overrides": overrides,
        "steps": STEPS,
        "returncode": proc.returncode,
        "wall_s": round(time.time() - started, 1),
    }
    plan = next((e for e in events if e["type"] == "speed_plan"), {})
    result.update(host_probes(events))  # train_backend/speed/host_probe.py, before the load and after the end
    result["slow_host"] = SLOW_HOST
    result["liger"] = bool(plan.get("liger"))
    result["checkpoint_offload"] = bool(plan.get("checkpoint_offload"))
    errors = [e for e in events if e["type"] == "error"]
    if errors:
        result["error"] = {k: errors[0].get(k) for k in ("kind", "message", "oom")}
    begin = next((e for e in events if e["type"] == "train_begin"), None)
    logs = [e for e in events if e["type"] == "log"]
    model = next((e for e in events if e["type"] == "model"), {})
    if begin and logs:
        steady = [e["step_time_s"] for e in logs if e["step"] > 2] or [logs[-1]["step_time_s"]]
        step_s = statistics.median(steady)
        result.update(
            device_used_gib=round(peak.peak_gib(), 3),
            device_load_peak_gib=round(peak.peak_gib(end=begin["ts"]), 3),
            device_train_peak_gib=round(peak.peak_gib(start=begin["ts"]), 3),
            torch_peak_allocated_gib=round(max(e["mem_peak_bytes"] for e in logs) / 2**30, 3),
            torch_peak_reserved_gib=round(max(e["mem_reserved_bytes"] for e in logs) / 2**30, 3),
            after_load_allocated_gib=round(model.get("mem_allocated_bytes", 0) / 2**30, 3),
            params_total=model.get("params_total"),
            params_trainable=model.get("params_trainable"),
            step_s_median=round(step_s, 4),
            step_s_all=[round(e["step_time_s"], 4) for e in logs],
            tokens_per_s=round(seq * mb / step_s),
            final_loss=logs[-1]["loss"],
        )
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--new", action="store_true", help="only the points issue 15 added")
    ap.add_argument("--liger", action="store_true", help="only the Liger and host-memory points")
    ap.add_argument(
        "--budget-s", type=float, default=430, help="start no configuration after this many seconds"
    )
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "memory-points")
    ap.add_argument("--out", type=Path, default=Path("memory_points.jsonl"))
    ap.add_argument(
        "--slow-host",
        action="store_true",
        help="pin each trainer to CPU core 0 beside a busy loop there: a host about half as fast",
    )
    a = ap.parse_args()
    global SLOW_HOST
    SLOW_HOST = a.slow_host
    t0 = time.time()
    a.workdir.mkdir(parents=True, exist_ok=True)
    env = cockpit_env(a.workdir / "home", a.workdir / "cache")
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    header = {
        "bench": "memory_points",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "gpu": pynvml.nvmlDeviceGetName(handle),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "python": platform.python_version(),
    }
    with open(a.out, "a") as f:
        f.write(json.dumps(header) + "\n")
    names = a.only or (NEW_POINTS if a.new else list(LIGER_POINTS) if a.liger else list(CONFIGS))
    # build each synthetic model once, untimed (like a download), so no build shows in a peak
    for arch in dict.fromkeys(CONFIGS[n][0] for n in names):
        build_synthetic(arch, a.workdir / "cache", env)
        print(f"built {arch} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    for name in names:
        if time.time() - t0 > a.budget_s:
            print(f"budget spent: skipping {name}", file=sys.stderr)
            continue
        result = measure(name, a.workdir, env)
        with open(a.out, "a") as f:
            f.write(json.dumps(result) + "\n")
        shown = {
            k: result.get(k)
            for k in (
                "device_used_gib",
                "device_train_peak_gib",
                "torch_peak_reserved_gib",
                "tokens_per_s",
                "wall_s",
            )
        }
        print(f"{name}: {shown} {result.get('error', '')}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
