#!/usr/bin/env python3
"""speed: auto against the article's recipe (seed_recipe.py), on the same data shapes and card.

In one process tree on one GPU: the reference `seed_recipe.py` with fixed 512-token samples
and with ragged ones (`--lengths mixed`, 32..512), and `cockpit train --no-ui` with
`speed: auto` (the default) on the very token sequences the reference draws (its torch
generator, seed 0, 16 x (steps + 2) samples) and the model it builds, capped to a 22 GiB card
(`emulate_vram_gib`, what the plan fits). Runs go in a mirrored order (A B A' B' B' A' B A)
so drift of the machine shows; the second half is skipped when it would pass --budget-s.

  python bench/fast_vs_seed.py --seed-script .gpu/seed_recipe.py --out OUT [--steps 12]
  python bench/fast_vs_seed.py --smoke --out OUT        # CPU, synthetic:tiny, no reference script

Measures, per run: real (non-padding) tokens/s and the median step time after the first two
steps (the reference: 16 x mean length / median step; the product: the trainer's real-token
count over each step's wall time, logging and the next batch included, so it leans towards the
reference), the peak of NVML 'used' above the idle baseline sampled from outside (the
reference samples its own), and the loss after the last step. Writes OUT/fast_vs_seed.json
and OUT/fast_vs_seed.md (the table for docs/benchmarks.md), and prints the table.

--smoke checks the plumbing on a CPU: the reference there is the product itself with
`speed.mode: off` (seed_recipe.py needs CUDA and bitsandbytes), on synthetic:tiny.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cockpit_env  # noqa: E402

MICRO, ACCUM = 4, 4  # the article's micro-batch and accumulation: 16 samples per optimizer step
TARGETS = {"fixed": 2.0, "mixed": 4.0}  # issue 8: real tokens/s over the reference's
MEMORY_TARGET_GIB = 22.0
LOSS_RE = re.compile(r"'loss':\s*'?([0-9.eE+-]+)")


def draw_lengths_and_ids(mode: str, steps: int, seq: int, vocab: int, low: int = 32) -> list[list[int]]:
    """The reference's samples, drawn as seed_recipe.py draws them (torch generator, seed 0)."""
    import torch

    n = MICRO * ACCUM * (steps + 2)
    g = torch.Generator().manual_seed(0)
    lengths = [seq] * n if mode == "fixed" else torch.randint(low, seq + 1, (n,), generator=g).tolist()
    return [torch.randint(3, vocab, (k,), generator=g).tolist() for k in lengths]


def product_config(model: str, data: Path, steps: int, seq: int, smoke: bool, vram: float | None, off: bool):
    """The article's recipe as a cockpit config; what speed: auto chooses is left out."""
    method = (
        "method: lora\n"
        if smoke
        else "method: qlora\nquantization: {bits: 4, quant_type: nf4, double_quant: true}\n"
    )
    lines = [
        f'model: {{name: "{model}"}}',
        f'dataset: {{path: "{data}", format: tokens}}',
        method.rstrip(),
        "lora: {r: 64, alpha: 16, dropout: 0.1, target_modules: [q_proj, v_proj]}",
        "training:",
        f"  max_length: {seq}",
        f"  max_steps: {steps}",
        "  learning_rate: 2.0e-4",
        "  lr_scheduler: constant",
        "  warmup: 0.03",
        f"  optimizer: {'adamw_torch' if smoke else 'paged_adamw_32bit'}",
        "  max_grad_norm: 0.3",
        "  sampling: group_by_length",
        "  logging_steps: 1",
        "output: {save_steps: 100000, save_final: false}",
    ]
    if off:  # the smoke run's stand-in for the reference: the recipe as written, TRL's defaults
        lines.append("speed: {mode: off}")
    if vram:
        lines.append(f"emulate_vram_gib: {vram}")
    return "\n".join(lines) + "\n"


def run_seed(script: Path, arch: str, steps: int, lengths: str, work: Path, log) -> dict:
    out = work / f"seed-{time.time_ns()}.json"
    cmd = [sys.executable, str(script), "--arch", arch, "--steps", str(steps), "--lengths", lengths]
    cmd += ["--workdir", str(work / "seed"), "--out", str(out)]
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log.write(f"\n==== seed {lengths}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}\n")
    if proc.returncode != 0:
        raise SystemExit(f"seed_recipe.py exited {proc.returncode}; see the log")
    result = json.loads(out.read_text())
    losses = LOSS_RE.findall(proc.stdout + proc.stderr)
    return {
        "run": "seed_recipe.py",
        "lengths": lengths,
        "tokens_per_s": result["tokens_per_s"],
        "step_s_median": result["step_s_median"],
        "device_used_gib": result["device_used_gib"],
        "peak_allocated_gib": result["peak_allocated_gib"],
        "final_loss": float(losses[-1]) if losses else None,
        "wall_s": round(time.time() - started, 1),
        "versions": result.get("versions"),
    }


def run_product(config: Path, lengths: str, env: dict, smoke: bool, log, label: str, sets: list[str]) -> dict:
    peak = None
    if not smoke:
        from common import DevicePeak

        peak = DevicePeak()
    home = Path(env["COCKPIT_HOME"]) / "runs"
    before = set(home.iterdir()) if home.is_dir() else set()
    started = time.time()
    cmd = [sys.executable, "-m", "cockpit", "train", str(config), "--no-ui", "--skip-preflight"]
    cmd += ["--log-every", "0", *[arg for item in sets for arg in ("--set", item)]]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    wall = time.time() - started
    device = round(peak.stop(), 2) if peak else None
    log.write(f"\n==== {label} {lengths}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}\n")
    run_dirs = set(home.iterdir()) - before if home.is_dir() else set()
    if not run_dirs:
        raise SystemExit(
            f"cockpit train exited {proc.returncode} without a run ({label}, {lengths}); see the log"
        )
    text = (next(iter(run_dirs)) / "events.jsonl").read_text()
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    plan = next((e for e in events if e["type"] == "speed_plan"), {})
    plan = {k: v for k, v in plan.items() if k not in ("v", "type", "ts")}
    if proc.returncode != 0:  # kept as a result: an OOM under the emulated card is one
        error = next((e for e in reversed(events) if e["type"] == "error"), {})
        failed = f"{error.get('kind', f'exit {proc.returncode}')}: {error.get('message', '')}"
        return {
            "run": label,
            "lengths": lengths,
            "failed": failed[:300],
            "device_used_gib": device,
            "wall_s": round(wall, 1),
            "plan": plan,
        }
    logs = [e for e in events if e["type"] == "log" and e.get("loss") is not None]
    steady = [e for e in logs if e["step"] > 2] or logs
    return {
        "run": label,
        "lengths": lengths,
        "tokens_per_s": round(statistics.median(e["tokens_per_s"] for e in steady if e.get("tokens_per_s"))),
        "step_s_median": round(statistics.median(e["step_time_s"] for e in steady), 4),
        "device_used_gib": device,
        "peak_allocated_gib": round(max(e.get("mem_peak_bytes", 0) for e in logs) / 2**30, 2),
        "final_loss": logs[-1]["loss"],
        "steps": logs[-1]["step"],
        "tokens_seen": logs[-1]["tokens_seen"],
        "wall_s": round(wall, 1),
        "plan": plan,
    }


def summarize(runs: list[dict], reference: str) -> dict:
    out = {}
    for lengths in ("fixed", "mixed"):
        ref = [r["tokens_per_s"] for r in runs if r["lengths"] == lengths and r["run"] == reference]
        fast = [
            r for r in runs if r["lengths"] == lengths and r["run"] == "speed: auto" and "failed" not in r
        ]
        if not ref or not fast:
            continue
        ratio = statistics.mean(r["tokens_per_s"] for r in fast) / statistics.mean(ref)
        memory = [r["device_used_gib"] for r in fast if r["device_used_gib"] is not None]
        out[lengths] = {
            "ratio_tokens_per_s": round(ratio, 3),
            "target_ratio": TARGETS[lengths],
            "max_device_used_gib": max(memory) if memory else None,
            "meets_target": ratio >= TARGETS[lengths] and (not memory or max(memory) <= MEMORY_TARGET_GIB),
        }
    return out


def table(result: dict) -> str:
    rows = [
        "| run (in order) | lengths | tokens/s (real) | median step s | device used GiB | torch peak GiB "
        "| loss at end | plan (micro-batch x accum, checkpointed layers, packing) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        p = r.get("plan") or {}
        if "failed" in r:
            rows.append(
                f"| {r['run']} | {r['lengths']} | failed: {r['failed']} | | {r['device_used_gib']} | | | |"
            )
            continue
        plan = (
            f"{p['micro_batch_size']} x {p['gradient_accumulation_steps']}, {p['checkpoint_layers']}/"
            f"{p['num_layers']}, {p['packing']}"
            if p.get("mode") == "auto"
            else "as written"
        )
        loss = f"{r['final_loss']:.4f}" if r["final_loss"] is not None else "-"
        device = r["device_used_gib"] if r["device_used_gib"] is not None else "-"
        rows.append(
            f"| {r['run']} | {r['lengths']} | {r['tokens_per_s']} | {r['step_s_median']} | {device} | "
            f"{r['peak_allocated_gib']} | {loss} | {plan} |"
        )
    rows += [
        "",
        "| lengths | tokens/s ratio (means) | target | max device GiB (speed: auto) | met |",
        "|---|---|---|---|---|",
    ]
    for lengths, s in result["summary"].items():
        memory = s["max_device_used_gib"] if s["max_device_used_gib"] is not None else "-"
        rows.append(
            f"| {lengths} | {s['ratio_tokens_per_s']} | >= {s['target_ratio']} | {memory} (<= "
            f"{MEMORY_TARGET_GIB:g}) | {'yes' if s['meets_target'] else 'no'} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed-script", type=Path, help="seed_recipe.py (not with --smoke)")
    ap.add_argument("--out", type=Path, required=True, help="folder for fast_vs_seed.json, .md and .log")
    ap.add_argument("--arch", default="llama-2-7b")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--shapes", default="fixed,mixed", help="comma-separated: fixed, mixed")
    ap.add_argument("--emulate-vram-gib", type=float, default=MEMORY_TARGET_GIB)
    ap.add_argument(
        "--budget-s", type=float, default=420.0, help="run the mirrored half only while it ends before this"
    )
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "fast-vs-seed")
    ap.add_argument("--smoke", action="store_true", help="CPU plumbing check on synthetic:tiny")
    ap.add_argument(
        "--set", action="append", default=[], dest="sets", metavar="KEY=VALUE", help="for the product's runs"
    )
    a = ap.parse_args(argv)
    if not a.smoke and a.seed_script is None:
        ap.error("--seed-script is required (or --smoke)")
    shapes = [s for s in a.shapes.split(",") if s]
    a.out.mkdir(parents=True, exist_ok=True)
    a.workdir.mkdir(parents=True, exist_ok=True)
    began = time.time()
    seq, vocab = (128, 1022) if a.smoke else (512, 32000)
    steps = 3 if a.smoke else a.steps
    env = cockpit_env(a.workdir / "home")
    model = "synthetic:tiny" if a.smoke else str(a.workdir / "seed" / a.arch)  # the reference builds it
    reference = "speed: off" if a.smoke else "seed_recipe.py"
    configs = {}
    for shape in shapes:
        data = a.workdir / f"data-{shape}.jsonl"
        low = 16 if a.smoke else 32
        data.write_text(
            "".join(
                json.dumps({"input_ids": ids}) + "\n"
                for ids in draw_lengths_and_ids(shape, steps, seq, vocab, low)
            )
        )
        for off in (False, True) if a.smoke else (False,):
            path = a.workdir / f"cockpit-{shape}{'-off' if off else ''}.yaml"
            vram = None if a.smoke else a.emulate_vram_gib
            path.write_text(product_config(model, data, steps, seq, a.smoke, vram, off))
            configs[(shape, off)] = path
    first = [(which, shape) for shape in shapes for which in ("reference", "product")]
    order = first + list(reversed(first))  # A B A' B' B' A' B A
    runs, took = [], {}
    with open(a.out / "fast_vs_seed.log", "w") as log:
        for i, (which, shape) in enumerate(order):
            expected = took.get(which, 0.0)
            if i >= len(first) and time.time() - began + expected > a.budget_s:  # the mirrored half
                print(
                    f"skipping {which} {shape}: the budget of {a.budget_s:.0f} s would pass", file=sys.stderr
                )
                continue
            started = time.time()
            if which == "reference" and not a.smoke:
                r = run_seed(a.seed_script, a.arch, steps, shape, a.workdir, log)
            elif which == "reference":
                r = run_product(configs[(shape, True)], shape, env, True, log, reference, [])
            else:
                r = run_product(configs[(shape, False)], shape, env, a.smoke, log, "speed: auto", a.sets)
            took[which] = max(took.get(which, 0.0), time.time() - started)
            runs.append(r)
            print(
                f"{r['run']} {shape}: {r.get('tokens_per_s', r.get('failed'))} tok/s, "
                f"device {r['device_used_gib']} GiB, "
                f"{time.time() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    result = {
        "bench": "fast_vs_seed",
        "smoke": a.smoke,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": platform.node(),
        "python": platform.python_version(),
        "arch": "tiny" if a.smoke else a.arch,
        "steps": steps,
        "emulate_vram_gib": None if a.smoke else a.emulate_vram_gib,
        "order": [f"{r['run']} {r['lengths']}" for r in runs],
        "runs": runs,
        "summary": summarize(runs, reference),
        "wall_s": round(time.time() - began, 1),
    }
    if not a.smoke:
        import pynvml
        from common import nvml_index

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index())
        result.update(gpu=pynvml.nvmlDeviceGetName(handle), driver=pynvml.nvmlSystemGetDriverVersion())
        result["versions"] = next((r["versions"] for r in runs if r.get("versions")), None)
    (a.out / "fast_vs_seed.json").write_text(json.dumps(result, indent=1) + "\n")
    text = table(result)
    (a.out / "fast_vs_seed.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
