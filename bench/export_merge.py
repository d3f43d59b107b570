#!/usr/bin/env python3
"""The export on a real run: `cockpit export --merge --gguf TYPE` for each TYPE asked, its logits check,
the GGUF read back into the merged model (the export's own check) and with gguf.GGUFReader, the file's
size, and the merge's time and peak memory (for docs/finish.md).

The run is the article's QLoRA recipe on `synthetic:llama-2-7b` (512 tokens, micro-batch 4 x
accumulation 4, r=64 on q_proj/v_proj, paged AdamW), 60 steps with checkpoints every 30 and the
final adapter; or an existing run with --run. The export reloads the base in bf16 (not the 4-bit
copy the run trained on), merges, compares logits with base + adapter, writes safetensors shards
and the GGUF. Its figures come from the export's own `export_done` event (cockpit-export.json):
per-stage wall time, the process's peak RSS (getrusage) after each stage, peak GPU memory
(torch.cuda.max_memory_allocated).

  python bench/export_merge.py --out DIR [--steps 60] [--run RUN] [--home DIR]
      [--gguf q8_0 [q4_0 q4_k_m ...]] [--keep] [--smoke]

`--smoke`: the shipped tiny model on the CPU, 4 steps (the tests run it). Writes
DIR/export_merge.json; exits 1 when the run or the export failed.
"""

from __future__ import annotations

import argparse
import json
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
    events_of,
    machine,
    prebuild,
    train_headless,
    versions,
    write_json,
    write_tokens,
)
from gpu_runs import write_config as run_config

from cockpit.config.schema import GGUF_TYPES

EXPORT_KEYS = (
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
    "kquant",
    "readback",
    "eos_tokens",
)


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


# the run's rows draw from 50 of the vocabulary's tokens: the adapter learns to favour them, a change of
# the logits the merge check can tell from bf16's rounding. (Ids drawn from the whole vocabulary leave a
# random-weight 7B near its uniform guess: after 40 steps its adapter moved the logits by 4.9e-2 of their
# RMS, under twice the merge's rounding, and the check failed as it should: H100, 2026-12-07.)
NARROW_IDS = 50


def export_one(run: Path, home: Path, kind: str, env: dict, keep: bool, log_dir: Path) -> dict:
    """`cockpit export RUN --merge --gguf KIND`: its export_done figures, its read-back (the export's own
    and gguf.GGUFReader's view of the file) and the file's size. The export folder is removed after
    (a 7B's shards and GGUF fill a rented disk) unless `keep`."""
    target = home / f"export-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    command = [
        sys.executable,
        "-m",
        "cockpit",
        "export",
        str(run),
        "--merge",
        "--gguf",
        kind,
        "--to",
        str(target),
    ]
    entry: dict = {"type": kind, "command": " ".join(["cockpit", *command[3:]])}
    started = time.time()
    log = log_dir / f"export-{kind}.log"  # written as it goes: a time limit that kills the bench keeps it
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as sink:
        proc = subprocess.run(
            command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=sink, text=True, timeout=3600
        )
    entry["wall_s"] = round(time.time() - started, 1)
    entry["stdout"] = proc.stdout.splitlines()
    if proc.returncode != 0:
        entry["error"] = log.read_text()[-3000:]
        return entry
    info = json.loads((target / "cockpit-export.json").read_text())
    entry["export"] = {k: info.get(k) for k in EXPORT_KEYS}
    made = info.get("kquant") or {}
    gguf_file = target / (made["file"] if made.get("done") else info["gguf"]["file"])
    entry["gguf_file"] = gguf_file.name
    entry["gguf_bytes"] = gguf_file.stat().st_size
    entry["shards_bytes"] = sum(f.stat().st_size for f in target.glob("*.safetensors"))
    entry["readback"] = readback(gguf_file)
    if not keep:
        shutil.rmtree(target, ignore_errors=True)
    return entry


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--run", help="export this run instead of training one")
    p.add_argument(
        "--gguf",
        nargs="+",
        choices=GGUF_TYPES,
        default=["q8_0"],
        help="one export each, in turn (K-quants need llama-quantize on PATH)",
    )
    p.add_argument("--keep", action="store_true", help="keep each export folder (default: removed after)")
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
            home / "tokens.jsonl",
            shape,
            rows=steps * shape.micro_batch_size * shape.accumulation,
            ids=NARROW_IDS,
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
    result["exports"] = []
    failed = False
    write_json(args.out, "export_merge.json", result)  # what a device call's time limit cuts short keeps this
    print(f"trained {run} in {result.get('train_wall_s', 0)} s", flush=True)
    for kind in args.gguf:
        entry = export_one(run, home, kind, env, keep=args.keep, log_dir=args.out)
        result["exports"].append(entry)
        write_json(args.out, "export_merge.json", result)
        if "error" in entry:
            failed = True
            print(entry["error"], file=sys.stderr)
            break
        info = entry["export"]
        check, back = info["check"], info.get("readback") or {}
        print(
            f"{kind}: merge check {check['compared']}: relative {check['relative']:.2e} (tolerance "
            f"{check['tolerance']:.0e}), passed={check['passed']}; read back: gap {back.get('gap')} "
            f"(tolerance {back.get('tolerance')}), top-1 same {back.get('top1_same')}/{back.get('inputs')}, "
            f"weights at worst {back.get('weights_error')} ({back.get('weights_tensor')}, "
            f"{back.get('weights_type')}), "
            f"passed={back.get('passed')}; file {entry['gguf_bytes'] / 2**30:.2f} GiB"
        )
        print("  timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in info["timings_s"].items()), flush=True)
        print(
            f"  peak RSS {info['peak_rss_bytes'] / 2**30:.2f} GiB; peak GPU "
            f"{(info.get('peak_gpu_bytes') or 0) / 2**30:.2f} GiB; "
            f"GGUF {entry['readback']['tensor_count']} tensors {entry['readback']['types']}",
            flush=True,
        )
    if result["exports"] and "error" not in result["exports"][0]:  # the first type, as before
        result["export"] = result["exports"][0]["export"]
        result["readback"] = result["exports"][0]["readback"]
        result["export_command"] = result["exports"][0]["command"]
    path = write_json(args.out, "export_merge.json", result)
    print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
