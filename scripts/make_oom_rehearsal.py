#!/usr/bin/env python3
"""Write the OOM rehearsal's recording (cockpit/data/rehearsal/oom/) from a record of
bench/oom_scenarios.py: a real out-of-memory failure on a GPU, and the relaunch that fixed it.

The record keeps, of the scenario's run, what the trainer said of itself (its libraries, the card
emulation), the OOM's allocator message and counters, the remedy `--on-oom auto` applied with its
prediction, and what the relaunch measured. This writes them as the run directory the trainer
wrote: `config.yaml` as the bench gave it (bench/oom_scenarios.py: config_for, with the
`--emulate-vram` card), `events.jsonl` from the start to the OOM (hello, data, the training's
start, the error) and `rehearsal.json` (where it comes from; the relaunch, as recorded). What
the record does not keep is not made up: no log events (no loss or speed before the OOM), and
the events' times are a second apart from the scenario's start (the record has the bench's start
and build time, no time between events). The data event is the bench's dataset, every row at
full length (bench/common.py: write_tokens).

  python scripts/make_oom_rehearsal.py bench/results/2026-12-02-oom-article13b-24gib-h200.json
"""

from __future__ import annotations

import argparse
import calendar
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import write_tokens  # noqa: E402
from oom_scenarios import SCENARIOS, config_for  # noqa: E402

from cockpit.config import load as config_load  # noqa: E402
from cockpit.config import schema as config_mod  # noqa: E402
from cockpit.models import shipped as shapes  # noqa: E402
from cockpit.run.oom_messages import parse_oom_message  # noqa: E402
from train_backend.errors import classify  # noqa: E402


class OutOfMemoryError(RuntimeError):
    """torch.cuda.OutOfMemoryError's name: the trainer's classifier goes by it (no torch here)."""


OUT = ROOT / "cockpit" / "data" / "rehearsal" / "oom"
DATA = "tokens.jsonl"
CAPABILITY = {"NVIDIA H200": "9.0", "NVIDIA H100 80GB HBM3": "9.0"}


def config_text(name: str, record: dict, data: Path) -> str:
    s = SCENARIOS[name]
    raw = config_for(s, data, record["steps"], Path("runs"))
    raw["emulate_vram_gib"] = float(s.card_gib)  # the bench's --emulate-vram
    raw["output"] = {"save_steps": raw["output"]["save_steps"], "save_final": raw["output"]["save_final"]}
    text = config_mod.dump_config(config_load.config_from_dict(raw))
    return text.replace(str(data), DATA)  # `rehearsal.prepare` points it at its copy


def write_data(name: str, record: dict, path: Path) -> None:
    """The bench's dataset, as bench/oom_scenarios.py wrote it (bench/common.py: write_tokens)."""
    s = SCENARIOS[name]
    rows = s.training["micro_batch_size"] * (2 * record["steps"] + 2)
    write_tokens(path, shapes.hf_config_dict(s.arch)["vocab_size"], s.training["max_length"], rows)


def events(name: str, header: dict, scenario: dict, run_id: str, t0: float) -> list[dict]:
    s = SCENARIOS[name]
    length, rows = s.training["max_length"], s.training["micro_batch_size"] * (2 * header["steps"] + 2)
    oom = scenario["oom"]
    device = {
        "kind": "cuda",
        "name": header["gpu"],
        "capability": CAPABILITY.get(header["gpu"]),
        "total_bytes": scenario["emulated_vram"]["device_total_bytes"],
    }
    info = parse_oom_message(oom["message"])
    assert (
        info is not None
        and {k: v for k, v in info.to_dict().items() if k.endswith("_bytes")} == oom["figures"]
    )
    said = classify(OutOfMemoryError(oom["message"]), "training")  # the trainer's own words for it
    out = [
        ("phase", {"phase": "starting", "message": "reading config"}),
        (
            "hello",
            {
                "pid": None,
                "run_id": run_id,
                "device": device,
                "precision": "bf16",
                "versions": scenario["versions"],
                "resume_from": None,
                "price_per_hour": None,
                "emulated_vram": scenario["emulated_vram"],
            },
        ),
        ("phase", {"phase": "preparing_data", "message": "loading the bench's tokens"}),
        (
            "data",
            {
                "samples": rows,
                "dropped": 0,
                "source_rows": rows,
                "format": "tokens",
                "column": "input_ids",
                "tokens_min": length,
                "tokens_mean": float(length),
                "tokens_p50": length,
                "tokens_p95": length,
                "tokens_p99": length,
                "tokens_max": length,
                "tokens_total": rows * length,
                "truncated": 0,
                "max_length": length,
                "tokens_over": {str(2**k): rows for k in range(6, 12) if 2**k < length},
            },
        ),
        ("phase", {"phase": "quantising", "message": f"loading weights of synthetic:{s.arch}"}),
        ("phase", {"phase": "training", "message": ""}),
        (
            "train_begin",
            {
                "total_steps": header["steps"],
                "start_step": 0,
                "epochs": 1.0,
                "micro_batch_size": s.training["micro_batch_size"],
                "gradient_accumulation_steps": 1,
                "max_length": length,
                "gradient_checkpointing": s.training["gradient_checkpointing"],
                "precision": "bf16",
                "optimizer": "paged_adamw_32bit",
            },
        ),
        (
            "error",
            {
                "kind": "oom",
                "message": said.message,
                "hint": said.hint,
                "phase": "training",
                "step": oom["step"],
                "oom": {
                    **info.to_dict(),
                    "exception": "OutOfMemoryError",
                    "injected": False,
                    "phase": oom["phase"],
                    "step": oom["step"],
                    "batch_rows": oom["batch"][0],
                    "seq_len": oom["batch"][1],
                    "memory": oom["memory"],
                },
                "traceback": None,
                "checkpoints": [],
            },
        ),
    ]
    return [{"v": 1, "type": kind, "ts": t0 + i, **fields} for i, (kind, fields) in enumerate(out)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("record", type=Path, help="a bench/results/*oom*.json written by bench/oom_scenarios.py")
    ap.add_argument("--scenario", default="article-13b-qlora-24gib")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    report = json.loads(a.record.read_text())
    header = report["header"]
    scenario = next(s for s in report["scenarios"] if s["name"] == a.scenario)
    started = calendar.timegm(time.strptime(header["date"], "%Y-%m-%d %H:%M:%S UTC"))
    t0 = started + sum(header.get("build_s", {}).values())  # the scenario starts after the build
    run_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime(t0)) + f"-{SCENARIOS[a.scenario].arch}"
    a.out.mkdir(parents=True, exist_ok=True)
    write_data(a.scenario, header, a.out / DATA)
    (a.out / "config.yaml").write_text(config_text(a.scenario, header, a.out / DATA), encoding="utf-8")
    lines = [json.dumps(e) for e in events(a.scenario, header, scenario, run_id, t0)]
    (a.out / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    remedy, relaunch, whole = scenario["remedy"], scenario["relaunch"], scenario.get("whole_card") or {}
    record = {
        "source": f"{a.record.relative_to(ROOT) if a.record.is_absolute() else a.record}, "
        f"scenario {a.scenario}: {header['gpu']}, {header['date']}",
        "scenario": a.scenario,
        "card_gib": scenario["card_gib"],
        "note": scenario["note"],
        "remedy": remedy,
        "relaunch": relaunch,
        "whole_card": whole,
        "made_by": "scripts/make_oom_rehearsal.py",
    }
    (a.out / "rehearsal.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(
        f"wrote {a.out}: {len(lines)} events, run {run_id}; predicted {remedy['predicted_peak_gib']} GiB"
        f" -> measured {relaunch['nvml_peak_gib']} GiB",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
