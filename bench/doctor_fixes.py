#!/usr/bin/env python3
"""Does each doctor rule's fix help? Every case runs before and after its fix, in one call, on a GPU.

Each case is a real `cockpit train --no-ui` run. The doctor's verdict is the product's own, twice:
the live doctor's `--no-ui` lines, and the doctor over the run's recorded telemetry with its events
as a replay plays them (bench/gpu_runs.doctor_over_recording); the two must agree. Then the fix the
finding names is applied and the run repeated; tokens/s before and after (the steady steps' median)
and the gain the finding (or the speed model) predicted are reported side by side. Cases, in order
of value (`--budget-s` skips those that no longer fit, saying so):

- demo-packed (gpu_underfed, low_mfu): the shipped demo data packed into rows of 512 on the
  article's 7B QLoRA at micro-batch 4 x 4 with checkpointing, pinned as written (speed: off): the
  issue's case. The fix: the split the speed plan's `auto_split` names. The old advice (raise
  dataloader_num_workers) is run too, as "wrong fix", to show it does not help;
- slow-loader (input_bound): the test aid `collate_cpu_ms` burns CPU in the collator of every
  micro-batch with no loader workers (1B LoRA). The fix: the workers the finding names;
- cpu-bound (cpu_bound): micro-batches large enough for the card (16 x 512 tokens, 1B LoRA),
  logging every step with the test aid `log_cpu_ms`, a slow logging callback in the loop's
  thread. The fix the finding names: log less often (training.logging_steps 10);
- fp32 (fp32_on_bf16_card): the 1B LoRA in fp32; the fix: precision bf16;
- foreign (foreign_process): another process running matmuls on the same GPU while the 1B LoRA
  trains; the fix: it is gone. The recording keeps no GPU process lists, so only the live doctor
  can name this one.

fp32 and foreign share their "after" run (the 1B LoRA in bf16, alone on the GPU).

  python bench/doctor_fixes.py --out DIR [--budget-s 300] [--only CASE ...] [--smoke]

`--smoke` runs the shipped tiny model on the CPU (the suite runs it): no GPU, so no GPU-side
verdict; it checks that every case runs before and after and that the report is written.
Writes DIR/doctor_fixes.json (after every case: a cut-off run keeps what it finished).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_runs import (
    FULL,
    ROOT,
    SMALL,
    SMOKE,
    Shape,
    bench_env,
    doctor_lines,
    doctor_over_recording,
    ending,
    events_of,
    machine,
    prebuild,
    train_headless,
    versions,
    write_config,
    write_json,
    write_tokens,
)

# gpu_runs has put this checkout on sys.path
from cockpit.doctor.window import MIN_HELD_S
from train_backend import test_aids

# the live doctor's lines name a finding by its title (cockpit.live.watch.finding_line): the rule each
# title begins with (cockpit/doctor/rules.py, step_rules.py, mfu_rule.py)
TITLE_RULES = (
    ("Input-bound", "input_bound"),
    ("GPU underfed", "gpu_underfed"),
    ("CPU-bound outside", "cpu_bound"),
    ("Training in fp32", "fp32_on_bf16_card"),
    ("Another process", "foreign_process"),
    ("The card works at", "low_mfu"),
    ("Disk-bound", "slow_disk"),
    ("Memory pressure", "memory_pressure"),
    ("Throttled", "throttling"),
    ("Idle GPU", "idle_billed"),
    ("No GPU telemetry", "no_gpu"),
    ("Training without a GPU", "no_gpu"),
)

# seconds on one H200 each case takes (its runs, not the model builds): what --budget-s plans with.
# The 7B runs from the 2026-12-02 run (~25 s of loading and ~5 s of ending around the steps); the
# 1B runs estimated (~15 s around the steps, the speed model's step times): not yet measured
CASE_S = {"demo-packed": 130, "slow-loader": 55, "cpu-bound": 55, "fp32": 25, "foreign": 40}
BUILD_S = {
    "synthetic:llama-2-7b/bf16": 35,
    "synthetic:llama-3.2-1b/bf16": 20,
    "synthetic:llama-3.2-1b/fp32": 20,
}
BASELINE_S = 15  # the 1B LoRA alone, the after of fp32 and foreign
CASES = tuple(CASE_S)

# the GPU burner of the foreign case: bf16 matmuls back to back (on the CPU, small ones, gently)
BURNER = """
import sys, time, torch
gpu = torch.cuda.is_available()
x = torch.randn((8192, 8192) if gpu else (256, 256), device="cuda" if gpu else "cpu",
                dtype=torch.bfloat16 if gpu else torch.float32)
print("burning", flush=True)
while True:
    y = x @ x
    if gpu:
        torch.cuda.synchronize()
    else:
        time.sleep(0.05)
"""


def build_key(shape: Shape) -> str:
    """The synthetic model a shape's runs load: its name and the dtype it is built in (gpu_runs.prebuild)."""
    return f"{shape.model}/{'bf16' if shape.precision == 'bf16' else 'fp32'}"


def live_rules(lines: list[str]) -> list[str]:
    """The rules the live doctor's `--no-ui` lines named, in the order they first showed."""
    found: list[str] = []
    for line in lines:
        title = line.split("] ", 1)[-1]
        rule = next((r for prefix, r in TITLE_RULES if title.startswith(prefix)), "?")
        if rule not in found:
            found.append(rule)
    return found


def measured_speed(events: list[dict], skip_steps: int = 2) -> dict:
    """Tokens the GPU computed per second (padding included, as the trainer counts micro-batches)
    and real tokens per second, medians of the steady steps."""
    logs = [e for e in events if e.get("type") == "log" and e.get("step", 0) > skip_steps]
    if not logs:
        return {"steps_measured": 0}
    begin = next((e for e in events if e.get("type") == "train_begin"), {})
    accum = begin.get("gradient_accumulation_steps") or 1
    step_s = sorted(e["step_time_s"] for e in logs)[len(logs) // 2]
    tokens = [e["tokens_per_micro_batch"] for e in logs if e.get("tokens_per_micro_batch")]
    real = sorted(e["tokens_per_s"] for e in logs if e.get("tokens_per_s"))
    waits = [e["data_wait_share"] for e in logs if e.get("data_wait_share") is not None]
    return {
        "steps_measured": logs[-1]["step"] - skip_steps,
        "logs_measured": len(logs),
        "step_s_median": round(step_s, 4),
        "micro_batch": begin.get("micro_batch_size"),
        "accumulation": accum,
        "tokens_per_micro_batch": round(sum(tokens) / len(tokens), 1) if tokens else None,
        "processed_tokens_per_s": round(sum(tokens) / len(tokens) * accum / step_s, 1) if tokens else None,
        "real_tokens_per_s": real[len(real) // 2] if real else None,
        "data_wait_share": round(sum(waits) / len(waits), 4) if waits else None,
    }


def run_once(label: str, config: Path, env: dict) -> dict:
    started = time.monotonic()
    run, done = train_headless(config, env)
    events = events_of(run)
    recorded = doctor_over_recording(run)
    plan = next((e for e in events if e.get("type") == "speed_plan"), {})
    begin = next((e["ts"] for e in events if e.get("type") == "train_begin"), None)
    first_log = next((e["ts"] for e in events if e.get("type") == "log"), None)
    last_log = next((e["ts"] for e in reversed(events) if e.get("type") == "log"), None)
    lines = doctor_lines(done.stdout)
    return {
        "label": label,
        "run": run.name,
        "exit_code": done.returncode,
        **ending(events),
        **measured_speed(events),
        "wall_s": round(time.monotonic() - started, 1),
        "load_s": round(begin - events[0]["ts"], 1) if begin and events else None,
        "logged_steps_s": round(last_log - first_log, 1) if first_log and last_log else None,
        "doctor_fired": recorded["fired"],
        "doctor_live_lines": lines,
        "doctor_live_rules": live_rules(lines),
        "gpu_telemetry": "ok" in recorded["nvml"],
        "auto_split": plan.get("auto_split"),
        "busy_tokens_per_micro_batch": plan.get("busy_tokens_per_micro_batch"),
        "predicted_tokens_per_s": plan.get("predicted_tokens_per_s"),
        "versions": versions(events),
    }


def ratio(after: dict, before: dict, key: str = "real_tokens_per_s") -> float | None:
    a, b = after.get(key), before.get(key)
    return round(a / b, 3) if a and b else None


# measured steps a run needs before the doctor can have judged it: MIN_HELD_S, and a recorded bin
JUDGED_S = MIN_HELD_S + 5.0
AT_ONCE = ("fp32_on_bf16_card",)  # judged from the run's settings, no window


def verdict(case: dict, rules: tuple[str, ...], live_only: tuple[str, ...] = ()) -> dict:
    """Were the case's rules named before the fix, live and in the replay (those the recording
    cannot show: live only), and are they gone after it (None: the after run was too short for a
    verdict; it is run for its speed)?"""
    before, after = case["runs"][0], case["runs"][1]
    out = {}
    for rule in rules:
        live = rule in before["doctor_live_rules"]
        replayed = rule in before["doctor_fired"]
        judged = rule in AT_ONCE or (after.get("logged_steps_s") or 0) >= JUDGED_S
        out[rule] = {
            "named_live": live,
            "named_replayed": replayed if rule not in live_only else None,
            "live_and_replay_agree": None if rule in live_only else live == replayed,
            "gone_after_fix": (rule not in after["doctor_live_rules"] and rule not in after["doctor_fired"])
            if judged
            else None,
        }
    return out


class Bench:
    def __init__(self, args, work: Path, env: dict) -> None:
        self.a, self.work, self.env = args, work, env
        self.smoke = args.smoke
        self.big = SMOKE if self.smoke else FULL
        self.small = SMOKE if self.smoke else SMALL
        self.built: set[str] = set()
        self.baseline: dict | None = None

    def steps(self, gpu_steps: int) -> int:
        return min(gpu_steps, self.a.steps or 4) if self.smoke else (self.a.steps or gpu_steps)

    def build(self, shape: Shape) -> None:
        key = build_key(shape)
        if key not in self.built:
            prebuild(shape, self.env)
            self.built.add(key)

    def needs_s(self, name: str) -> float:
        """What the case would take from now: its runs, and the builds and baseline not yet made."""
        need = CASE_S[name]
        models = {
            "demo-packed": [FULL],
            "fp32": [SMALL, dataclasses.replace(SMALL, precision="fp32")],
        }.get(name, [SMALL])
        for shape in models:
            key = build_key(shape)
            if key not in self.built:
                need += BUILD_S.get(key, 30)
        if name in ("fp32", "foreign") and self.baseline is None:
            need += BASELINE_S
        return need

    def config(self, name: str, shape: Shape, data: Path, steps: int, **overrides) -> Path:
        return write_config(self.work / f"{name}.yaml", shape, data, steps, **overrides)

    # ------------------------------------------------------------ the cases

    def demo_packed(self) -> dict:
        shape = self.big
        self.build(shape)
        base = {
            "dataset.path": "demo",
            "dataset.format": "auto",
            "training.packing": True,
            "training.dataloader_num_workers": 0,
        }
        demo = Path("demo")
        # 10 steps of ~2.1 s: the first (warm-up), then ~19 s of measured steps, the doctor's verdict
        # within 10-15 s of them, live and replayed
        before = run_once("before", self.config("demo-before", shape, demo, self.steps(10), **base), self.env)
        split = before.get("auto_split") or {}
        fix = (
            {
                "training.micro_batch_size": split["micro_batch_size"],
                "training.gradient_accumulation_steps": split["gradient_accumulation_steps"],
                "training.gradient_checkpointing": bool(split["checkpoint_layers"]),
            }
            if split
            else {  # no speed model here (the CPU): the finding's fallback, a larger micro-batch
                "training.micro_batch_size": shape.micro_batch_size * 2,
                "training.gradient_accumulation_steps": max(1, shape.accumulation // 2),
            }
        )
        after = run_once(
            "after", self.config("demo-after", shape, demo, self.steps(5), **base, **fix), self.env
        )
        workers = {**base, "training.dataloader_num_workers": 4}
        wrong = run_once(
            "wrong fix (more loader workers)",
            self.config("demo-workers", shape, demo, self.steps(5), **workers),
            self.env,
        )
        predicted = round(split["tokens_per_s"] / split["as_run_tokens_per_s"], 3) if split else None
        case = {
            "case": "demo-packed",
            "rule": "gpu_underfed",
            "also": ["low_mfu"],
            "fix": fix,
            "predicted_gain": predicted,
            "runs": [before, after, wrong],
            "gain": ratio(after, before),
            "wrong_fix_gain": ratio(wrong, before),
        }
        case["rules"] = verdict(case, ("gpu_underfed", "low_mfu"))
        return case

    def slow_loader(self) -> dict:
        shape = (
            dataclasses.replace(self.small, micro_batch_size=8, accumulation=2)
            if not self.smoke
            else self.small
        )
        self.build(shape)
        steps = self.steps(12)
        data = write_tokens(
            self.work / "tokens.jsonl", shape, shape.micro_batch_size * shape.accumulation * (steps + 2)
        )
        collate_ms = self.a.collate_ms if self.a.collate_ms is not None else (40.0 if self.smoke else 800.0)
        burning = {**self.env, **test_aids.environ(collate_cpu_ms=collate_ms)}
        before = run_once(
            "before",
            self.config("slow-before", shape, data, steps, **{"training.dataloader_num_workers": 0}),
            burning,
        )
        # the workers the finding names ("e.g. to N"), else 4
        named = (before["doctor_fired"].get("input_bound") or {}).get("fix") or next(
            (line for line in before["doctor_live_lines"] if "Input-bound" in line), ""
        )
        found = re.search(r"dataloader_num_workers \(e\.g\. to (\d+)\)", named)
        workers = int(found.group(1)) if found else 4
        after = run_once(  # only its speed is wanted
            "after",
            self.config(
                "slow-after", shape, data, self.steps(6), **{"training.dataloader_num_workers": workers}
            ),
            burning,
        )
        share = before.get("data_wait_share")
        case = {
            "case": "slow-loader",
            "rule": "input_bound",
            "fix": {"training.dataloader_num_workers": workers},
            "predicted_gain": round(1 / (1 - share), 3) if share is not None and share < 1 else None,
            "runs": [before, after],
            "gain": ratio(after, before),
        }
        case["rules"] = verdict(case, ("input_bound",))
        return case

    def cpu_bound(self) -> dict:
        shape = (
            self.small if self.smoke else dataclasses.replace(self.small, micro_batch_size=16, accumulation=1)
        )
        self.build(shape)
        steps = self.steps(30)  # ~0.67 s each: ~19 s of measured steps for the verdict
        data = write_tokens(
            self.work / "tokens-big.jsonl", shape, shape.micro_batch_size * shape.accumulation * (steps + 2)
        )
        burning = {**self.env, **test_aids.environ(log_cpu_ms=20.0 if self.smoke else 500.0)}
        before = run_once("before", self.config("cpu-before", shape, data, steps), burning)
        fix = {"training.logging_steps": 2 if self.smoke else 10}
        # only its speed is wanted: 2 log windows of 10 steps
        after = run_once("after", self.config("cpu-after", shape, data, self.steps(20), **fix), burning)
        predicted, measured = before.get("predicted_tokens_per_s"), before.get("processed_tokens_per_s")
        case = {
            "case": "cpu-bound",
            "rule": "cpu_bound",
            "fix": fix,
            # the finding's own figure: the speed model's tokens/s with the host keeping up over the measured
            "predicted_gain": round(predicted / measured, 3) if predicted and measured else None,
            "runs": [before, after],
            "gain": ratio(after, before),
        }
        case["rules"] = verdict(case, ("cpu_bound",))
        return case

    def _baseline(self, shape: Shape, data: Path, steps: int) -> dict:
        if self.baseline is None:
            self.baseline = run_once(
                "after (the 1B LoRA in bf16, alone)", self.config("baseline", shape, data, steps), self.env
            )
        return self.baseline

    def _plain(self) -> tuple[Shape, Path, int]:
        shape = (
            self.small if self.smoke else dataclasses.replace(self.small, micro_batch_size=8, accumulation=2)
        )
        steps = self.steps(8)
        path = self.work / "tokens-plain.jsonl"
        if not path.exists():
            write_tokens(path, shape, shape.micro_batch_size * shape.accumulation * (max(steps, 30) + 2))
        return shape, path, steps

    def fp32(self) -> dict:
        shape, data, steps = self._plain()
        fp32 = dataclasses.replace(shape, precision="fp32")
        self.build(shape)
        self.build(fp32)
        before = run_once("before (fp32)", self.config("fp32-before", fp32, data, steps), self.env)
        after = self._baseline(shape, data, steps)
        predicted, base = after.get("predicted_tokens_per_s"), before.get("predicted_tokens_per_s")
        case = {
            "case": "fp32",
            "rule": "fp32_on_bf16_card",
            "fix": {"training.precision": shape.precision},
            "predicted_gain": round(predicted / base, 3) if predicted and base else None,  # the speed model's
            "runs": [before, after],
            "gain": ratio(after, before),
        }
        case["rules"] = verdict(case, ("fp32_on_bf16_card",))
        return case

    def foreign(self) -> dict:
        shape, data, steps = self._plain()
        seen = ProcessesSeen()
        self.build(shape)
        burner = subprocess.Popen(
            [sys.executable, "-c", BURNER],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            burner.stdout.readline()  # "burning": its context and matrices are on the GPU
            seen.start()
            before = run_once(
                "before (a matmul burner on the GPU)",
                self.config("foreign-before", shape, data, self.steps(60)),
                self.env,
            )
        finally:
            seen.stop()
            burner.kill()
            burner.wait(timeout=30)
        after = self._baseline(shape, data, steps)
        case = {
            "case": "foreign",
            "rule": "foreign_process",
            "fix": {"the other process": "stopped"},
            "predicted_gain": None,  # the finding names no figure
            "runs": [before, after],
            "gain": ratio(after, before),
            "burner_pid": burner.pid,
            # what the product's sampler read of the GPUs' process lists during the before run,
            # beside the trainer's pid (its hello event): the evidence the rule judged
            "gpu_processes_seen": seen.result(),
            "trainer_pid": trainer_pid(before["run"], self.env),
        }
        case["rules"] = verdict(case, ("foreign_process",), live_only=("foreign_process",))
        return case


class ProcessesSeen:
    """The product's own sampler (cockpit.telemetry.sampler, as the live doctor reads NVML), run
    beside a training run: every pid it saw on each GPU and the most memory it held."""

    def __init__(self, every_s: float = 1.0) -> None:
        self.every_s = every_s
        self.seen: dict[str, dict[str, float]] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from cockpit.telemetry.sampler import Sampler

        sampler = Sampler(slow_every=1)  # the process lists are a slow field: read them every time
        while not self._stop.is_set():
            sample = sampler.sample()
            if sample.nvml != "ok":
                self.error = f"nvml {sample.nvml}: {sample.nvml_detail}"
            for gpu in sample.gpus:
                for p in gpu.processes or []:
                    pids = self.seen.setdefault(str(gpu.index), {})
                    gib = round((p.get("used_bytes") or 0) / 2**30, 2)
                    pids[str(p.get("pid"))] = max(pids.get(str(p.get("pid")), 0.0), gib)
            self._stop.wait(self.every_s)

    def result(self) -> dict:
        return {"by_gpu": self.seen, "error": self.error}


def trainer_pid(run_name: str, env: dict) -> int | None:
    """The trainer's pid as its hello event gives it (the pid the doctor counts as the run's)."""
    home = Path(env["COCKPIT_HOME"])
    events = events_of(home / "runs" / run_name)
    return next((e.get("pid") for e in events if e.get("type") == "hello"), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workdir", type=Path, help="where the runs and their data go (default: a temp dir)")
    ap.add_argument(
        "--steps", type=int, help="optimizer steps per run, every case (default: each case's own)"
    )
    ap.add_argument("--collate-ms", type=float, help="CPU burnt per micro-batch in slow-loader (default 800)")
    ap.add_argument(
        "--budget-s",
        type=float,
        help="skip the cases that would end past this many seconds (default 300 on a GPU)",
    )
    ap.add_argument("--only", nargs="*", choices=CASES)
    ap.add_argument("--smoke", action="store_true", help="the tiny model on the CPU")
    a = ap.parse_args()
    budget = a.budget_s if a.budget_s is not None else (None if a.smoke else 300.0)
    if a.workdir is not None:
        a.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="doctor-fixes-", dir=a.workdir))
    bench = Bench(a, work, bench_env(work / "home"))
    t0 = time.monotonic()
    cases: list[dict] = []
    skipped: list[dict] = []

    def report() -> dict:
        done = [c for c in cases if "runs" in c]
        return {
            "bench": "doctor_fixes",
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "smoke": a.smoke,
            "shapes": {"7B": bench.big.name, "1B": bench.small.name},
            "budget_s": budget,
            "machine": machine(),
            "cases": done,
            "skipped": skipped,
            "named_as_expected": {c["case"]: c["rule"] in c["runs"][0]["doctor_live_rules"] for c in done},
            "live_and_replay_agree": {
                c["case"]: all(v["live_and_replay_agree"] is not False for v in c["rules"].values())
                for c in done
            },
            "bench_s": round(time.monotonic() - t0, 1),
        }

    for name in a.only or CASES:
        elapsed = time.monotonic() - t0
        if budget is not None and elapsed + bench.needs_s(name) > budget:
            skipped.append(
                {
                    "case": name,
                    "why": f"--budget-s {budget:g}: needs ~{bench.needs_s(name):.0f} s, "
                    f"{budget - elapsed:.0f} s left",
                }
            )
            print(f"{name}: skipped ({skipped[-1]['why']})", file=sys.stderr, flush=True)
            continue
        case_t0 = time.monotonic()
        c = getattr(bench, name.replace("-", "_"))()
        c["case_s"] = round(time.monotonic() - case_t0, 1)
        cases.append(c)
        named = {rule: (v["named_live"], v["named_replayed"]) for rule, v in c["rules"].items()}
        print(
            f"{c['case']}: before {c['runs'][0].get('real_tokens_per_s')} -> after "
            f"{c['runs'][1].get('real_tokens_per_s')} real tokens/s (x{c['gain']}, predicted "
            f"x{c['predicted_gain']}); named (live, replayed): {named}"
            + (f"; wrong fix x{c['wrong_fix_gain']}" if "wrong_fix_gain" in c else "")
            + f"; {c['case_s']} s",
            file=sys.stderr,
            flush=True,
        )
        write_json(a.out, "doctor_fixes.json", report())
    result = report()
    path = write_json(a.out, "doctor_fixes.json", result)
    print(json.dumps(result["named_as_expected"]), f"{result['bench_s']} s", path, file=sys.stderr)
    return 0 if all(r.get("status") == "finished" for c in cases for r in c["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
