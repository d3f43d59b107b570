#!/usr/bin/env python3
"""CPU cost of the live view, on a CPU box: `cockpit train CONFIG` attached, its trainer played.

The TUI runs as a user starts it, `cockpit train CONFIG --skip-preflight` (the same CLI path:
config, machine check, run directory, trainer launch, then the app), in a pseudo-terminal of
100x30 whose output is read and thrown away. Two things are swapped so that nothing but the TUI
uses the CPU:
- the trainer: `process.launch` starts this script's `--play` mode in its place, a process that
  writes the recorded demo's events (tests/fixtures/demo_run_events.jsonl) into events.jsonl as a
  GPU trainer would: a few start-up events, then one optimizer step every `--step-s` (1.3 s, about
  the H200 record's median in bench/results/2026-12-02-attach-overhead-h200.json), their times
  rewritten to now, the torch memory counters a CUDA trainer adds, steps counted on for ever;
- NVML: the TUI's machine check and its live sampler read a fake H100 (tests/support/nvml_fake.py,
  every field answering, the played trainer's pid on it), so the GPU panel, its sparklines and
  the doctor do the work they do on a GPU box. The host figures come from this box (psutil).

Figures (user + system CPU seconds of the TUI's process, all its threads, not its children):
- `start_cpu_s`: from the start to the first screen (the pseudo-terminal has received
  FIRST_SCREEN_BYTES; polled every 10 ms);
- `steady_share`: share of one core from `--settle-s` after the first screen over `--window-s`;
- `drawn_share`: share from the first screen to the end of the window;
- `whole_share`: CPU over wall time from the start to the end of the window (what
  bench/attach_overhead.py calls `tui_core_share`, over a run of about the same length);
- `out_bytes_per_s`: what the TUI wrote to the terminal during the window (the redraws paid for).

`--compare DIR` runs the TUI from another checkout (e.g. `git worktree add DIR BASE`, or
`git archive BASE | tar -x -C DIR`) in alternation with this one (A B B A ...), both against
this checkout's player and fake NVML; bytecode of both is compiled first, as `pip install` does.

  python bench/tui_cpu.py [--rounds 2] [--window-s 30] [--compare DIR] [--out FILE.json]

What this leaves out is NVML's own cost: the fake answers at once. `--nvml-fields` measures it on
a GPU box: the CPU (thread time) and wall time of each field the live sampler reads, per read of
GPU 0 through the real `PynvmlSource`; ctypes releases the GIL in those calls, so a py-spy
`--gil` profile does not see them.

  python bench/tui_cpu.py --nvml-fields [--reads 50]

`--micro` times three pieces in isolation instead (process CPU, this checkout and --compare's):
a telemetry sample from the fake H100 (the sampler thread and its NVML worker), loading a run's
config.yaml, and the loss plot's rows for runs of 1k, 10k and 50k logged steps (loss and lr).

  python bench/tui_cpu.py --micro [--compare DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "demo_run_events.jsonl"
FIRST_SCREEN_BYTES = 2000  # as bench/gpu_runs.py PtyTui.wait_for_output: the first frame is larger
STEP_S = 1.3
PLAY_MAX_S = 900.0  # a played trainer left behind ends by itself
PLAYED_STEPS = 100_000
GIB = 1 << 30


# ------------------------------------------------------------------ the played trainer


def play(step_s: float) -> None:
    """Events on stdout (the run's events.jsonl, as process.launch wires a trainer's stdout)."""
    events = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    run_id = Path.cwd().name  # the trainer runs in its run directory
    started = time.time()
    first_log = next(i for i, e in enumerate(events) if e["type"] == "log")
    preamble = [e for e in events[:first_log] if e["type"] != "done"]
    cycle = [e for e in events[first_log:] if e["type"] in ("log", "checkpoint")]

    def write(event: dict) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    for event in preamble:
        event = dict(event, ts=time.time())
        if event["type"] == "hello":
            device = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3 (fake NVML)", "capability": "9.0"}
            event.update(pid=os.getpid(), pgid=os.getpgid(0), run_id=run_id, device=device, precision="bf16")
        if event["type"] == "train_begin":
            event["total_steps"] = PLAYED_STEPS
        write(event)
        time.sleep(0.1)
    step = 0
    while time.time() - started < PLAY_MAX_S:
        for event in cycle:
            if event["type"] == "checkpoint":
                write(dict(event, ts=time.time(), step=step, path=f"checkpoints/checkpoint-{step}"))
                continue
            time.sleep(step_s)
            step += 1
            log = {k: v for k, v in event.items() if k != "rss_bytes"}
            log.update(
                ts=time.time(),
                step=step,
                total_steps=PLAYED_STEPS,
                epoch=round(step / 22, 4),
                elapsed_s=round(time.time() - started, 2),
                step_time_s=step_s,
                mem_allocated_bytes=9 * GIB + step % 7 * 1024,
                mem_reserved_bytes=12 * GIB,
                mem_peak_bytes=11 * GIB,
            )
            write(log)


# ------------------------------------------------------------------ the TUI, in the pseudo-terminal


def tui(checkout: Path, step_s: float, argv: list[str]) -> int:
    """`cockpit ARGV` from `checkout`, with the played trainer and a fake H100 in place."""
    sys.path[:] = [str(checkout), str(ROOT / "tests"), *(p for p in sys.path if Path(p) != ROOT / "bench")]
    from types import SimpleNamespace

    from support.nvml_fake import FakeGpu, FakeNvml

    from cockpit.cli.main import main as cockpit_main
    from cockpit.preflight import quick
    from cockpit.run import process
    from cockpit.telemetry import sampler

    # figures that move from sample to sample, as a training GPU's do (the panel draws every change)
    gpu = FakeGpu(
        overrides={
            "utilization": lambda n: SimpleNamespace(gpu=88 + n * 37 % 13, memory=50 + n * 11 % 17),
            "power_mw": lambda n: 540_000 + n * 7919 % 150 * 1000,
            "temp_c": lambda n: 64 + n // 40 % 5,
        }
    )
    quick.NVML_SOURCE = sampler.PynvmlSource = lambda: FakeNvml([gpu])
    launch = process.launch
    process._trainer_command = lambda run: ([sys.executable, __file__, "--play", "--step-s", str(step_s)], {})

    def launch_played(run, extra_env=None):
        proc = launch(run, extra_env)
        gpu.processes = [(proc.pid, 34 * GIB)]
        return proc

    process.launch = launch_played
    return cockpit_main(argv)


# ------------------------------------------------------------------ NVML's own cost, on a GPU box


def nvml_fields(reads: int) -> dict:
    """Per field the sampler reads: thread CPU and wall ms per read of GPU 0, median of `reads`."""
    from cockpit.telemetry.nvml import NVML_FAST_FIELDS, NVML_FIELDS, PynvmlSource

    source = PynvmlSource()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        source.init()  # the TUI's start does this twice: the machine check, then the live sampler
    except Exception as exc:  # no driver here: say so
        return {"nvml": f"{type(exc).__name__}: {exc}"}
    init = {
        "cpu_ms": round((time.process_time() - cpu0) * 1000, 3),
        "wall_ms": round((time.perf_counter() - wall0) * 1000, 3),
    }
    handle = source.handle(0)
    fields = {}
    for name in NVML_FIELDS:
        cpu_ms, wall_ms, error = [], [], None
        for _ in range(reads):
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            try:
                source.read(handle, name)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            cpu_ms.append((time.thread_time() - cpu0) * 1000)
            wall_ms.append((time.perf_counter() - wall0) * 1000)
        fields[name] = {
            "every_sample": name in NVML_FAST_FIELDS,
            "cpu_ms": round(statistics.median(cpu_ms), 3),
            "wall_ms": round(statistics.median(wall_ms), 3),
            **({"error": error} if error else {}),
        }
    source.shutdown()
    fast_cpu = sum(f["cpu_ms"] for f in fields.values() if f["every_sample"])
    return {
        "nvml_init": init,
        "reads": reads,
        "fields": fields,
        "cpu_ms_per_sample_fast_fields": round(fast_cpu, 3),
    }


# ------------------------------------------------------------------ pieces in isolation


def micro(checkout: Path, config: Path) -> dict:
    """CPU ms of one telemetry sample, one config load and one loss plot, from `checkout`."""
    sys.path[:] = [str(checkout), str(ROOT / "tests"), *(p for p in sys.path if Path(p) != ROOT / "bench")]
    import math
    import random
    from functools import partial

    from support.nvml_fake import FakeGpu, FakeNvml

    from cockpit.config.load import load_config
    from cockpit.telemetry.sampler import Sampler
    from widgets.loss_plot import plot_lines

    def cpu_ms(fn, times: int) -> float:
        fn()  # warm
        started = time.process_time()
        for _ in range(times):
            fn()
        return round((time.process_time() - started) / times * 1000, 3)

    sampler = Sampler(FakeNvml([FakeGpu()]), host_every=2)
    import cockpit

    out = {
        "cockpit": cockpit.__file__,
        "sample_ms": cpu_ms(sampler.sample, 500),
        "load_config_ms": cpu_ms(lambda: load_config(config), 50),
    }
    rng = random.Random(0)
    for n in (1000, 10_000, 50_000):
        loss = [(i, 3 * math.exp(-i / 2000) + rng.random() * 0.1) for i in range(1, n + 1)]
        lr = [(i, 2e-4 * min(1.0, i / 100)) for i in range(1, n + 1)]
        out[f"plot_{n}_points_ms"] = cpu_ms(partial(plot_lines, loss, 48, 7, lr, []), 5)
    return out


# ------------------------------------------------------------------ measuring


def cpu_s(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def one_round(checkout: Path, config: Path, env: dict, a, profile: Path | None = None) -> dict:
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_runs import PtyTui

    home = Path(env["COCKPIT_HOME"])
    before = set(os.listdir(home / "runs")) if (home / "runs").exists() else set()
    command = [sys.executable, __file__, "--tui", str(checkout), "--step-s", str(a.step_s)]
    command += ["--", "train", str(config), "--skip-preflight"]
    started = time.monotonic()
    result: dict = {"checkout": str(checkout)}
    with PtyTui([], env, command=command) as term:
        pid = term.proc.pid
        while term.received < FIRST_SCREEN_BYTES and term.proc.poll() is None:
            if time.monotonic() - started > 60:
                raise SystemExit(f"no first screen after 60 s; the terminal said: {term.tail[-2000:]!r}")
            time.sleep(0.01)
        if term.proc.poll() is not None:
            raise SystemExit(f"the TUI exited ({term.proc.returncode}): {term.tail[-2000:]!r}")
        drawn_at, drawn_cpu = time.monotonic(), cpu_s(pid)
        result["start_wall_s"] = round(drawn_at - started, 3)
        result["start_cpu_s"] = round(drawn_cpu, 3)
        time.sleep(a.settle_s)
        spy = None
        if profile is not None:  # py-spy reads the stacks from outside: its CPU is not the TUI's
            from pyspy_profile import Spy

            done = len(os.listdir(profile)) if profile.exists() else 0
            spy = Spy(pid, profile / f"steady-{done}.txt", rate_hz=500)
        window_at, window_cpu, window_bytes = time.monotonic(), cpu_s(pid), term.received
        time.sleep(a.window_s)
        ended_at, ended_cpu, ended_bytes = time.monotonic(), cpu_s(pid), term.received
        if spy is not None:
            from pyspy_profile import summary as spy_summary

            result["profile"] = spy.stop() or spy_summary(spy.path, top=25)
        result["steady_share"] = round((ended_cpu - window_cpu) / (ended_at - window_at), 4)
        result["drawn_share"] = round((ended_cpu - drawn_cpu) / (ended_at - drawn_at), 4)
        result["whole_share"] = round(ended_cpu / (ended_at - started), 4)
        result["whole_s"] = round(ended_at - started, 1)
        result["out_bytes_per_s"] = round((ended_bytes - window_bytes) / (ended_at - window_at))
        term.press("d")  # detach: the played trainer is stopped below
        result["tui_exit"] = term.finish()
    runs = sorted(set(os.listdir(home / "runs")) - before)
    for run in runs:
        try:
            trainer = json.loads((home / "runs" / run / "trainer.json").read_text())
            os.killpg(trainer["pgid"], 9)
        except (OSError, ValueError, KeyError):
            pass
    steps = 0
    for run in runs:
        for line in (home / "runs" / run / "events.jsonl").read_text().splitlines():
            steps += '"type": "log"' in line
    result["steps_played"] = steps
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def compile_bytecode(checkouts: list[Path], env: dict) -> None:
    """The TUI's modules byte-compiled, as an install does: no timed start compiles a source."""
    for checkout in checkouts:
        for package in ("cockpit", "screens", "widgets"):
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / package)], check=False)
    listing = (
        "import sys, screens.run.app, cockpit.cli.main\n"
        "print('\\n'.join(getattr(m, '__file__', None) or '' for m in list(sys.modules.values())))"
    )
    found = subprocess.run([sys.executable, "-c", listing], env=env, cwd=ROOT, capture_output=True, text=True)
    files = [f for f in found.stdout.split() if f.endswith(".py")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *files], check=False)


def summary(rounds: list[dict]) -> dict:
    out = {}
    for key in ("start_cpu_s", "steady_share", "drawn_share", "whole_share", "out_bytes_per_s"):
        values = [r[key] for r in rounds]
        out[key] = {"median": round(statistics.median(values), 4), "all": values}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="runs of each checkout")
    ap.add_argument("--window-s", type=float, default=30.0, help="the steady window")
    ap.add_argument("--settle-s", type=float, default=5.0, help="after the first screen, before the window")
    ap.add_argument("--step-s", type=float, default=STEP_S, help="one played optimizer step every this")
    ap.add_argument("--compare", type=Path, help="another checkout's TUI, measured in alternation")
    ap.add_argument("--out", type=Path, help="write the JSON there too")
    ap.add_argument(
        "--profile", type=Path, help="py-spy stacks of each steady window into this folder (not counted)"
    )
    ap.add_argument("--nvml-fields", action="store_true", help="NVML's CPU per field read (a GPU box)")
    ap.add_argument("--reads", type=int, default=50, help="with --nvml-fields: reads of each field")
    ap.add_argument("--micro", action="store_true", help="three pieces timed in isolation")
    ap.add_argument("--micro-of", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--play", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tui", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.play:
        play(a.step_s)
        return 0
    if a.tui:
        return tui(a.tui, a.step_s, a.rest)
    if a.micro_of:
        print(json.dumps(micro(a.micro_of, Path(a.rest[0]))))
        return 0
    if a.nvml_fields:
        sys.path.insert(0, str(ROOT))
        text = json.dumps(nvml_fields(a.reads), indent=1)
        print(text)
        if a.out:  # the one GPU run of this mode (2026-12-02) lost all but its tail without it
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(text + "\n")
        return 0

    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_runs import FULL, bench_env, write_config, write_tokens

    work = Path(tempfile.mkdtemp(prefix="tui-cpu-"))
    try:
        env = bench_env(work / "home")
        # the trainer is played, so its config need only start here: where bitsandbytes (the gpu
        # extra, QLoRA's kernels) is not installed, the same run as LoRA with a torch optimizer
        import dataclasses
        import importlib.util

        shape = FULL
        if importlib.util.find_spec("bitsandbytes") is None:
            shape = dataclasses.replace(FULL, method="lora")
        extra = {} if shape is FULL else {"training.optimizer": "adamw_torch"}
        config = write_config(
            work / "run.yaml", shape, write_tokens(work / "tokens.jsonl", shape, 8), 100, **extra
        )
        checkouts = [ROOT] if a.compare is None else [a.compare.resolve(), ROOT]
        compile_bytecode(checkouts, env)
        if a.micro:
            pieces = {}
            for checkout in checkouts:
                command = [sys.executable, __file__, "--micro-of", str(checkout), "--", str(config)]
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                pieces[str(checkout)] = json.loads(done.stdout)
            print(json.dumps({"bench": "tui_cpu --micro", "load_avg": os.getloadavg(), **pieces}, indent=1))
            return 0
        order = []
        for i in range(a.rounds):  # A B B A ...: a drift of the machine weighs on both alike
            order += checkouts if i % 2 == 0 else checkouts[::-1]
        rounds = [one_round(checkout, config, env, a, a.profile) for checkout in order]
        result = {
            "bench": "tui_cpu",
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.gmtime()),
            "machine": {
                "host": platform.node(),
                "cpus": os.cpu_count(),
                "cpu": platform.processor() or platform.machine(),
                "python": platform.python_version(),
                "load_avg": os.getloadavg(),
            },
            "versions": {name: metadata.version(name) for name in ("textual", "rich", "psutil")},
            "settings": {
                "window_s": a.window_s,
                "settle_s": a.settle_s,
                "step_s": a.step_s,
                "first_screen_bytes": FIRST_SCREEN_BYTES,
            },
            "order": [str(c) for c in order],
            "runs": rounds,
            "by_checkout": {
                str(c): summary([r for r in rounds if r["checkout"] == str(c)]) for c in checkouts
            },
        }
        text = json.dumps(result, indent=1)
        print(text)
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(text + "\n")
        return 0
    finally:  # the players were stopped: their run directories go
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
