#!/usr/bin/env python3
"""Does watching a run slow it down? Training speed with the live view attached vs detached.

The same short run (the article's QLoRA recipe on `synthetic:llama-2-7b`, 512 tokens, micro-batch
4 x accumulation 4, ~40 s of training) four times, in the order A B B A so that a drift of the
machine weighs on both alike:
- detached (A): `cockpit train CONFIG` starts in a pseudo-terminal (100x30) and the user presses
  `d` as soon as the view is drawn: the trainer goes on with no client at all;
- attached (B): the same, but the view stays for the whole run (it redraws about twice a second,
  with its own NVML and host sampling), then `q` once the run has finished.
Tokens/s are the steady steps' real tokens over their median step time (the trainer's own figure
is kept too); the ratio attached/detached is of the means. Target: >= 0.99. An attached run also
gives the TUI's own CPU: `tui_core_share` over the whole run (imports and first screen included),
`tui_core_share_drawn` from the first screen drawn to the end (`tui_start_cpu_s` before it).
Target: `tui_core_share` <= 0.03.

The product's and the TUI's libraries are byte-compiled before the timed runs, as `pip install`
does (an install with --no-compile, or PYTHONDONTWRITEBYTECODE, makes every start compile
textual's sources again: ~1 s of CPU). `--profile` adds a fifth run, attached, not counted in the
figures above, with py-spy (if installed) sampling the TUI from outside: where its CPU goes
before the first screen and after (bench/pyspy_profile.py).

`interleaved` in `--order` is one more way to ask the question, the one that separates the view from
the machine: one trainer, watched and not watched in turns (INTERLEAVE_PATTERN), each span's steps
apart. Runs of one configuration moved by up to 20% between runs of one call on the H200 boxes, more
than the 1% the target resolves; the spans of one run share its process and its place on the machine,
and their pattern has the attached and the detached spans centred on the same time.

  python bench/attach_overhead.py --out DIR [--steps 26] [--profile] [--smoke] [--order KINDS]
                                  [--span-s 12]

`--order attached,attached --steps 70` gives the TUI's share over runs of ~2.5 minutes (its
start-up's CPU weighs on a whole run in proportion to its shortness) within one device call.

`--smoke` runs the shipped tiny model on the CPU, once each way (the tests run it). Writes
DIR/attach_overhead.json; exits 1 when a run did not finish.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import host_probes
from gpu_runs import (
    FULL,
    ROOT,
    SMOKE,
    PtyTui,
    bench_env,
    ending,
    events_of,
    machine,
    newest_run,
    prebuild,
    run_ids,
    throughput,
    versions,
    wait_trainer_gone,
    write_config,
    write_json,
    write_tokens,
)
from pyspy_profile import Spy, py_spy, summary

from cockpit.run import process
from cockpit.run.rundir import RunDir

EXIT_DETACHED = 4
TARGET_RATIO = 0.99
TARGET_TUI_SHARE = 0.03


def one_run(
    kind: str, config: Path, env: dict, shape, timeout_s: float, profile_dir: Path | None = None
) -> dict:
    """One run, detached or attached (or "profiled": attached, with py-spy on the TUI), through
    the TUI in a pseudo-terminal."""
    home = Path(env["COCKPIT_HOME"])
    before = run_ids(home)
    started = time.monotonic()
    profile: dict = {}
    with PtyTui(["train", str(config), "--skip-preflight"], env) as tui:  # killed however this ends
        spy = Spy(tui.proc.pid, profile_dir / "tui-start.txt") if profile_dir else None
        drawn = tui.wait_for_output()
        run = newest_run(home, before)
        tui_cpu_s = None
        drawn_cpu_s, drawn_at = tui_cpu(tui), time.monotonic()  # imports and the first screen: once
        if spy is not None:
            profile["start"] = spy.stop() or summary(spy.path)
            spy = Spy(tui.proc.pid, profile_dir / "tui-drawn.txt")
        if kind == "detached":
            tui.press("d")  # training goes on without any client
            code = tui.finish()
            gone = wait_trainer_gone(run, timeout_s)
        else:
            gone = wait_trainer_gone(run, timeout_s)
            time.sleep(1.5)  # the view draws the run's end
            tui_cpu_s = tui_cpu(tui)
            ended_at = time.monotonic()
            if spy is not None:
                profile["drawn"] = spy.stop() or summary(spy.path)
            tui.press("q")
            code = tui.finish()
    events = events_of(run)
    result = {
        "kind": kind,
        "run": run.name,
        "view_drawn": drawn,
        "tui_exit": code,
        "trainer_ended": gone,
        "wall_s": round(time.monotonic() - started, 1),
        **ending(events),
        **throughput(events, shape),
        **host_probes(events),
    }
    if tui_cpu_s is not None:
        result["tui_cpu_s"] = round(tui_cpu_s, 2)
        result["tui_core_share"] = round(tui_cpu_s / result["wall_s"], 4)
        if drawn_cpu_s is not None:  # the same once the first screen is drawn: the live view's own
            result["tui_start_cpu_s"] = round(drawn_cpu_s, 2)
            result["tui_core_share_drawn"] = round((tui_cpu_s - drawn_cpu_s) / (ended_at - drawn_at), 4)
    if profile:
        result["profile"] = profile
    print(f"{kind}: {result}", file=sys.stderr, flush=True)
    return result


# the interleaved run's pattern of spans, in units of one span: detached, attached, detached, attached,
# detached at 1, 2, 2, 2, 1: the attached and the detached spans have the same centre of time, so a
# drift of the machine's speed that is linear over the run weighs on both alike (A B B A, twice)
INTERLEAVED_STEPS = 400  # more than its spans take: ~80 steps on an H200, ~250 for the CPU smoke run
INTERLEAVE_PATTERN = (("detached", 1), ("attached", 2), ("detached", 2), ("attached", 2), ("detached", 1))


def interleaved_run(config: Path, env: dict, shape, span_s: float, timeout_s: float) -> dict:
    """One trainer, watched and not watched in turns (INTERLEAVE_PATTERN, a unit of `span_s`): started
    through the TUI and detached at once, then `cockpit attach` in the pseudo-terminal for each attached
    span and `d` at its end; stopped with `cockpit stop` after the last span. Each span counts the steps
    that began and ended inside it, so the attach and detach themselves fall between spans. Two runs of
    one configuration on one machine moved by up to 20% in one call (docs/benchmarks.md); the spans of
    one run share its process, its model, its data and its place on the machine."""
    home = Path(env["COCKPIT_HOME"])
    before = run_ids(home)
    started = time.monotonic()
    with PtyTui(["train", str(config), "--skip-preflight"], env) as tui:
        tui.wait_for_output()
        run = newest_run(home, before)
        tui.press("d")
        tui.finish()
    deadline = time.monotonic() + timeout_s
    while not any(e.get("type") == "log" and e.get("step", 0) > 2 for e in events_of(run)):
        if time.monotonic() > deadline or not process.is_alive(RunDir(run)):
            return {
                "kind": "interleaved",
                "run": run.name,
                "status": "no steady steps",
                **ending(events_of(run)),
            }
        time.sleep(1.0)
    spans = []
    for kind, units in INTERLEAVE_PATTERN:
        span = {"kind": kind, "seconds": span_s * units}
        if kind == "detached":
            span["start"] = time.time()
            time.sleep(span["seconds"])
            span["end"] = time.time()
        else:
            with PtyTui(["attach", run.name], env) as tui:
                span["view_drawn"] = tui.wait_for_output()
                drawn_cpu = tui_cpu(tui)
                span["start"] = time.time()
                time.sleep(span["seconds"])
                span["end"] = time.time()
                cpu = tui_cpu(tui)
                if cpu is not None and drawn_cpu is not None:
                    span["tui_start_cpu_s"] = round(drawn_cpu, 2)
                    span["tui_core_share_drawn"] = round((cpu - drawn_cpu) / (span["end"] - span["start"]), 4)
                tui.press("d")
                span["tui_exit"] = tui.finish()
        spans.append(span)
    stopped = subprocess.run(
        [sys.executable, "-m", "cockpit", "stop", run.name], env=env, cwd=ROOT, capture_output=True, text=True
    )
    wait_trainer_gone(run, timeout_s)
    events = events_of(run)
    pooled = time_spans(spans, events, shape.tokens_per_step)
    ratio = pooled["attached"] / pooled["detached"] if pooled["attached"] and pooled["detached"] else None
    result = {
        "kind": "interleaved",
        "run": run.name,
        "wall_s": round(time.monotonic() - started, 1),
        "stop": (stopped.stdout.strip() or stopped.stderr.strip())[-200:],
        **ending(events),
        "span_s": span_s,
        "spans": spans,
        "tokens_per_s_attached": None if pooled["attached"] is None else round(pooled["attached"], 1),
        "tokens_per_s_detached": None if pooled["detached"] is None else round(pooled["detached"], 1),
        "ratio_attached_over_detached": None if ratio is None else round(ratio, 4),
        **host_probes(events),
    }
    print(f"interleaved: {result}", file=sys.stderr, flush=True)
    return result


def time_spans(spans: list[dict], events: list[dict], tokens_per_step: int) -> dict[str, float | None]:
    """Each span's steps (those that began and ended inside it: `ts` is a step's end) with their
    median and tokens/s, written into the span; returns tokens/s over the pooled steps of each kind
    (their median step), None for a kind with no whole step."""
    logs = [e for e in events if e.get("type") == "log" and e.get("step_time_s")]

    def inside(span: dict) -> list[float]:
        return [
            e["step_time_s"]
            for e in logs
            if e["ts"] - e["step_time_s"] >= span["start"] and e["ts"] <= span["end"]
        ]

    for span in spans:
        times = inside(span)
        span["steps"] = len(times)
        if times:
            span["step_s_median"] = round(statistics.median(times), 4)
            span["tokens_per_s"] = round(tokens_per_step / statistics.median(times), 1)
    pooled: dict[str, float | None] = {}
    for kind in ("attached", "detached"):
        times = [t for span in spans if span["kind"] == kind for t in inside(span)]
        pooled[kind] = tokens_per_step / statistics.median(times) if times else None
    return pooled


def tui_cpu(tui: PtyTui) -> float | None:
    """CPU seconds (user + system) of the TUI's own process, all its threads, not its children."""
    try:
        times = psutil.Process(tui.proc.pid).cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def compile_bytecode(env: dict) -> str:
    """Byte-compile what the TUI imports outside the standard library, as `pip install` does;
    untimed: the whole top-level package of every module the TUI's imports load, and
    typing_extensions, platformdirs and pynvml, which it imports only once it runs (the H200
    profiles of 2026-12-02 showed each compiled from source at every start)."""
    listing = (
        "import sys, sysconfig, cockpit.cli.main, screens.run.app, typing_extensions, platformdirs\n"
        "try:\n"
        "    import pynvml\n"
        "except ImportError:\n"
        "    pass\n"
        "std = sysconfig.get_paths()['stdlib']\n"
        "roots = sorted((p.rstrip('/') + '/' for p in sys.path if p), key=len, reverse=True)\n"
        "for m in list(sys.modules.values()):\n"
        "    f = getattr(m, '__file__', None) or ''\n"
        "    if not f.endswith('.py') or f.startswith(std):\n"
        "        continue\n"
        "    root = next((r for r in roots if f.startswith(r)), None)\n"
        "    top = f[len(root):].split('/')[0] if root else ''\n"
        "    print(root + top if top else f)\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", listing], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    targets = sorted(set(found.stdout.split()))
    if found.returncode != 0 or not targets:
        return f"compileall skipped: the TUI's modules could not be listed ({found.stderr.strip()[-200:]})"
    done = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", *targets], capture_output=True, text=True
    )
    failed = done.stdout.count("SyntaxError") + done.stderr.count("SyntaxError")
    said = f"compiled before the timed runs: {len(targets)} packages and modules"
    return said + (f" ({failed} files would not compile)" if done.returncode != 0 else "")


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for attach_overhead.json")
    ap.add_argument(
        "--steps", type=int, help="optimizer steps per run (default 26, ~40 s on an H200; smoke 24)"
    )
    ap.add_argument("--smoke", action="store_true", help="the tiny model on the CPU, one run each way")
    ap.add_argument(
        "--profile", action="store_true", help="one more attached run with py-spy on the TUI (not counted)"
    )
    ap.add_argument("--timeout-s", type=float, default=600, help="per run")
    ap.add_argument(
        "--span-s", type=float, default=12.0, help="the interleaved run's unit span (pattern 1-2-2-2-1)"
    )
    ap.add_argument(
        "--order",
        help="the runs, e.g. attached,attached: a longer run's TUI share within one device call "
        "(no ratio without a detached run); default detached,attached,attached,detached",
    )
    a = ap.parse_args()
    shape = SMOKE if a.smoke else FULL
    steps = a.steps or (24 if a.smoke else 26)
    order = ["detached", "attached"] if a.smoke else ["detached", "attached", "attached", "detached"]
    if a.order:
        order = [kind.strip() for kind in a.order.split(",") if kind.strip()]
        if not order or any(kind not in ("detached", "attached", "interleaved") for kind in order):
            ap.error(
                f"--order {a.order!r}: expected runs from detached, attached and interleaved, "
                "e.g. interleaved,attached,attached"
            )
    if a.profile and py_spy() is None:
        print("--profile: py-spy is not installed; no profiled run", file=sys.stderr)
    elif a.profile:
        order.append("profiled")
    work = Path(tempfile.mkdtemp(prefix="attach-overhead-"))
    env = bench_env(work / "home")
    data = write_tokens(
        work / "tokens.jsonl", shape, shape.micro_batch_size * shape.accumulation * (steps + 2)
    )
    config = write_config(work / "run.yaml", shape, data, steps)
    # the interleaved run is stopped after its last span: steps enough to outlast them, and rows for
    # every one of them (a new epoch's data loader stalled a CPU run for up to 3.6 s, a whole span)
    rows_long = shape.micro_batch_size * shape.accumulation * (INTERLEAVED_STEPS + 2)
    long_data = write_tokens(work / "tokens-long.jsonl", shape, rows_long) if "interleaved" in order else data
    long_config = write_config(work / "interleaved.yaml", shape, long_data, INTERLEAVED_STEPS)
    t0 = time.monotonic()
    prebuild(shape, env)  # untimed, like a download
    bytecode = compile_bytecode(env)
    runs: list[dict] = []
    for kind in order:  # each run's figures written as it ends: a call cut short keeps the runs done
        if kind == "interleaved":
            runs.append(interleaved_run(long_config, env, shape, a.span_s, a.timeout_s))
        else:
            runs.append(one_run(kind, config, env, shape, a.timeout_s, a.out if kind == "profiled" else None))
        if len(runs) < len(order):
            partial = {"bench": "attach_overhead", "partial": True, "order": order, "runs": runs}
            write_json(a.out, "attach_overhead.json", partial)
    detached = mean([r["tokens_per_s"] for r in runs if r["kind"] == "detached" and "tokens_per_s" in r])
    attached = mean([r["tokens_per_s"] for r in runs if r["kind"] == "attached" and "tokens_per_s" in r])
    ratio = round(attached / detached, 4) if attached and detached else None
    turns = [r["ratio_attached_over_detached"] for r in runs if r["kind"] == "interleaved"]
    shares = [r["tui_core_share"] for r in runs if r["kind"] == "attached" and "tui_core_share" in r]
    result = {
        "bench": "attach_overhead",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "smoke": a.smoke,
        "shape": shape.name,
        "steps": steps,
        "tokens_per_step": shape.tokens_per_step,
        "machine": machine(),
        "versions": versions(events_of(work / "home" / "runs" / runs[0]["run"])),
        "bytecode": bytecode,
        "order": order,
        "runs": runs,
        "tokens_per_s_detached_mean": detached,
        "tokens_per_s_attached_mean": attached,
        "ratio_attached_over_detached": ratio,
        "target": f">= {TARGET_RATIO}",
        "target_met": None if ratio is None else ratio >= TARGET_RATIO,
        "ratios_interleaved": turns,  # one per interleaved run (None: a run with no whole step of a kind)
        "interleaved_target_met": None
        if not turns
        else all(t is not None and t >= TARGET_RATIO for t in turns),
        "tui_core_share_max": max(shares) if shares else None,
        "tui_target": f"tui_core_share <= {TARGET_TUI_SHARE} in every attached run",
        "tui_target_met": bool(shares) and max(shares) <= TARGET_TUI_SHARE,
        "bench_s": round(time.monotonic() - t0, 1),
    }
    path = write_json(a.out, "attach_overhead.json", result)
    print(f"ratio attached/detached {ratio} (target >= {TARGET_RATIO}); {path}", file=sys.stderr)
    # an interleaved run ends by `cockpit stop` after its last span
    ended = [
        r["status"] == "finished" or (r["kind"] == "interleaved" and r["status"] == "stopped") for r in runs
    ]
    return 0 if all(ended) else 1


if __name__ == "__main__":
    sys.exit(main())
