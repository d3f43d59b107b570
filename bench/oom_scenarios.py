#!/usr/bin/env python3
"""Real OOMs on emulated smaller cards, caught and fixed by `--on-oom auto`, on one GPU (an H100 or H200).

Each scenario is one `python -m cockpit train CONFIG --no-ui --on-oom auto --emulate-vram N`:
the trainer runs out of memory on the emulated card (24, 16 or 12 GiB), the OOM wizard's
headless path picks the best remedy that keeps the results, records it in the run's history
and relaunches; the relaunch must train to the end on its first try. Synthetic weights, every
sample at full length (no padding: the worst case), `speed: off` (the settings as written, as
the memory model was calibrated), a few steps.

Recorded per scenario: the OOM (kind, phase, step, allocator figures), the remedy chosen and
its prediction (peak, fit, relative speed), the relaunch's measured peak (NVML 'used' above
the idle baseline, sampled every 10 ms from outside: what nvidia-smi shows, CUDA context
included; and torch's max allocated/reserved) and its tokens/s. Then, while the time budget
lasts, each failed config once more on the whole card (no emulation, where it fits): its
measured peak against the memory model's prediction, and its tokens/s, the "before" of the
remedy's speed cost.

  python bench/oom_scenarios.py --out DIR [--only NAME ...] [--budget-s 450] [--steps 6]
  python bench/oom_scenarios.py --render DIR/oom_scenarios.json     # the table for docs/oom.md

Writes DIR/oom_scenarios.json and DIR/oom_scenarios.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from cockpit.fmt import GIB

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from common import (  # noqa: E402
    DevicePeak,
    build_synthetic,
    cockpit_env,
    nvml_index,
    read_events,
    run_cockpit,
    write_tokens,
)

QV = ["q_proj", "v_proj"]


@dataclass(frozen=True)
class Scenario:
    arch: str
    card_gib: float
    method: str
    training: dict
    lora: dict = field(default_factory=lambda: {"r": 64, "alpha": 16, "target_modules": QV})
    note: str = ""
    objective: str = "sft"  # dpo, kto, orpo: plain-text pairs (bench/preference_memory.py's rows)


# ordered by value: the time budget cuts the tail
SCENARIOS: dict[str, Scenario] = {
    "article-13b-qlora-24gib": Scenario(
        "llama-2-13b",
        24,
        "qlora",
        {"max_length": 512, "micro_batch_size": 4, "gradient_checkpointing": False},
        note="the source article's 13B recipe without checkpointing (33 GiB through a plain HF Trainer)",
    ),
    "vocab152k-lora-8x2048-24gib": Scenario(
        "qwen2.5-1.5b",
        24,
        "lora",
        {"max_length": 2048, "micro_batch_size": 8, "gradient_checkpointing": False},
        lora={"r": 16, "alpha": 32, "target_modules": QV},
        note="a large vocabulary (152k) and 8 x 2048 tokens a micro-batch: 40.4 GiB on the whole H200",
    ),
    "7b-lora16-mb4-20gib": Scenario(
        "llama-2-7b",
        20,
        "lora",
        {"max_length": 512, "micro_batch_size": 4, "gradient_checkpointing": False},
        note="LoRA on a 16-bit base (S2's settings through the product: ~25 GiB on the whole H200)",
    ),
    "7b-qlora-mb8-12gib": Scenario(
        "llama-2-7b", 12, "qlora", {"max_length": 512, "micro_batch_size": 8, "gradient_checkpointing": False}
    ),
    "qwen1.5b-qlora-mb16-12gib": Scenario(
        "qwen2.5-1.5b",
        12,
        "qlora",
        {"max_length": 512, "micro_batch_size": 16, "gradient_checkpointing": False},
    ),
    "7b-qlora-len2048-16gib": Scenario(
        "llama-2-7b",
        16,
        "qlora",
        {"max_length": 2048, "micro_batch_size": 2, "gradient_checkpointing": False},
    ),
    "dpo-7b-qlora-2048-24gib": Scenario(
        "llama-2-7b",
        24,
        "qlora",
        {"max_length": 2048, "micro_batch_size": 2, "gradient_checkpointing": False},
        lora={"r": 16, "alpha": 32, "target_modules": "all-linear"},
        note="DPO (issue 40): 2 pairs of 2048 tokens a micro-batch, reference as the adapter turned off",
        objective="dpo",
    ),
    "13b-qlora-len1024-16gib": Scenario(
        "llama-2-13b",
        16,
        "qlora",
        {"max_length": 1024, "micro_batch_size": 2, "gradient_checkpointing": False},
    ),
}


def config_for(s: Scenario, data: Path, steps: int, runs: Path) -> dict:
    training = {
        "gradient_accumulation_steps": 1,
        "max_steps": steps,
        "learning_rate": 2e-4,
        "lr_scheduler": "constant",
        "precision": "bf16",
        "logging_steps": 1,
        "optimizer": "paged_adamw_32bit" if s.method == "qlora" else "adamw_torch",
        "dataloader_num_workers": 0,
        "packing": False,
        **s.training,
    }
    if s.objective != "sft":  # TRL packs no pairs
        training.pop("packing")
    return {
        "model": {"name": f"synthetic:{s.arch}"},
        "dataset": {"path": str(data), "format": "tokens"} if s.objective == "sft" else {"path": str(data)},
        "objective": s.objective,
        "method": s.method,
        "lora": {**s.lora, "dropout": 0.1},
        "training": training,
        "speed": {"mode": "off"},
        "output": {"dir": str(runs), "save_steps": 1000, "save_final": False},
    }


def held_to_emulated_size(nvml_max_bytes: int, card_gib: float) -> dict:
    """The most NVML showed (bytes above idle) against the emulated size (GiB = 2^30 bytes, as
    `--emulate-vram NGiB` gives the trainer): the verdict in bytes, the GiB figure for reading."""
    limit = int(card_gib * GIB)
    return {
        "nvml_max_bytes": nvml_max_bytes,
        "limit_bytes": limit,
        "nvml_max_gib": round(nvml_max_bytes / GIB, 3),
        "held_to_emulated_size": nvml_max_bytes <= limit,
    }


def trained(logs: list[dict]) -> dict:
    """Steady figures of a trainer's log events (steps after the first two)."""
    steady = [e for e in logs if e["step"] > 2] or logs[-1:]
    rates = [e["tokens_per_s"] for e in steady if e.get("tokens_per_s")]
    return {
        "steps": [e["step"] for e in logs],
        "tokens_per_s": round(statistics.median(rates)) if rates else None,
        "torch_max_allocated_gib": round(max(e.get("mem_peak_bytes", 0) for e in logs) / GIB, 2)
        if logs
        else None,
        "torch_max_reserved_gib": round(max(e.get("mem_reserved_bytes", 0) for e in logs) / GIB, 2)
        if logs
        else None,
    }


def dataset(s: Scenario, workdir: Path, steps: int) -> Path:
    from cockpit.models import shipped as shapes

    length, mb = s.training["max_length"], s.training["micro_batch_size"]
    if s.objective != "sft":
        from preference_memory import write_rows

        path = workdir / f"rows-{s.objective}-{length}-{mb}.jsonl"
        write_rows(path, s.objective, length, mb * (2 * steps + 2))
        return path
    path = workdir / f"tokens-{s.arch}-{length}-{mb}.jsonl"
    if not path.exists():
        write_tokens(path, shapes.hf_config_dict(s.arch)["vocab_size"], length, mb * (2 * steps + 2))
    return path


def run_scenario(name: str, s: Scenario, workdir: Path, env: dict, steps: int, timeout_s: float) -> dict:
    import yaml

    folder = workdir / name
    folder.mkdir(parents=True, exist_ok=True)
    runs = folder / "runs"
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(config_for(s, dataset(s, workdir, steps), steps, runs)))
    peak = DevicePeak()
    started = time.time()
    args = ["train", str(config), "--no-ui", "--skip-preflight", "--on-oom", "auto"]
    returncode, out = run_cockpit([*args, "--emulate-vram", f"{s.card_gib:g}GiB"], env, timeout_s)
    ended = time.time()
    peak.stop()
    (folder / "cockpit.log").write_text(out)
    result: dict = {"name": name, "arch": s.arch, "card_gib": s.card_gib, "method": s.method}
    # what nvidia-smi showed of the emulated process over the whole call (first run, OOM, relaunch):
    # the emulated card must hold it to its size. Both in bytes (NVML 'used' above idle against
    # card_gib x 2^30, the limit the trainer is given): no rounding decides the verdict
    result.update(held_to_emulated_size(peak.peak_bytes(), s.card_gib))
    result.update(settings=s.training, note=s.note, returncode=returncode, wall_s=round(ended - started, 1))
    run_dirs = sorted(runs.iterdir()) if runs.is_dir() else []
    if not run_dirs:
        result["failure"] = out[-3000:]
        return result
    events = read_events(run_dirs[-1])
    hellos = [e for e in events if e["type"] == "hello"]
    error = next((e for e in events if e["type"] == "error"), None)
    change = next((e for e in events if e["type"] == "config_change"), None)
    done = next((e for e in events if e["type"] == "done"), None)
    result["versions"] = hellos[0].get("versions") if hellos else None
    result["emulated_vram"] = hellos[0].get("emulated_vram") if hellos else None
    if error is not None:
        oom = error.get("oom") or {}
        result["oom"] = {
            "caught": error.get("kind") == "oom",
            "kind": oom.get("kind") or error.get("kind"),
            "phase": oom.get("phase") or error.get("phase"),
            "step": oom.get("step") or error.get("step"),
            "batch": [oom.get("batch_rows"), oom.get("seq_len")],
            "message": str(error.get("message"))[:400],
            "figures": {k: v for k, v in oom.items() if k.endswith("_bytes")},
            "memory": oom.get("memory"),
            # the cap as it stood at the OOM (what the last recap saw outside the allocator)
            "emulated_vram": oom.get("emulated_vram"),
            "nvml_peak_gib_until_oom": round(peak.peak_gib(end=error["ts"]), 2),
        }
    else:  # it fitted after all: the prediction said so or not, this is worth knowing
        result["oom"] = {"caught": False, "nvml_peak_gib": round(peak.peak_gib(), 2)}
        result["first_run"] = trained([e for e in events if e["type"] == "log"])
    if change is not None:
        result["remedy"] = {
            "keys": change.get("remedy"),
            "title": change.get("title"),
            "changes": change.get("changes"),
            "predicted_peak_gib": round(change["predicted_peak_bytes"] / GIB, 2)
            if change.get("predicted_peak_bytes") is not None
            else None,
            "verdict": change.get("verdict"),
            "predicted_speed": change.get("speed"),
        }
        after = [e for e in events if e["ts"] >= change["ts"]]
        logs = [e for e in after if e["type"] == "log"]
        result["relaunch"] = {
            "trainers": len(hellos),
            "finished": bool(done and done.get("status") == "finished" and done["ts"] >= change["ts"]),
            "errors_after": [e.get("kind") for e in after if e["type"] == "error"],
            "nvml_peak_gib": round(peak.peak_gib(start=change["ts"]), 2),
            **trained(logs),
        }
    elif error is not None:
        result["relaunch"] = {"finished": False, "why": out[-1500:]}
    return result


def baseline(name: str, s: Scenario, workdir: Path, env: dict, steps: int, timeout_s: float) -> dict:
    """The failed config on the whole card (no emulation): measured peak and tokens/s "before"."""
    import yaml

    from cockpit.config.load import config_from_dict
    from cockpit.models.memory import estimate_memory, workload_from_config
    from cockpit.models.shape import load_shape

    folder = workdir / f"{name}-whole-card"
    folder.mkdir(parents=True, exist_ok=True)
    runs = folder / "runs"
    settings = config_for(s, dataset(s, workdir, steps), steps, runs)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(settings))
    predicted = estimate_memory(
        workload_from_config(config_from_dict(settings), load_shape(f"synthetic:{s.arch}"))
    )
    peak = DevicePeak()
    returncode, out = run_cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env, timeout_s)
    peak.stop()
    (folder / "cockpit.log").write_text(out)
    run_dirs = sorted(runs.iterdir()) if runs.is_dir() else []
    events = read_events(run_dirs[-1]) if run_dirs else []
    begin = next((e for e in events if e["type"] == "train_begin"), None)
    return {
        "returncode": returncode,
        "predicted_peak_gib": round(predicted.peak_gib, 2),
        "nvml_peak_gib": round(peak.peak_gib(start=begin["ts"]) if begin else peak.peak_gib(), 2),
        **trained([e for e in events if e["type"] == "log"]),
    }


def build(archs: list[str], workdir: Path, env: dict) -> dict:
    took = {}
    for arch in archs:
        started = time.time()
        build_synthetic(arch, workdir / "cache", env)
        took[arch] = round(time.time() - started, 1)
        print(f"built {arch} in {took[arch]} s", file=sys.stderr, flush=True)
    return took


# ---------------------------------------------------------------- the table for docs/oom.md


def _cell(value, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def markdown(report: dict) -> str:
    head = report.get("header", {})
    lines = [
        f"Measured on {head.get('gpu', '?')} (driver {head.get('driver', '?')}), {head.get('date', '?')}; "
        f"{head.get('steps', '?')} steps per run, full-length samples, emulated cards "
        "(`--emulate-vram`). Peaks are NVML 'used' above idle (what nvidia-smi shows).",
        "",
        "| scenario | card | OOM caught (phase, step) | remedy chosen by `--on-oom auto` | predicted peak | "
        "measured peak | trained to the end | tokens/s before -> after (predicted ratio) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report.get("scenarios", []):
        oom, remedy, after = r.get("oom") or {}, r.get("remedy") or {}, r.get("relaunch") or {}
        if not oom.get("caught") and r.get("first_run"):  # no OOM: the first run is the whole story
            after = {**r["first_run"], "finished": r.get("returncode") == 0}
        before = r.get("whole_card") or {}
        caught = (
            f"yes ({oom.get('kind')}, {str(oom.get('phase')).replace('_', ' ')}, step {oom.get('step')})"
            if oom.get("caught")
            else f"no: fitted (peak {_cell(oom.get('nvml_peak_gib'), '{:.2f} GiB')})"
        )
        ratio = _cell(remedy.get("predicted_speed"), "{:.2f}x")
        speed = f"{_cell(before.get('tokens_per_s'))} -> {_cell(after.get('tokens_per_s'))} ({ratio})"
        lines.append(
            f"| {r['name']} | {r['card_gib']:g} GiB | {caught} | {remedy.get('title') or '-'} | "
            f"{_cell(remedy.get('predicted_peak_gib'), '{:.2f} GiB')} ({remedy.get('verdict') or '-'}) | "
            f"{_cell(after.get('nvml_peak_gib'), '{:.2f} GiB')} | "
            f"{'yes' if after.get('finished') else 'NO'} ({len(after.get('steps') or [])} steps) | {speed} |"
        )
    held = [r for r in report.get("scenarios", []) if "nvml_max_gib" in r]
    if held:
        lines += [
            "",
            "Most nvidia-smi showed of the emulated process over each whole call (first run, OOM, "
            "relaunch): "
            + "; ".join(
                f"{r['name']} {r['nvml_max_gib']:.3f} of {r['card_gib']:g} GiB"
                + ("" if r.get("held_to_emulated_size") else " (OVER)")
                for r in held
            )
            + ".",
        ]
    wholes = [r for r in report.get("scenarios", []) if r.get("whole_card")]
    if wholes:
        lines += [
            "",
            f"The failed configs on the whole card ({head.get('gpu', '?')}, no emulation), against the "
            "memory model:",
            "",
            "| scenario | predicted peak | measured peak | error |",
            "|---|---|---|---|",
        ]
        for r in wholes:
            w = r["whole_card"]
            error = (
                f"{(w['predicted_peak_gib'] - w['nvml_peak_gib']) / w['nvml_peak_gib']:+.1%}"
                if w.get("nvml_peak_gib")
                else "-"
            )
            measured = _cell(w.get("nvml_peak_gib"), "{:.2f} GiB")
            lines.append(f"| {r['name']} | {w['predicted_peak_gib']:.2f} GiB | {measured} | {error} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for oom_scenarios.json and oom_scenarios.md")
    ap.add_argument("--only", nargs="*", choices=list(SCENARIOS))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument(
        "--budget-s", type=float, default=420, help="seconds for everything; nothing starts with < 60 s left"
    )
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "oom-scenarios")
    ap.add_argument("--render", type=Path, metavar="JSON", help="print the markdown table of a result file")
    a = ap.parse_args()
    if a.render:
        print(markdown(json.loads(a.render.read_text())), end="")
        return
    if a.out is None:
        ap.error("--out is required (or --render JSON)")
    t0 = time.time()
    a.out.mkdir(parents=True, exist_ok=True)
    a.workdir.mkdir(parents=True, exist_ok=True)
    env = cockpit_env(a.workdir / "home", a.workdir / "cache", HF_HUB_OFFLINE="1")
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index())
    names = a.only or list(SCENARIOS)
    report = {
        "header": {
            "bench": "oom_scenarios",
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "gpu": pynvml.nvmlDeviceGetName(handle),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "python": platform.python_version(),
            "steps": a.steps,
        },
        "scenarios": [],
    }
    out_json = a.out / "oom_scenarios.json"

    def save() -> None:
        out_json.write_text(json.dumps(report, indent=1))
        (a.out / "oom_scenarios.md").write_text(markdown(report))

    report["header"]["build_s"] = build(list(dict.fromkeys(SCENARIOS[n].arch for n in names)), a.workdir, env)
    for name in names:
        left = a.budget_s - (time.time() - t0)
        if left < 60:
            print(f"budget spent: skipping {name}", file=sys.stderr)
            report.setdefault("skipped", []).append(name)
            continue
        result = run_scenario(name, SCENARIOS[name], a.workdir, env, a.steps, min(300, left + 30))
        report["scenarios"].append(result)
        save()
        print(
            f"{name}: {json.dumps({k: result.get(k) for k in ('oom', 'remedy', 'relaunch')})[:600]}",
            file=sys.stderr,
        )
    for result in report["scenarios"]:  # the "before", while time is left
        left = a.budget_s - (time.time() - t0)
        if left < 60:
            break
        result["whole_card"] = baseline(
            result["name"], SCENARIOS[result["name"]], a.workdir, env, a.steps, left + 30
        )
        save()
    held = [r.get("held_to_emulated_size") for r in report["scenarios"]]
    report["header"]["every_scenario_held_to_emulated_size"] = bool(held) and all(held)
    report["header"]["wall_s"] = round(time.time() - t0, 1)
    save()
    print(markdown(report))


if __name__ == "__main__":
    main()
