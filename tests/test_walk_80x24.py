"""Issue 43, the second walk at 80x24: what a new user saw, each as a pilot at 80x24."""

from __future__ import annotations

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
