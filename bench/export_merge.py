#!/usr/bin/env python3
"""The export on a real run: `cockpit export --merge --gguf q8_0`, its logits check, the GGUF read back
with gguf.GGUFReader, and the merge's time and peak memory (for docs/finish.md).

The run is the article's QLoRA recipe on `synthetic:llama-2-7b` (512 tokens, micro-batch 4 x
accumulation 4, r=64 on q_proj/v_proj, paged AdamW), 60 steps with checkpoints every 30 and the
final adapter; or an existing run with --run. The export reloads the base in bf16 (not the 4-bit
copy the run trained on), merges, compares logits with base + adapter, writes safetensors shards
and the GGUF. Its figures come from the export's own `export_done` event (cockpit-export.json):
per-stage wall time, the process's peak RSS (getrusage) after each stage, peak GPU memory
(torch.cuda.max_memory_allocated).

  python bench/export_merge.py --out DIR [--steps 60] [--run RUN] [--home DIR] [--gguf q8_0] [--smoke]

`--smoke`: the shipped tiny model on the CPU, 4 steps (the tests run it). Writes
DIR/export_merge.json; exits 1 when the run or the export failed.
"""

from __future__ import annotations

import argparse
import json
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
    events_of,
    machine,
    prebuild,
    train_headless,
    versions,
    write_json,
    write_tokens,
)
from gpu_runs import write_config as run_config


def readback(path: Path) -> dict:
    """What gguf.GGUFReader finds in the file: tensors (count, names, shapes, types) and metadata."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    types: dict[str, int] = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    metadata = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        value = field.contents()
        if isinstance(value, list):
            value = f"[{len(value)} items]"
        elif isinstance(value, str) and len(value) > 120:
            value = value[:117] + "..."
        metadata[key] = value
    tensors = [
        {"name": t.name, "shape": [int(n) for n in t.shape], "type": t.tensor_type.name}
        for t in reader.tensors
    ]
    layers = {t["name"].split(".")[1] for t in tensors if t["name"].startswith("blk.")}
    return {
        "tensor_count": len(tensors),
        "blocks": len(layers),
        "types": types,
        "first_tensors": tensors[:12],
        "metadata": metadata,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--run", help="export this run instead of training one")
    p.add_argument("--gguf", choices=("f16", "q8_0"), default="q8_0")
    p.add_argument(
        "--home", type=Path, help="COCKPIT_HOME for the run and the export (default: a new temp dir)"
    )
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    shape = SMOKE if args.smoke else FULL
    steps = 4 if args.smoke else args.steps
    home = args.home or Path(tempfile.mkdtemp(prefix="cockpit-export-bench-"))
    home.mkdir(parents=True, exist_ok=True)
    env = bench_env(home)
    result: dict = {"bench": "export_merge", "shape": shape.name, "machine": machine()}
    if args.run:
        run = Path(args.run).resolve()
    else:
        prebuild(shape, env)
        data = write_tokens(
            home / "tokens.jsonl", shape, rows=steps * shape.micro_batch_size * shape.accumulation
        )
        config = run_config(
            home / "run.yaml",
            shape,
            data,
            steps,
            **{"output.save_steps": max(1, steps // 2), "output.save_final": True},
        )
        started = time.time()
        run, done = train_headless(config, env, timeout_s=1800)
        result["train_wall_s"] = round(time.time() - started, 1)
        if done.returncode != 0:
            result["error"] = done.stderr[-2000:]
            write_json(args.out, "export_merge.json", result)
            print(done.stderr[-2000:], file=sys.stderr)
            return 1
    result["run"] = str(run)
    result["versions"] = versions(events_of(run))
    target = home / f"export-{time.strftime('%Y%m%d-%H%M%S')}"
    command = [
        sys.executable,
        "-m",
        "cockpit",
        "export",
        str(run),
        "--merge",
        "--gguf",
        args.gguf,
        "--to",
        str(target),
    ]
    started = time.time()
    proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    result["export_command"] = " ".join(["cockpit", *command[3:]])
    result["export_wall_s"] = round(time.time() - started, 1)
    result["export_stdout"] = proc.stdout.splitlines()
    if proc.returncode != 0:
        result["error"] = proc.stderr[-3000:]
        write_json(args.out, "export_merge.json", result)
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    info = json.loads((target / "cockpit-export.json").read_text())
    result["export"] = {
        k: info.get(k)
        for k in (
            "check",
            "timings_s",
            "peak_rss_bytes",
            "stage_peak_rss_bytes",
            "peak_gpu_bytes",
            "params",
            "device",
            "dtype",
            "files",
            "gguf",
            "eos_tokens",
        )
    }
    gguf_file = target / info["gguf"]["file"]
    result["readback"] = readback(gguf_file)
    path = write_json(args.out, "export_merge.json", result)
    check = info["check"]
    print(
        f"check: {check['compared']}: relative {check['relative']:.2e} (tolerance {check['tolerance']:.0e}), "
        f"passed={check['passed']}"
    )
    print("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in info["timings_s"].items()))
    print(
        f"peak RSS {info['peak_rss_bytes'] / 2**30:.2f} GiB; peak GPU "
        f"{(info.get('peak_gpu_bytes') or 0) / 2**30:.2f} GiB; "
        f"GGUF {result['readback']['tensor_count']} tensors"
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
