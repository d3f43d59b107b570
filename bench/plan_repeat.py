#!/usr/bin/env python3
"""One config started three times on one machine: is the `speed: auto` plan the same each time?

Issue 44: the same config on the same H100 gave 8 x 2 with 11 of 32 layers recomputed, then 6 x 3
with none, as the host probe read 6.06 ms and then 4.27-4.37. Each start here is one
`python -m cockpit train CONFIG --no-ui --skip-preflight` of a few steps; its `speed_plan` event is
read from the run directory and the plans are compared on what they decide (common.PLAN_DECISIONS), with each
run's host probe (its reading, rounds' spread, the host scale and the scale the splits were ranked
at) and the predicted tokens/s beside them.

  python bench/plan_repeat.py --out OUT [--arch llama-2-7b] [--emulate-vram-gib 22] [--starts 3]
  python bench/plan_repeat.py --smoke --out OUT        # CPU, synthetic:tiny (the plumbing only)

The GPU run builds synthetic:ARCH in bf16 once (untimed), then trains QLoRA at 4 x 4 with
fixed 512-token samples on the emulated card. Writes OUT/plan_repeat.json and OUT/plan_repeat.md;
exits 1 when the plans differ.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from common import (  # noqa: E402
    PLAN_DECISIONS,
    build_synthetic,
    cockpit_env,
    read_events,
    run_cockpit,
    write_tokens,
)

# what each run read of its host, beside the decision
HOST_KEYS = ("host_probe_ms", "host_probe_spread", "host_scale", "host_rank_scale", "predicted_tokens_per_s")


def config_text(model: str, data: Path, seq: int, steps: int, smoke: bool, vram: float | None) -> str:
    method = "method: lora" if smoke else "method: qlora\nquantization: {bits: 4, quant_type: nf4}"
    lines = [
        f'model: {{name: "{model}"}}',
        f'dataset: {{path: "{data}", format: tokens}}',
        method,
        "lora: {r: 64, alpha: 16, dropout: 0.1, target_modules: [q_proj, v_proj]}",
        "training:",
        f"  max_length: {seq}",
        f"  max_steps: {steps}",
        "  micro_batch_size: 4",
        "  gradient_accumulation_steps: 4",
        "  logging_steps: 1",
        f"  optimizer: {'adamw_torch' if smoke else 'paged_adamw_32bit'}",
        "output: {save_steps: 100000, save_final: false}",
    ]
    if vram:
        lines.append(f"emulate_vram_gib: {vram:g}")
    return "\n".join(lines) + "\n"


def start_once(config: Path, env: dict, timeout_s: float) -> dict:
    """One start: its plan's decision and host figures, or why it has none."""
    runs = Path(env["COCKPIT_HOME"]) / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    started = time.time()
    code, out = run_cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env, timeout_s)
    made = sorted(set(runs.iterdir()) - before) if runs.is_dir() else []
    result: dict = {"returncode": code, "wall_s": round(time.time() - started, 1)}
    plan = next((e for e in read_events(made[-1]) if e.get("type") == "speed_plan"), None) if made else None
    if plan is None:
        return result | {"failure": out[-2000:]}
    return result | {
        "plan": {k: plan.get(k) for k in PLAN_DECISIONS},
        "host": {k: plan.get(k) for k in HOST_KEYS},
    }


def compare(starts: list[dict]) -> dict:
    """Whether every start planned alike, and per key the values seen where they did not."""
    plans = [s["plan"] for s in starts if "plan" in s]
    differ = {
        k: sorted({json.dumps(p[k]) for p in plans})
        for k in PLAN_DECISIONS
        if len({json.dumps(p[k]) for p in plans}) > 1
    }
    return {
        "planned": len(plans),
        "starts": len(starts),
        "same": len(plans) == len(starts) and not differ,
        "differ": differ,
    }


def table(starts: list[dict]) -> str:
    head = (
        "| start | micro-batch x accum | layers recomputed | probe ms (spread) | ranked at "
        "| predicted tokens/s |"
    )
    rows = [head, "|---|---|---|---|---|---|"]
    for i, s in enumerate(starts, 1):
        if "plan" not in s:
            rows.append(f"| {i} | no plan (exit {s['returncode']}) | | | | |")
            continue
        p, h = s["plan"], s["host"]
        probe = (
            "-"
            if h["host_probe_ms"] is None
            else f"{h['host_probe_ms']:.2f} (x{h['host_probe_spread'] or 1:.2f})"
        )
        rows.append(
            f"| {i} | {p['micro_batch_size']} x {p['gradient_accumulation_steps']} | {p['checkpoint_layers']}"
            f"{' (inputs on host)' if p['checkpoint_offload'] else ''} | {probe} | x{h['host_rank_scale']} | "
            f"{h['predicted_tokens_per_s'] or '-'} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--arch", default="llama-2-7b")
    ap.add_argument("--emulate-vram-gib", type=float, default=22.0)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--workdir", type=Path, help="model cache and data (default: a temporary folder)")
    ap.add_argument("--smoke", action="store_true", help="CPU plumbing check on synthetic:tiny")
    a = ap.parse_args(argv)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="plan-repeat-"))
    work.mkdir(parents=True, exist_ok=True)
    env = cockpit_env(work / "home", work / "cache")
    seq, vocab = (64, 1024) if a.smoke else (512, 32000)
    steps = 1 if a.smoke else a.steps
    data = work / f"tokens-{seq}.jsonl"
    write_tokens(data, vocab, seq, 16 * (steps + 2))
    model = "synthetic:tiny" if a.smoke else str(build_synthetic(a.arch, work / "cache", env))
    config = work / "config.yaml"
    vram = None if a.smoke else a.emulate_vram_gib
    config.write_text(config_text(model, data, seq, steps, a.smoke, vram))
    starts = []
    for i in range(a.starts):
        starts.append(start_once(config, env, a.timeout_s))
        print(f"start {i + 1}: {json.dumps(starts[-1].get('plan') or starts[-1].get('failure', '')[-300:])}")
    verdict = compare(starts)
    record = {
        "bench": "plan_repeat",
        "smoke": a.smoke,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": platform.node(),
        "arch": "tiny" if a.smoke else a.arch,
        "emulate_vram_gib": vram,
        "config": config.read_text(),
        "starts": starts,
        "compare": verdict,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "plan_repeat.json").write_text(json.dumps(record, indent=1) + "\n")
    (a.out / "plan_repeat.md").write_text(table(starts))
    print(table(starts))
    print("the same plan every start" if verdict["same"] else f"the plans differ: {verdict['differ']}")
    return 0 if verdict["same"] else 1


if __name__ == "__main__":
    sys.exit(main())
