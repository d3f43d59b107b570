"""Snapshots of the run screen in its main states, from the recorded demo run (88 steps, CPU),
and with GPU and host panels fed by a watch double over fake NVML (as on an H100), the
doctor, no GPU, four GPUs, and a replay.

Deterministic: fixed terminal sizes, a fixed clock, recorded events and telemetry, samples
taken with a fixed clock, no cursor, Textual pinned. After `--snapshot-update`, read
snapshot_report.html before accepting.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
from pathlib import Path

from support.nvml_fake import FakeGpu
from support.pilot import (
    EVENTS,
    FIXTURE,
    GPU_BINS,
    INPUT_BOUND,
    RUN_ID,
    TRAINER_PID,
    ScriptedSession,
    ScriptedWatch,
    events_until_step,
    fake_samples,
    gpu_events,
    write_gpu_recording,
)

from cockpit.doctor.window import Finding
from cockpit.gpus.catalog import find_card
from cockpit.live.replay import ReplaySession
from cockpit.live.session import RunSession
from cockpit.models.shape import load_shape
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState
from cockpit.speed import flops
from screens.run.app import CockpitApp
from screens.run.figures import tokens_text

OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which "
    "1.02 GiB is free. Including non-PyTorch memory, this process has 22.61 GiB memory in use."
)
OOM_HINT = (
    "The GPU ran out of memory. Turn on training.gradient_checkpointing, lower training.micro_batch_size "
    "(raise gradient_accumulation_steps to keep the effective batch), or shorten training.max_length. "
    "The CUDA context is not reusable: start a new run or resume."
)


def run_dir(tmp_path: Path) -> RunDir:
    path = tmp_path / RUN_ID
    path.mkdir()
    return RunDir(path)


def app_for(session, events: list[dict]) -> CockpitApp:
    now = events[-1]["ts"] + 2.0  # two seconds after the last event
    return CockpitApp(session, poll_interval_s=0.02, clock=lambda: now)


async def drawn(pilot) -> None:
    """Until the follow thread's first update is on screen."""
    deadline = time.monotonic() + 5
    while pilot.app.run_view.updates_shown == 0:
        assert time.monotonic() < deadline, "the run view was never drawn"
        await pilot.pause(0.02)
    await pilot.pause()


def finished_replay(tmp_path: Path) -> CockpitApp:
    run = run_dir(tmp_path)
    shutil.copy(FIXTURE, run.events_path)
    return app_for(RunSession(run, recorded=True), EVENTS)


def mid_run(tmp_path: Path) -> CockpitApp:
    events = events_until_step(52)
    return app_for(ScriptedSession(run_dir(tmp_path), events), events)


def failed_run(tmp_path: Path) -> CockpitApp:
    events = events_until_step(30)
    error = {
        "v": 1,
        "type": "error",
        "ts": events[-1]["ts"] + 0.3,
        "kind": "oom",
        "message": OOM_MESSAGE,
        "hint": OOM_HINT,
        "phase": "training",
        "step": 31,
        "checkpoints": ["checkpoint-25"],
    }
    events = [*events, error]
    return app_for(ScriptedSession(run_dir(tmp_path), events, alive=False), events)


def paused_run(tmp_path: Path) -> CockpitApp:
    events = events_until_step(40)
    ts = events[-1]["ts"]
    events = [
        *events,
        {
            "v": 1,
            "type": "command",
            "ts": ts + 0.05,
            "name": "pause",
            "accepted": True,
            "detail": "pausing after the current step",
        },
        {"v": 1, "type": "paused", "ts": ts + 0.1, "step": 40},
    ]
    return app_for(ScriptedSession(run_dir(tmp_path), events), events)


def test_finished_replay(snap_compare, tmp_path):
    assert snap_compare(finished_replay(tmp_path), terminal_size=(100, 32), run_before=drawn)


def test_finished_replay_80x24(snap_compare, tmp_path):
    assert snap_compare(finished_replay(tmp_path), terminal_size=(80, 24), run_before=drawn)


def test_mid_run(snap_compare, tmp_path):
    assert snap_compare(mid_run(tmp_path), terminal_size=(100, 32), run_before=drawn)


def test_mid_run_80x24(snap_compare, tmp_path):
    assert snap_compare(mid_run(tmp_path), terminal_size=(80, 24), run_before=drawn)


def test_mid_run_wide(snap_compare, tmp_path):
    assert snap_compare(mid_run(tmp_path), terminal_size=(160, 48), run_before=drawn)


def test_failed_oom(snap_compare, tmp_path):
    assert snap_compare(failed_run(tmp_path), terminal_size=(100, 32), run_before=drawn)


def test_failed_oom_80x24(snap_compare, tmp_path):
    assert snap_compare(failed_run(tmp_path), terminal_size=(80, 24), run_before=drawn)


def test_paused(snap_compare, tmp_path):
    assert snap_compare(paused_run(tmp_path), terminal_size=(100, 32), run_before=drawn)


def test_stop_confirmation(snap_compare, tmp_path):
    async def ask_to_stop(pilot) -> None:
        await drawn(pilot)
        await pilot.press("x")

    assert snap_compare(mid_run(tmp_path), terminal_size=(80, 24), run_before=ask_to_stop)


# ---------------------------------------------------------------- GPU, host and the doctor

NO_GPU = Finding(
    "no_gpu",
    "info",
    "Training without a GPU?",
    "NVML: no_driver for 60 of 60 s while the run trains on cpu (x86_64)",
    "Check nvidia-smi and the driver, or pick an instance with a GPU: on the CPU a fine-tune of a 7B "
    "model takes days.",
    0.0,
)


async def telemetry_drawn(pilot) -> None:
    """Until the events and the watch's first answer (after the recorded history) are on screen."""
    await drawn(pilot)
    view = pilot.app.run_view
    history = (view.session.run.path / "telemetry.jsonl").exists()
    deadline = time.monotonic() + 5
    while view.telemetry_shown < 1 + history:
        assert time.monotonic() < deadline, "the telemetry was never drawn"
        await pilot.pause(0.02)
    await pilot.pause()


def watched_run(tmp_path: Path, watch: ScriptedWatch, events: list[dict], history: bool = True) -> CockpitApp:
    run = run_dir(tmp_path)
    if history:
        lines = [json.dumps(b) for b in GPU_BINS if b["ts_end"] < events[-1]["ts"]]
        (run.path / "telemetry.jsonl").write_text("".join(line + "\n" for line in lines))
    now = events[-1]["ts"] + 2.0
    return CockpitApp(ScriptedSession(run, events), watch=watch, poll_interval_s=0.02, clock=lambda: now)


def gpu_mid_run(tmp_path: Path, findings: list[Finding] = ()) -> CockpitApp:
    return watched_run(tmp_path, ScriptedWatch(fake_samples(), findings), gpu_events(events_until_step(52)))


def test_gpu_run(snap_compare, tmp_path):
    assert snap_compare(gpu_mid_run(tmp_path), terminal_size=(100, 32), run_before=telemetry_drawn)


def test_gpu_run_80x24(snap_compare, tmp_path):
    assert snap_compare(gpu_mid_run(tmp_path), terminal_size=(80, 24), run_before=telemetry_drawn)


def mfu_events(events: list[dict]) -> list[dict]:
    """The GPU recording as a 7B QLoRA run (all linears, r 16, every layer checkpointed, rows of 512)
    on its H100, with the speed plan's FLOPs per token, so the run view shows MFU: at the recorded
    ~3.9k tokens/s x 27.1 GFLOP a token over the H100 SXM's 989 dense bf16 TFLOPS, about 11%."""
    shape = load_shape("synthetic:llama-2-7b")
    card = find_card("NVIDIA H100 80GB HBM3")
    context = flops.attention_context([512])
    per_token = flops.flops_per_token(shape, "qlora", 16, "all-linear", context, shape.num_layers)
    out = []
    for item in events:
        if item["type"] == "model":
            item = dict(item, name="synthetic:llama-2-7b", method="qlora")
        elif item["type"] == "train_begin":
            info = {
                "model_per_token": round(per_token.model),
                "hardware_per_token": round(per_token.hardware),
                "attention_context": context,
                "checkpoint_layers": shape.num_layers,
                "peak_flops": card.bf16_dense_tflops * 1e12,
                "peak_source": f"{card.name}, dense bf16 (catalog)",
            }
            out.append(
                {"v": 1, "type": "speed_plan", "ts": item["ts"] - 0.001, "mode": "auto", "flops": info}
            )
        out.append(item)
    return out


def test_gpu_run_mfu_80x24(snap_compare, tmp_path):
    events = mfu_events(gpu_events(events_until_step(52)))
    assert tokens_text(state_of(events)) == "3892, MFU 11%"  # 3892.1 x 27.07e9 / 989e12 = 10.7%
    app = watched_run(tmp_path, ScriptedWatch(fake_samples(), []), events)
    assert snap_compare(app, terminal_size=(80, 24), run_before=telemetry_drawn)


def state_of(events: list[dict]) -> RunState:
    state = RunState()
    for item in events:
        state.apply(item)
    return state


def test_doctor_finding(snap_compare, tmp_path):
    app = gpu_mid_run(tmp_path, [INPUT_BOUND])
    assert snap_compare(app, terminal_size=(100, 32), run_before=telemetry_drawn)


def test_doctor_finding_80x24(snap_compare, tmp_path):
    app = gpu_mid_run(tmp_path, [INPUT_BOUND])
    assert snap_compare(app, terminal_size=(80, 24), run_before=telemetry_drawn)


def test_no_gpu(snap_compare, tmp_path):
    watch = ScriptedWatch(fake_samples(init_error="driver_not_loaded"), [NO_GPU])
    app = watched_run(tmp_path, watch, events_until_step(52), history=False)
    assert snap_compare(app, terminal_size=(100, 32), run_before=telemetry_drawn)


def test_four_gpus(snap_compare, tmp_path):
    gpus = [
        FakeGpu(processes=[(TRAINER_PID, 34 << 30)]),
        FakeGpu(util_pct=91, temp_c=84, sm_clock_mhz=1410, clock_event_reasons=0x20 | 0x4),
        FakeGpu(lost_at_call=1),
        FakeGpu(util_pct=0, mem_used_bytes=1 << 29, power_mw=71_000, temp_c=33, sm_clock_mhz=345),
    ]
    watch = ScriptedWatch(fake_samples(gpus=gpus))
    app = watched_run(tmp_path, watch, gpu_events(events_until_step(52)), history=False)
    assert snap_compare(app, terminal_size=(100, 32), run_before=telemetry_drawn)


def test_log_tail(snap_compare, tmp_path):
    app = gpu_mid_run(tmp_path)
    log = "".join(f"[rank0] step {n}: loss {7 - n / 10:.2f}\n" for n in range(40))
    app.session.run.log_path.write_text(
        log + "UserWarning: `use_cache=True` is incompatible with gradient checkpointing\n"
    )

    async def show_log(pilot) -> None:
        await telemetry_drawn(pilot)
        await pilot.press("l")
        deadline = time.monotonic() + 5
        while not pilot.app.run_view.query_one("#log").lines:
            assert time.monotonic() < deadline, "the log tail was never drawn"
            await pilot.pause(0.02)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 40), run_before=show_log)


def halfway_replay(tmp_path):
    """A replay at x10 of the GPU recording, stood at 16 s in (step 46), and what waits for it."""
    run = write_gpu_recording(tmp_path / RUN_ID)
    calls = itertools.count()
    # the replay starts at the clock's first reading, then stands 1.6 s (16 s of the run at x10) later
    session = ReplaySession(run, speed=10, clock=lambda: 0.0 if next(calls) == 0 else 1.6)
    app = CockpitApp(session, watch=session.watch, poll_interval_s=0.02)

    async def halfway(pilot) -> None:
        deadline = time.monotonic() + 5
        view = pilot.app.run_view
        while not (
            view.sample is not None
            and session.state.step == 46
            and view.query_one("#progress").step == 46  # drawn with the replay's label
        ):
            assert time.monotonic() < deadline, "the replay never reached 16 s"
            await pilot.pause(0.02)
        await pilot.pause()

    return app, halfway


def test_replay(snap_compare, tmp_path):
    app, halfway = halfway_replay(tmp_path)
    assert snap_compare(app, terminal_size=(100, 32), run_before=halfway)


def test_replay_80x24(snap_compare, tmp_path):
    """Its keys (- + [ ] besides the others) closer together, so that none is cut at 80 columns."""
    app, halfway = halfway_replay(tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=halfway)


# ---------------------------------------------------------------- several GPUs: spread and interconnect

RANK_PIDS = [TRAINER_PID + 1 + rank for rank in range(8)]  # torchrun's children, one per GPU


def ddp_events(ranks: list[int]) -> list[dict]:
    """The recording as a DDP run over len(ranks) GPUs of one node: the hello names the ranks' pids."""
    world = len(ranks)
    distributed = {"world_size": world, "nnodes": 1, "node_rank": 0, "gpus_per_node": world, "rank": 0}
    distributed.update(backend="nccl", strategy="ddp", pids=ranks)
    return [
        dict(item, distributed=distributed) if item["type"] == "hello" else item
        for item in gpu_events(events_until_step(52))
    ]


def eight_gpus(tmp_path: Path) -> CockpitApp:
    """Eight H100s joined by NVLink; GPU 5 runs hot, clocks down and works less: a straggler."""
    gpus = [
        FakeGpu(processes=[(pid, 61 << 30)], power_mw=640_000 + 3_000 * i) for i, pid in enumerate(RANK_PIDS)
    ]
    gpus[5] = FakeGpu(
        processes=[(RANK_PIDS[5], 61 << 30)],
        util_pct=61,
        power_mw=389_000,
        temp_c=86,
        sm_clock_mhz=1365,
        clock_event_reasons=0x20,
    )
    watch = ScriptedWatch(fake_samples(gpus=gpus))
    return watched_run(tmp_path, watch, ddp_events(RANK_PIDS), history=False)


def test_eight_gpus(snap_compare, tmp_path):
    assert snap_compare(eight_gpus(tmp_path), terminal_size=(100, 32), run_before=telemetry_drawn)


def test_eight_gpus_80x24(snap_compare, tmp_path):
    assert snap_compare(eight_gpus(tmp_path), terminal_size=(80, 24), run_before=telemetry_drawn)


def test_two_gpus_on_pcie(snap_compare, tmp_path):
    """Two consumer cards, no NVLink; the process lists name no pid of the trainer's (a container
    sees other pids than the host's NVML reports), so every GPU counts and the row says so."""
    card = dict(
        name="NVIDIA GeForce RTX 4090",
        nvlink_active=None,
        nvlink_speed_mbps=None,
        mem_total_bytes=24 << 30,
        power_limit_mw=450_000,
        power_default_limit_mw=450_000,
        sm_clock_max_mhz=2520,
        sm_clock_mhz=2520,
        pcie_gen=4,
        pcie_gen_max=4,
    )
    gpus = [
        FakeGpu(**card, util_pct=96, mem_used_bytes=int(20.2 * (1 << 30)), power_mw=402_000, temp_c=71),
        FakeGpu(**card, util_pct=93, mem_used_bytes=int(19.8 * (1 << 30)), power_mw=388_000, temp_c=69),
    ]
    watch = ScriptedWatch(fake_samples(gpus=gpus))
    app = watched_run(tmp_path, watch, ddp_events([1001, 1002]), history=False)
    assert snap_compare(app, terminal_size=(100, 32), run_before=telemetry_drawn)


# ---------------------------------------------------------------- a first hour at 80x24 (issue 16)


def test_paused_80x24(snap_compare, tmp_path):
    """The footer keeps every key when p reads Resume."""
    assert snap_compare(paused_run(tmp_path), terminal_size=(80, 24), run_before=drawn)


def test_mid_run_60x20(snap_compare, tmp_path):
    """d and q on the footer at 60 columns too."""
    assert snap_compare(mid_run(tmp_path), terminal_size=(60, 20), run_before=drawn)


def test_failed_while_starting_80x24(snap_compare, tmp_path):
    hello = next(e for e in EVENTS if e["type"] == "hello")
    events = [
        hello,
        {"v": 1, "type": "phase", "ts": hello["ts"] + 0.1, "phase": "starting", "message": "reading config"},
        {
            "v": 1,
            "type": "error",
            "ts": hello["ts"] + 0.2,
            "kind": "data",
            "message": "dataset column 'text' not found; columns are: instruction, output",
            "hint": "Set dataset.text_field or dataset.template.",
            "phase": "starting",
        },
    ]
    app = app_for(ScriptedSession(run_dir(tmp_path), events, alive=False), events)
    assert snap_compare(app, terminal_size=(80, 24), run_before=drawn)


# ---------------------------------------------------------------- the end of a run

# the summary names the adapter's folder: the run lives at a fixed path so the snapshot does not
# depend on pytest's temporary directory
SUMMARY_RUN = Path("/tmp/lora-cockpit-snapshot") / RUN_ID


def budget_stopped(run: RunDir) -> list[dict]:
    """Stopped at step 40 by cost.max_usd, its checkpoint on disk, then cost.on_end ran."""
    events = [dict(e, max_usd=0.0045) if e["type"] == "hello" else e for e in events_until_step(40)]
    ts = events[-1]["ts"]
    checkpoint = run.checkpoints_dir / "checkpoint-40"
    checkpoint.mkdir(parents=True)
    (checkpoint / "cockpit-complete.json").write_text('{"step": 40}')
    (run.path / "config.yaml").write_text(
        "model: {name: 'synthetic:tiny'}\n"
        "cost: {price_per_hour: 1.2, max_usd: 0.0045, on_end: 'sudo shutdown -h now'}\n"
    )
    message = "budget reached at step 40: $0.00450 spent of cost.max_usd $0.00450 ($1.20/h)"
    return [
        *events,
        {
            "v": 1,
            "type": "budget",
            "ts": ts + 0.01,
            "step": 40,
            "cost_usd": 0.0045,
            "max_usd": 0.0045,
            "message": message,
        },
        {
            "v": 1,
            "type": "checkpoint",
            "ts": ts + 0.2,
            "step": 40,
            "path": str(checkpoint),
            "bytes": 13_500_000,
            "save_s": 0.1,
            "removed": [],
        },
        {
            "v": 1,
            "type": "done",
            "ts": ts + 0.3,
            "status": "stopped",
            "step": 40,
            "total_steps": 88,
            "train_loss": 3.1,
            "reason": "budget",
            "message": "stopped at the budget; checkpoint-40 saved",
        },
        {
            "v": 1,
            "type": "end_command",
            "ts": ts + 2.0,
            "state": "started",
            "command": "sudo shutdown -h now",
            "run_status": "stopped",
        },
        {
            "v": 1,
            "type": "end_command",
            "ts": ts + 2.1,
            "state": "finished",
            "command": "sudo shutdown -h now",
            "run_status": "stopped",
            "returncode": 0,
            "duration_s": 0.1,
        },
    ]


def budget_stopped_snapshot(snap_compare, run_path: Path, run_before) -> bool:
    shutil.rmtree(run_path.parent, ignore_errors=True)
    run_path.mkdir(parents=True)
    try:
        run = RunDir(run_path)
        events = budget_stopped(run)
        app = app_for(ScriptedSession(run, events, alive=False), events)
        return snap_compare(app, terminal_size=(80, 24), run_before=run_before)
    finally:
        shutil.rmtree(run_path.parent, ignore_errors=True)


def test_ended_summary_80x24(snap_compare, tmp_path):
    """At 80x24 the summary in one line (no folder named): the run panel's cost, the checkpoints
    and the events stay on screen."""
    assert budget_stopped_snapshot(snap_compare, tmp_path / "runs" / RUN_ID, drawn)


def test_ended_summary_whole_80x24(snap_compare):
    """`f`: the whole summary (the restart with a budget, the end command), the panels under it."""

    async def unfolded(pilot) -> None:
        await drawn(pilot)
        await pilot.press("f")
        await pilot.pause()

    assert budget_stopped_snapshot(snap_compare, SUMMARY_RUN, unfolded)
