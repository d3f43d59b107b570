"""Issue 43, the second walk at 80x24: what a new user saw, each as a pilot at 80x24."""

from __future__ import annotations

import json
from pathlib import Path

from support.pilot import (
    RUN_ID,
    event,
    events_until_step,
    make_app,
    screen_text,
    scripted,
    wait_for,
    write_gpu_recording,
)

from cockpit.live.session import RunSession

SIZE = (80, 24)
EVAL_FIXTURE = Path(__file__).parent / "fixtures" / "eval_run_events.jsonl"


def header(app) -> str:
    return "\n".join(screen_text(app).splitlines()[:3])


async def test_status_lines_do_not_outlive_what_they_tell(tmp_path):
    """Finding 4: "resuming from checkpoint-3" stays only until a step is trained; sampling after
    training is the run still running, not "starting"."""
    before = [e for e in events_until_step(3) if e["type"] != "log"]
    logs = [e for e in events_until_step(3) if e["type"] == "log"]
    at = before[-1]["ts"]
    resumed = [*before, event("phase", at, phase="training", message="resuming from checkpoint-3")]
    session = scripted(tmp_path, resumed)
    app = make_app(session, clock_ts=at + 5)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "resuming from checkpoint-3" in header(app))
        session.feed(logs)
        await wait_for(pilot, lambda: session.state.step == 3)
        await pilot.pause(0.1)
        assert "resuming from" not in screen_text(app)
        session.feed([event("phase", at + 1, phase="sampling", message="3 prompts with the final weights")])
        await wait_for(pilot, lambda: "sampling" in header(app))
        assert "starting" not in header(app) and "running" in header(app)


def footer(app) -> str:
    return screen_text(app).splitlines()[-1]


async def test_m_before_the_first_sample_is_offered_and_says_when_they_come(tmp_path):
    """Finding 5: with prompts to answer, `m` is in the footer before the first sample and says
    they are coming; without prompts it is not offered, and pressed, says what gives samples."""
    with_prompts = [dict(e, sample_prompts=3) if e["type"] == "data" else e for e in events_until_step(3)]
    for events, offered, said in (
        (with_prompts, True, "has no samples yet"),
        (events_until_step(3), False, "its config sets no eval.prompts"),
    ):
        session = scripted(tmp_path, events)
        app = make_app(session)
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_for(pilot, lambda s=session: s.state.step == 3)
            # the footer drawn with the state at step 3 (a loaded box can take longer than a pause)
            await wait_for(pilot, lambda a=app: footer(a).strip() != "")
            await pilot.pause(0.1)
            assert not session.state.samples and ("m Samples" in footer(app)) == offered
            await pilot.press("m")
            await wait_for(pilot, lambda a=app, t=said: any(t in str(n.message) for n in a._notifications))
            await pilot.pause(0.1)
            assert "has no" in screen_text(app)  # the toast, on screen


async def test_h_with_the_gpu_strip_hidden_brings_it_back_at_the_new_span(tmp_path):
    """Finding 5: `h` changes the span of the GPU strip's sparklines: hidden (`g`), it shows again."""
    session = RunSession(write_gpu_recording(tmp_path / RUN_ID), recorded=True)
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        view = app.run_view
        await wait_for(pilot, lambda: view.has_telemetry and view.updates_shown > 0)
        await pilot.press("g")
        await wait_for(pilot, lambda: not view.telemetry_wanted)
        span = view.span_s
        await pilot.press("h")
        await wait_for(pilot, lambda: view.telemetry_wanted)
        assert view.span_s != span


async def test_export_t_is_in_the_footer_and_merges_when_the_adapter_is_alone(tmp_path, monkeypatch):
    """Finding 5: on the export screen `t` is offered; with merge off it turns the merge on (the
    dtype is the merged model's), then goes through the dtypes."""
    from test_export_screen import app_of, ended_run, open_export

    run = ended_run.__wrapped__(tmp_path, monkeypatch)
    async with app_of(run).run_test(size=SIZE) as pilot:
        screen = await open_export(pilot)
        assert not screen.merge and "t Dtype" in footer(pilot.app)
        await pilot.press("t")
        assert screen.merge and screen.dtype == "bf16"
        await pilot.press("t")
        assert screen.dtype != "bf16" and "t Dtype" in footer(pilot.app)


async def test_eval_loss_checkpoints_and_the_log_pane_are_whole_at_80x24(tmp_path):
    """Finding 6: the eval loss row, a checkpoint's size and eval loss, and the trainer's metrics
    dicts in the `l` pane (values, not Python's punctuation) are whole at 80 columns."""
    recorded = [json.loads(line) for line in EVAL_FIXTURE.read_text().splitlines()]
    before = [e for e in recorded if e["type"] != "done" and e.get("phase") not in ("saving", "done")]
    ts = before[-1]["ts"]
    path = before[-1].get("path", "/runs/x/checkpoints/checkpoint-8").rsplit("/", 1)[0] + "/checkpoint-1200"
    late = [
        event(
            "eval", ts + 1, step=1200, stage="train", eval_loss=0.8844, best_step=900, best_eval_loss=0.8123
        ),
        event(
            "checkpoint",
            ts + 2,
            step=1200,
            path=path,
            bytes=int(59.7 * 2**20),
            eval_loss=0.8844,
            best_checkpoint="checkpoint-1200",
            best_eval_loss=0.8844,
            removed=[],
        ),
    ]
    session = scripted(tmp_path, [*before, *late])
    (session.run.path / "backend.log").write_text(
        "{'loss': '4.916', 'grad_norm': '2.13', 'learning_rate': '0.0002', 'epoch': '0.5'}\n"
    )
    app = make_app(session, clock_ts=ts + 5)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(session.state.checkpoints) == 2)
        await pilot.pause(0.1)
        text = screen_text(app)
        assert "eval loss     0.8844, best 0.8123 at 900 " in text
        assert (
            "★ step 1200 59.7 MiB  0.8844" in text
            and "checkpoints · eval, ★ best" in text
            and "…" not in text
        )
        await pilot.press("l")
        await wait_for(pilot, lambda: "loss 4.916  grad_norm 2.13" in screen_text(app))
        assert "{'loss'" not in screen_text(app)


async def test_the_whole_summary_leaves_the_loss_plot_its_border_and_axis(tmp_path):
    """Finding 6: `f` on an ended run at 80x24 (a ten-row summary): the loss panel keeps its x-axis
    and bottom border (the events give their rows)."""
    from support.pilot import ScriptedSession
    from test_tui_snapshots import budget_stopped

    from cockpit.run.rundir import RunDir

    run = RunDir(tmp_path / RUN_ID)
    run.path.mkdir()
    app = make_app(ScriptedSession(run, budget_stopped(run), alive=False))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.session.state.ended and app.run_view.updates_shown > 0)
        await pilot.press("f")
        await wait_for(pilot, lambda: "on_end:" in screen_text(app))
        lines = screen_text(app).splitlines()
        assert any("step 40│" in line for line in lines)  # the plot's x-axis, to its last step
        assert any("╰── lr now" in line for line in lines)  # its bottom border


async def test_the_learning_rate_is_drawn_apart_from_the_loss(tmp_path):
    """Finding 8: at 80x24 the lr has a strip of its own under the loss, labelled "lr", with its
    scale in the panel's subtitle; no loss row carries a learning-rate dot."""
    from widgets.loss_plot import LossPlot

    session = scripted(tmp_path, events_until_step(30))
    app = make_app(session)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: session.state.step == 30)
        await pilot.pause(0.1)
        plot = app.run_view.query_one(LossPlot)
        rows = [row for row in plot._plot_rows(tuple(plot.content_size)) if row.is_plot]
        strip = [row for row in rows if row.lr_columns]
        assert strip and rows[-len(strip) :] == strip and strip[0].label.strip() == "lr"
        assert any(row.text.strip() for row in strip)  # the warm-up is drawn there
        text = screen_text(app)
        assert any("lr now" in line for line in text.splitlines())
        assert any(
            line.split("│")[-2].lstrip().startswith("lr ") for line in text.splitlines() if "│" in line
        )


async def test_the_demo_shows_no_price_nobody_gave(tmp_path):
    """Finding 9: the shipped demos set no cost.price_per_hour; a demo run's view says where a
    price comes from ("- set cost.price_per_hour") instead of `cost $0.19 at $1.20/h`."""
    import shutil

    from support.pilot import EVENTS

    from cockpit.config.load import load_config
    from cockpit.run.rundir import RunDir

    demo = Path(__file__).parent.parent / "cockpit" / "data" / "demo"
    assert all(
        load_config(demo / name).cost.price_per_hour is None for name in ("demo.yaml", "demo-real.yaml")
    )
    run = RunDir(tmp_path / RUN_ID)
    run.path.mkdir()
    shutil.copy(demo / "demo.yaml", run.config_path)
    events = [
        dict(e, price_per_hour=None) if e["type"] == "hello" else e for e in EVENTS
    ]  # as the trainer says it
    run.events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    app = make_app(RunSession(run, recorded=True))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.session.state.ended and app.run_view.updates_shown > 0)
        await pilot.pause(0.1)
        text = screen_text(app)
        assert "cost          - set cost.price_per_hour" in text and "$" not in text


async def test_the_pickers_summary_names_a_few_tied_cards_and_counts_the_rest(tmp_path, monkeypatch):
    """Finding 6: the picker's summary stopped mid-list ("A100 40GB PCIe, A100 40GB") for a tiny
    model that every card runs alike; it names three and says how many more."""
    import datetime as dt

    from cockpit.config import load as config_load
    from cockpit.gpus.catalog import load_catalog
    from screens.picker.app import PickerApp

    monkeypatch.setenv("COCKPIT_CONFIG", str(tmp_path / "no-config"))
    now = dt.datetime(2026, 12, 1, 10, 0)
    cfg = config_load.load_config(None, ["model.name=synthetic:tiny"])
    app = PickerApp(cfg, catalog=load_catalog(today=now.date()), clock=lambda: now, out_dir=tmp_path / "out")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(
            pilot, lambda: "as fast and dearer" in " ".join(screen_text(app).split()), timeout_s=10
        )
        summary = " ".join(screen_text(app).split())
        assert "more)" in summary and "as fast and dearer: " in summary
        said = summary.split("as fast and dearer: ")[1].split(")")[0]
        assert said.count(",") == 2 and " and " in said  # three named, then how many more


async def test_the_start_notice_shows_every_problem_and_its_fix_at_80x24(tmp_path):
    """Finding 6: the demo's start notice (one failure, three warnings, as this CPU box gives them)
    hid the fourth warning's fix behind a scroll at 80x24; every fix is on screen now."""
    from support.pilot import LAST_TS

    from cockpit.preflight.checks.base import CheckResult
    from screens.preflight.notice import PreflightNotice
    from screens.run.app import CockpitApp

    virtual = "cache is on a virtual device, not NVMe: run the full preflight to measure its speed."
    problems = [
        CheckResult(
            "gpu.visible",
            "gpu",
            "GPU visible to NVML",
            "fail",
            value="NVML did not start: NVML Shared Library Not Found",
            fix="install or load the NVIDIA driver (`nvidia-smi` must work); in a "
            "container, start it with --gpus all",
        ),
        CheckResult(
            "host.cpu",
            "host",
            "CPU cores available to this process",
            "warn",
            value="2 usable cores (CPU affinity) for 1 GPU",
            fix="Only 2 cores for tokenisation and data "
            "loading: the GPU will wait on the CPU; rent an instance with >= 4 vCPUs or pre-tokenise the "
            "dataset and keep dataloader_num_workers small.",
        ),
        CheckResult(
            "disk.cache",
            "disk",
            "Storage under the cache directory",
            "warn",
            value="virtual (ext4 on vda)",
            fix=virtual,
        ),
        CheckResult(
            "disk.runs",
            "disk",
            "Storage under the runs directory",
            "warn",
            value="virtual (ext4 on vda)",
            fix=virtual.replace("cache", "runs"),
        ),
    ]
    app = CockpitApp(
        scripted(tmp_path, events_until_step(3)),
        poll_interval_s=0.02,
        clock=lambda: LAST_TS,
        preflight_problems=problems,
    )
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, PreflightNotice))
        await pilot.pause(0.2)
        text = " ".join(screen_text(app).replace("█", " ").split())
        assert (
            "fix: runs is on a virtual device, not NVMe: run the full preflight to measure its speed." in text
        )
        assert app.screen.query_one("#notice-body").max_scroll_y == 0  # nothing behind a scroll


async def test_the_whole_summary_under_the_gpu_strip_and_the_doctor_leaves_the_plot_whole(tmp_path):
    """Finding 6, as the demo showed it: `f` on an ended run at 80x24 with the GPU/host strip and two
    doctor lines: the loss panel keeps its axis and bottom border (checkpoints and events give way)."""
    import shutil
    import tempfile

    from support.pilot import EVENTS, INPUT_BOUND, ScriptedWatch, fake_samples
    from test_tui_snapshots import NO_GPU, watched_run

    short = Path(tempfile.mkdtemp(prefix="c43-"))  # a path on one row: the summary as the demo's, 7 rows
    try:
        await _whole_summary_under_the_strip(
            short,
            watched_run(short, ScriptedWatch(fake_samples(), [INPUT_BOUND, NO_GPU]), EVENTS, history=False),
        )
    finally:
        shutil.rmtree(short, ignore_errors=True)


async def _whole_summary_under_the_strip(folder, app) -> None:
    run = app.session.run
    run.final_dir.mkdir(parents=True)
    (run.final_dir / "adapter_config.json").write_text("{}")  # the summary names it and the next commands
    (run.final_dir / "adapter_model.safetensors").write_bytes(b"0")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(
            pilot, lambda: app.session.state.ended and app.run_view.telemetry_shown > 0, timeout_s=10
        )
        await pilot.press("f")
        await wait_for(pilot, lambda: "next:" in screen_text(app))
        await pilot.pause(0.2)
        lines = screen_text(app).splitlines()
        assert any("step 88│" in line for line in lines) and any("╰── lr now" in line for line in lines)
