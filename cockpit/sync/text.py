"""The sync state in words: a `sync` event's line (the events panel, --no-ui), the run panel's row,
and `cockpit runs`' line. Pure: the state's `sync` (cockpit.run.state.RunState.sync) and a time in."""

from __future__ import annotations

from typing import Any

from cockpit import fmt


def seconds_text(seconds: float) -> str:
    """A lag for people: `3 s` under a minute, else `0:01:10`."""
    return f"{seconds:.0f} s" if seconds < 59.5 else fmt.duration(seconds)


def event_line(item: dict[str, Any]) -> str | None:
    status, target = item.get("status"), item.get("target")
    if status == "started":
        return f"sync: each checkpoint and the record go to {target}, in the background"
    if status == "synced":
        size = fmt.size(item.get("bytes"))
        if item.get("what") == "final":
            return f"sync: final/ ({size}) is on {target}"
        lag = item.get("lag_s")
        after = f", {seconds_text(lag)} after its save" if isinstance(lag, (int, float)) else ""
        removed = item.get("removed") or []
        gone = f"; {', '.join(removed)} removed there" if removed else ""
        return f"sync: {item.get('checkpoint')} (step {item.get('step')}, {size}) is on {target}{after}{gone}"
    if status == "failed":
        what = "the record" if item.get("what") == "record" else item.get("checkpoint")
        retry = item.get("retry_s")
        then = (
            f"tries again in {seconds_text(retry)}" if isinstance(retry, (int, float)) else "not tried again"
        )
        return (
            f"sync: {what} not on {target} (failure {item.get('failures')}, {item.get('kind')}: "
            f"{item.get('reason')}); {then}"
        )
    if status == "restored":
        return f"sync: this run directory was rebuilt from {target}, {restored_from(item)}"
    return None


def restored_from(item: dict[str, Any]) -> str:
    if item.get("checkpoint"):
        return f"at {item['checkpoint']} (step {item.get('step')})"
    return "with no checkpoint (it begins again at step 0)"


def _waiting(sync: dict[str, Any]) -> dict[str, Any] | None:
    """The newest checkpoint saved and not yet on the target: {step, ts}."""
    saved, step = sync.get("saved") or {}, sync.get("step")
    if isinstance(saved.get("step"), int) and (step is None or saved["step"] > step):
        return dict(saved)
    return None


def panel_text(sync: dict[str, Any], now_ts: float | None) -> str:
    """The run panel's row, short: `step 8, 3 s lag`, `step 8; step 12 waits 0:00:41`, `...; 2 failed:
    network`."""
    step, lag = sync.get("step"), sync.get("lag_s")
    if step is None:
        text = "nothing copied yet"
    else:
        text = f"step {step}" + (f", {seconds_text(lag)} lag" if isinstance(lag, (int, float)) else "")
    waiting = _waiting(sync)
    if waiting is not None and isinstance(waiting.get("ts"), (int, float)) and now_ts is not None:
        text += f"; step {waiting['step']} waits {seconds_text(max(0.0, now_ts - waiting['ts']))}"
    if sync.get("final"):
        text += ", final/"
    if sync.get("failing"):
        text += f"; {sync['failing']} failed: {sync.get('kind')}"
    return text


def runs_line(sync: dict[str, Any]) -> str | None:
    """`cockpit runs`' line under a run that syncs: what is on the target, what is not, the failures."""
    if not sync:
        return None
    target = sync.get("target")
    if sync.get("step") is None:
        text = f"sync: nothing on {target} yet"
    else:
        lag = sync.get("lag_s")
        after = f", {seconds_text(lag)} after its save" if isinstance(lag, (int, float)) else ""
        text = f"sync: {sync.get('checkpoint')} (step {sync['step']}) on {target}{after}"
    if sync.get("final"):
        text += "; final/ too"
    waiting = _waiting(sync)
    if waiting is not None:
        text += f"; checkpoint-{waiting['step']} not copied"
    if sync.get("failing"):
        text += f"; {sync['failing']} failed tries since, the last: {sync.get('kind')}: {sync.get('reason')}"
    restored = sync.get("restored")
    if restored:
        text += f"; rebuilt from it {restored_from(restored)}"
    return text
