"""One plain line for each event worth a line of its own: the headless view's lines and the
TUI's event log say the same thing (log events are throttled by their callers)."""

from __future__ import annotations

from typing import Any

from cockpit import fmt
from cockpit.live import preference_text
from cockpit.protocol.wire import Fault
from cockpit.run.state import notice_text
from cockpit.sync import text as sync_text


def describe(item: dict[str, Any] | Fault) -> str | None:
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
        pid = f" pid {item['pid']}" if item.get("pid") is not None else ""  # a recording may not keep it
        return f"trainer{pid} on {where}{resumed}"
    if kind == "phase":
        return f"phase: {item.get('phase')} {item.get('message', '')}".rstrip()
    if kind == "data":
        return (
            f"data: {item.get('samples')} samples ({item.get('format')}), tokens min/mean/p95/max "
            f"{item.get('tokens_min')}/{item.get('tokens_mean')}/{item.get('tokens_p95')}/"
            f"{item.get('tokens_max')}, "
            f"{item.get('truncated')} truncated at {item.get('max_length')}, {item.get('dropped')} dropped"
            f"{trained_text(item)}"
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
        return f"checkpoint: step {item.get('step')} ({fmt.size(item.get('bytes'))}, {item.get('save_s')} s)"
    if kind == "eval":
        return eval_line(item)
    if kind == "sync":
        return sync_text.event_line(item)
    if kind == "sample":
        return sample_line(item)
    if kind == "preference_setup":
        return preference_text.setup_line(item)
    if kind == "preference_eval":
        return preference_text.eval_line(item)
    if kind == "error":
        return f"ERROR ({item.get('kind')}): {item.get('message')}\n  fix: {item.get('hint')}"
    if kind == "done":
        out = f", output in {item['output']}" if item.get("output") else ""
        loss = fmt.loss(item.get("train_loss"))
        evaluated = ""
        if item.get("eval_loss") is not None:
            evaluated = f", eval loss {fmt.loss(item.get('eval_loss'))}"
            if item.get("best_checkpoint"):
                evaluated += f" (best: {item['best_checkpoint']}, {fmt.loss(item.get('best_eval_loss'))})"
        step = item.get("step")
        early = f"\n  {item.get('message')}" if item.get("reason") == "early_stop" else ""
        ended = f"done: {item.get('status')} at step {step}"
        return f"{ended}, mean loss over the run {loss}{evaluated}{out}{early}"
    if kind == "exit":
        return item.get("reason") or "trainer exited"  # the reason names the trainer already
    if kind == "config_change":
        changes = ", ".join(f"{k}={v}" for k, v in (item.get("changes") or {}).items())
        why = f"OOM remedy: {item.get('title')}" if item.get("reason") == "oom" else item.get("reason")
        return f"config changed ({why}): {changes}; the old config is in {item.get('previous')}"
    return None


SAMPLE_LINE_CHARS = 100


def eval_line(item: dict[str, Any]) -> str:
    """`eval: step 20: loss 1.2345 on 35 samples (best so far)`, or which step holds the best."""
    step, loss = item.get("step"), fmt.loss(item.get("eval_loss"))
    where = "base model, before step 1" if item.get("stage") == "base" else f"step {step}"
    best, best_checkpoint = item.get("best_step"), item.get("best_checkpoint")
    if best == step:
        verdict = "best so far"
        # the checkpoint named is the best of those already kept, older than these weights: the
        # step's own checkpoint, if one is written, comes after this eval
        if best_checkpoint != f"checkpoint-{step}":
            best_checkpoint = None
    else:
        verdict = f"best: step {best}, {fmt.loss(item.get('best_eval_loss'))}" if best is not None else ""
    if best_checkpoint:
        verdict += f"; best checkpoint {best_checkpoint}"
    verdict = (verdict + early_stop_words(item)).removeprefix("; ")
    return f"eval: {where}: loss {loss} on {item.get('eval_samples')} samples" + (
        f" ({verdict})" if verdict else ""
    )


def early_stop_words(item: dict[str, Any]) -> str:
    """eval.early_stop_patience's count on an eval line: `; no gain 2 of 3` or `; early stop`."""
    without, patience = item.get("evals_without_gain"), item.get("early_stop_patience")
    if not isinstance(without, int) or not isinstance(patience, int) or without == 0:
        return ""
    if without >= patience:
        return f"; early stop: {without} evals without gain"
    return f"; no gain {without} of {patience} before early stop"


def sample_line(item: dict[str, Any]) -> str:
    """One line per sample: which weights, which prompt, the answer's start and how it ended."""
    stage = item.get("stage")
    who = stage if stage in ("base", "final") else item.get("checkpoint") or f"step {item.get('step')}"
    answer = " ".join(str(item.get("output") or "").split())
    if len(answer) > SAMPLE_LINE_CHARS:
        answer = answer[: SAMPLE_LINE_CHARS - 1] + "…"
    number_of = f"{int(item.get('index', 0)) + 1}/{item.get('count')}"
    return f"sample {number_of} ({who}, {item.get('finish')}): {answer!r}"


def flops_text(flops: dict[str, Any]) -> str:
    """The speed plan's FLOPs per token and the peak MFU is measured against (cockpit.speed.flops)."""
    model, hardware = flops.get("model_per_token") or 0, flops.get("hardware_per_token") or 0
    text = f"MFU counts {model / 1e9:.3g} GFLOP a real token (forward + backward"
    if hardware > model:
        text += f"; {hardware / 1e9:.3g} with the recomputed forward"
    text += f", attention over {flops.get('attention_context')} positions)"
    peak = flops.get("peak_flops")
    if peak:
        return f"{text} against {peak / 1e12:.0f} TFLOPS: {flops.get('peak_source')}"
    return f"{text}; no MFU: {flops.get('peak_source')}"


def trained_text(item: dict[str, Any]) -> str:
    """The data line's end: what the loss counts ("trained tokens (answers): 41% of 12,345") and the
    rows whose answers max_length cut or dropped, named."""
    share, total = item.get("trained_share"), item.get("tokens_total")
    if not isinstance(share, (int, float)) or not isinstance(total, int):
        return ""
    text = f"; trained tokens ({item.get('train_on')}): {share:.0%} of {total:,}"
    return text + (f"\n  {item['note']}" if item.get("note") else "")


def speed_plan_lines(item: dict[str, Any]) -> str:
    """The speed plan: one line per choice, with its reason (who chose it: auto, yours, fixed)."""
    lines = [f"speed: {item.get('mode')}"]
    for choice in item.get("choices") or []:
        lines.append(
            f"  {choice.get('name')}: {choice.get('value')} [{choice.get('source')}] - {choice.get('reason')}"
        )
    flops = item.get("flops")
    if isinstance(flops, dict) and flops.get("model_per_token"):
        lines.append(f"  {flops_text(flops)}")
    probe, scale = item.get("host_probe_ms"), item.get("host_scale")
    if isinstance(probe, (int, float)) and isinstance(scale, (int, float)):
        spread = item.get("host_probe_spread")
        rounds = f" (its rounds spread x{spread:.2f})" if isinstance(spread, (int, float)) else ""
        lines.append(
            f"  host: the probe's step took {probe:.2f} ms{rounds}, x{scale:.2f} the speed model's reference "
            f"host (its host times scaled by that)"
        )
        rank = item.get("host_rank_scale")
        if isinstance(rank, (int, float)) and rank != scale:
            lines.append(
                f"  splits ranked at x{rank:.2f} (the reference host): a reading this close to it is "
                "within what one box's probe moves by between runs"
            )
    return "\n".join(lines)
