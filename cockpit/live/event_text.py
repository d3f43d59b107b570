"""One plain line for each event worth a line of its own: the headless view's lines and the
TUI's event log say the same thing (log events are throttled by their callers)."""

from __future__ import annotations

from cockpit import fmt
from cockpit.live.state import notice_text
from cockpit.protocol.wire import Fault


def describe(item: dict | Fault) -> str | None:
    """One plain line for a message worth a line of its own (log events are throttled elsewhere)."""
    notice = notice_text(item)
    if isinstance(item, Fault) or (notice and item.get("type") != "hello"):
        return notice
    kind = item.get("type")
    if kind == "hello":
        dev = item.get("device") or {}
        resumed = (
            f", resuming from {item['resume_from'].rsplit('/', 1)[-1]}" if item.get("resume_from") else ""
        )
        where = f"{dev.get('kind')} {dev.get('name')} ({item.get('precision')})"
        return f"trainer pid {item.get('pid')} on {where}{resumed}"
    if kind == "phase":
        return f"phase: {item.get('phase')} {item.get('message', '')}".rstrip()
    if kind == "data":
        return (
            f"data: {item.get('samples')} samples ({item.get('format')}), tokens min/mean/p95/max "
            f"{item.get('tokens_min')}/{item.get('tokens_mean')}/{item.get('tokens_p95')}/"
            f"{item.get('tokens_max')}, "
            f"{item.get('truncated')} truncated at {item.get('max_length')}, {item.get('dropped')} dropped"
        )
    if kind == "model":
        return (
            f"model: {item.get('name')} ({item.get('method')}), {item.get('params_trainable'):,} of "
            f"{item.get('params_total'):,} params trainable, loaded in {item.get('load_s')} s"
        )
    if kind == "speed_plan":
        return speed_plan_lines(item)
    if kind == "train_begin":
        return (
            f"training: {item.get('total_steps')} steps from {item.get('start_step')}, micro-batch "
            f"{item.get('micro_batch_size')} x {item.get('gradient_accumulation_steps')}, length "
            f"{item.get('max_length')}, {item.get('precision')}, gradient checkpointing "
            f"{'on' if item.get('gradient_checkpointing') else 'off'}, {item.get('optimizer')}"
        )
    if kind == "checkpoint":
        return (
            f"checkpoint: step {item.get('step')} ({fmt.gib(item.get('bytes'), 3)}, {item.get('save_s')} s)"
        )
    if kind == "error":
        return f"ERROR ({item.get('kind')}): {item.get('message')}\n  fix: {item.get('hint')}"
    if kind == "done":
        out = f", output in {item['output']}" if item.get("output") else ""
        loss = fmt.loss(item.get("train_loss"))
        return f"done: {item.get('status')} at step {item.get('step')}, train loss {loss}{out}"
    if kind == "exit":
        return item.get("reason") or "trainer exited"  # the reason names the trainer already
    if kind == "config_change":
        changes = ", ".join(f"{k}={v}" for k, v in (item.get("changes") or {}).items())
        why = f"OOM remedy: {item.get('title')}" if item.get("reason") == "oom" else item.get("reason")
        return f"config changed ({why}): {changes}; the old config is in {item.get('previous')}"
    return None


def speed_plan_lines(item: dict) -> str:
    """The speed plan: one line per choice, with its reason (who chose it: auto, yours, fixed)."""
    lines = [f"speed: {item.get('mode')}"]
    for choice in item.get("choices") or []:
        lines.append(
            f"  {choice.get('name')}: {choice.get('value')} [{choice.get('source')}] - {choice.get('reason')}"
        )
    return "\n".join(lines)
