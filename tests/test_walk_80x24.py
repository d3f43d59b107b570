"""Issue 43, the second walk at 80x24: what a new user saw, each as a pilot at 80x24."""

from __future__ import annotations

from support.pilot import event, events_until_step, make_app, screen_text, scripted, wait_for

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
