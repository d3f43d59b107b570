#!/usr/bin/env python3
"""Several GPUs through the product, on a machine with two (nvidia-h200-x2), in one call:

1. QLoRA, `synthetic:llama-2-7b`, the article's recipe (nf4, r=64 on q/v, micro-batch 4 x
   accumulation 4, length 512 on every sample, paged AdamW, checkpointing) on ONE GPU;
2. the same on TWO GPUs (`gpus: 2`: torchrun, DDP), same per-GPU micro-batch: tokens/s ratio
   2-GPU / 1-GPU (target >= 1.8);
3. a FULL fine-tune of the same model on two GPUs each emulated at 80 GiB (`emulate_vram_gib`),
   `distributed.strategy: auto` (which must pick FSDP: a DDP replica needs far more than 80 GiB);
4. (unless --skip-oom-proof) the same full fine-tune on ONE emulated 80 GiB GPU: it must run out
   of memory, which shows the model does not fit one such card.

Every run is `python -m cockpit train CONFIG --no-ui`: the real launcher, ranks, events. Measures
as bench/spine_vs_seed.py: tokens/s = real tokens per optimizer step (every rank's) over the median
step time after the first two steps; device memory = NVML 'used' above the idle baseline, per
GPU, sampled every 20 ms from outside. The memory model's per-GPU prediction is printed beside it.

  python bench/multi_gpu.py --out DIR [--steps 12] [--full-steps 5] [--skip-oom-proof] [--one-gpu]

`--one-gpu` runs only what one GPU can (runs 1 and 4): the baseline of the speed-up and the proof
that the full fine-tune does not fit one 80 GiB card, measured where no two-GPU machine is lent.

Writes DIR/multi_gpu.json (everything) and DIR/multi_gpu.md (the table for docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import build_synthetic, cockpit_env, read_events, run_cockpit  # noqa: E402

ARCH, VOCAB, SEQ = "llama-2-7b", 32000, 512
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


class GpuPeaks:
    """NVML 'used' of every GPU above its baseline at construction, sampled every 20 ms."""

    def __init__(self, interval_s: float = 0.02):
        import pynvml

        pynvml.nvmlInit()
        self.nv = pynvml
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.base = [pynvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles]
        self.peak = [0] * len(self.handles)
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while self.running:
            for i, h in enumerate(self.handles):
                self.peak[i] = max(self.peak[i], self.nv.nvmlDeviceGetMemoryInfo(h).used - self.base[i])
            time.sleep(0.02)

    def stop(self) -> list[float]:
        self.running = False
        self.thread.join()
        return [round(p / 2**30, 2) for p in self.peak]


def write_dataset(path: Path, samples: int) -> None:
    import random

    rng = random.Random(0)
    with open(path, "w") as f:
        for _ in range(samples):
            f.write(json.dumps({"input_ids": [rng.randrange(3, VOCAB) for _ in range(SEQ)]}) + "\n")


def config_text(data: Path, steps: int, gpus: int, full: bool, emulate_gib: float | None) -> str:
    from cockpit.config.schema import all_keys

    keys = set(all_keys())
    lines = [
        f'model: {{name: "synthetic:{ARCH}"}}',
        f'dataset: {{path: "{data}", format: tokens}}',
        f"method: {'full' if full else 'qlora'}",
        "quantization: {bits: 4, quant_type: nf4, double_quant: true}",
        "lora: {r: 64, alpha: 16, dropout: 0.1, target_modules: [q_proj, v_proj]}",
        "training:",
        f"  max_length: {SEQ}",
        f"  micro_batch_size: {2 if full else 4}",
        f"  gradient_accumulation_steps: {1 if full else 4}",
        f"  max_steps: {steps}",
        "  learning_rate: 2.0e-5" if full else "  learning_rate: 2.0e-4",
        "  lr_scheduler: constant",
        f"  optimizer: {'adamw_torch' if full else 'paged_adamw_32bit'}",
        "  max_grad_norm: 0.3",
        "  gradient_checkpointing: true",
        "  precision: bf16",
        "  packing: false",
        "  sampling: sequential",
        "  logging_steps: 1",
        f"gpus: {gpus}",
        "distributed: {strategy: auto}",
        "output: {save_steps: 100000, save_final: false}",
    ]
    if emulate_gib is not None:
        lines.append(f"emulate_vram_gib: {emulate_gib}")
    if "speed.mode" in keys:  # the settings above are the measurement: nothing chosen for us
        lines.append('speed: {mode: "off"}')
    return "\n".join(lines) + "\n"


def run(name: str, config: str, workdir: Path, env: dict, timeout_s: float) -> dict:
    folder = workdir / name
    folder.mkdir(parents=True, exist_ok=True)
    runs_dir = folder / "runs"
    path = folder / "config.yaml"
    path.write_text(config.replace("output: {", f'output: {{dir: "{runs_dir}", '))
    help_text = subprocess.run(
        [sys.executable, "-m", "cockpit", "train", "--help"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout
    extra = ["--skip-preflight"] if "--skip-preflight" in help_text else []
    extra += ["--on-oom", "stop"] if "--on-oom" in help_text else []
    peaks = GpuPeaks()
    started = time.time()
    returncode, out = run_cockpit(["train", str(path), "--no-ui", *extra], env, timeout_s)
    wall = time.time() - started
    device_gib = peaks.stop()
    (folder / "cockpit.log").write_text(out)
    run_dirs = sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []
    events = read_events(run_dirs[-1]) if run_dirs else []
    logs = [e for e in events if e["type"] == "log"]
    hello = next((e for e in events if e["type"] == "hello"), {})
    model = next((e for e in events if e["type"] == "model"), {})
    error = next((e for e in events if e["type"] == "error"), None)
    result = {
        "name": name,
        "returncode": returncode,
        "wall_s": round(wall, 1),
        "steps_logged": len(logs),
        "device_used_gib": device_gib,
        "distributed": model.get("distributed") or hello.get("distributed"),
        "emulated_vram": hello.get("emulated_vram"),
        "error": {k: error.get(k) for k in ("kind", "message", "rank", "phase", "step")} if error else None,
        "run_dir": str(run_dirs[-1]) if run_dirs else None,
        "versions": hello.get("versions"),
        "device": hello.get("device"),
    }
    steady = [e["step_time_s"] for e in logs if e["step"] > 2 and e.get("step_time_s")]
    if steady:
        world = (result["distributed"] or {}).get("world_size", 1)
        first = logs[0]
        micro = 2 if "method: full" in config else 4
        accum = 1 if "method: full" in config else 4
        med = statistics.median(steady)
        result.update(
            step_s_median=round(med, 4),
            tokens_per_step=world * micro * accum * SEQ,
            tokens_per_s=round(world * micro * accum * SEQ / med),
            tokens_per_s_trainer=round(statistics.median(rates)) if (rates := trainer_rates(logs)) else None,
            final_loss=logs[-1].get("loss"),
            first_loss=first.get("loss"),
            peak_allocated_gib=round(max(e.get("mem_peak_bytes", 0) for e in logs) / 2**30, 2),
        )
    print(
        f"{name}: {json.dumps({k: v for k, v in result.items() if k != 'versions'})}",
        file=sys.stderr,
        flush=True,
    )
    return result


def trainer_rates(logs: list[dict]) -> list[float]:
    return [e["tokens_per_s"] for e in logs if e["step"] > 2 and e.get("tokens_per_s")]


def predicted_gib(full: bool, gpus: int, sharding: str) -> float:
    from cockpit.models import memory as estimate
    from cockpit.models import shape as modelshape

    shape = modelshape.load_shape(f"synthetic:{ARCH}")
    w = estimate.Workload(
        shape,
        method="full" if full else "qlora",
        micro_batch=2 if full else 4,
        grad_accum=1 if full else 4,
        optimizer="adamw_torch" if full else "paged_adamw_32bit",
        gpus=gpus,
        sharding=sharding,
    )
    return round(estimate.estimate_memory(w).peak_gib, 2)


def markdown(result: dict) -> str:
    rows = [
        "| run | GPUs | strategy | tokens/s (all GPUs) | median step s | device used GiB per GPU (NVML) | "
        "predicted GiB per GPU | outcome |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        d = r.get("distributed") or {}
        outcome = (
            "finished"
            if r["returncode"] == 0
            else (r["error"] or {}).get("kind") or f"exit {r['returncode']}"
        )
        used = ", ".join(f"{g:.2f}" for g in r["device_used_gib"][: max(1, d.get("world_size", 1))])
        rows.append(
            f"| {r['name']} | {d.get('world_size', 1)} | {d.get('strategy') or '-'} | "
            f"{r.get('tokens_per_s', '-')} | {r.get('step_s_median', '-')} | {used} | "
            f"{r.get('predicted_gib', '-')} | {outcome} |"
        )
    ratio = result.get("ratio_tokens_per_s_2gpu_vs_1gpu")
    if any("2gpu" in r["name"] for r in result["runs"]):
        rows += ["", f"Tokens/s, 2 GPUs (DDP) / 1 GPU: **{ratio}** (target >= 1.8)."]
    else:
        rows += ["", "One GPU only (`--one-gpu`): no two-GPU run, no speed-up ratio."]
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for multi_gpu.json and multi_gpu.md")
    ap.add_argument("--steps", type=int, default=12, help="optimizer steps of the QLoRA runs")
    ap.add_argument("--full-steps", type=int, default=5, help="optimizer steps of the FSDP full fine-tune")
    ap.add_argument("--emulate-gib", type=float, default=80.0)
    ap.add_argument("--skip-oom-proof", action="store_true", help="leave out run 4 (one 80 GiB GPU, full)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "multi-gpu-bench")
    ap.add_argument("--one-gpu", action="store_true", help="only the one-GPU runs (1 and 4)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    a.workdir.mkdir(parents=True, exist_ok=True)
    env = cockpit_env(a.workdir / "home", a.workdir / "cache", HF_HUB_OFFLINE="1", **NO_MULTICAST)
    data = a.workdir / "tokens-512.jsonl"
    write_dataset(data, 2 * 4 * 4 * (a.steps + 3))
    started = time.time()
    build_synthetic(ARCH, a.workdir / "cache", env)
    print(f"model built in {time.time() - started:.0f} s", file=sys.stderr, flush=True)

    import pynvml

    pynvml.nvmlInit()
    result = {
        "bench": "multi_gpu",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "gpus": [
            pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(pynvml.nvmlDeviceGetCount())
        ],
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "host": platform.node(),
        "python": platform.python_version(),
        "runs": [],
    }
    plan = [
        ("qlora-1gpu", config_text(data, a.steps, 1, False, None), 240, predicted_gib(False, 1, "ddp")),
        ("qlora-2gpu-ddp", config_text(data, a.steps, 2, False, None), 240, predicted_gib(False, 2, "ddp")),
        (
            "full-2gpu-80gib",
            config_text(data, a.full_steps, 2, True, a.emulate_gib),
            300,
            predicted_gib(True, 2, "fsdp"),
        ),
    ]
    if not a.skip_oom_proof:
        plan.append(
            (
                "full-1gpu-80gib",
                config_text(data, 2, 1, True, a.emulate_gib),
                200,
                predicted_gib(True, 1, "ddp"),
            )
        )
    if a.one_gpu:
        plan = [p for p in plan if "-1gpu" in p[0]]
    for name, config, timeout_s, predicted in plan:
        r = run(name, config, a.workdir, env, timeout_s)
        r["predicted_gib"] = predicted
        result["runs"].append(r)
        one = next((x for x in result["runs"] if x["name"] == "qlora-1gpu"), {})
        two = next((x for x in result["runs"] if x["name"] == "qlora-2gpu-ddp"), {})
        if one.get("tokens_per_s") and two.get("tokens_per_s"):
            result["ratio_tokens_per_s_2gpu_vs_1gpu"] = round(two["tokens_per_s"] / one["tokens_per_s"], 3)
        result["versions"] = next((x["versions"] for x in result["runs"] if x.get("versions")), None)
        result["total_s"] = round(time.time() - started, 1)
        # written after every run: a call cut short still leaves what was measured
        (a.out / "multi_gpu.json").write_text(json.dumps(result, indent=1) + "\n")
        (a.out / "multi_gpu.md").write_text(markdown(result))
    print(json.dumps({k: result.get(k) for k in ("ratio_tokens_per_s_2gpu_vs_1gpu", "total_s")}))


if __name__ == "__main__":
    main()
