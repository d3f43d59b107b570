"""Why a GPU below 70% util waits, from what the trainer measures of each step.

The trainer times how long each optimizer step waits for its micro-batches from the data
loader and counts the tokens each micro-batch carries (`log` event: data_wait_s, compute_s,
data_wait_share, tokens_per_micro_batch; train_backend/step_meter.py); the speed plan states
how many tokens per micro-batch the card needs to outlast the host's kernel launches and what
split speed: auto would run (`speed_plan`: busy_tokens_per_micro_batch, auto_split). Three
causes, told apart by those measurements, not by the CPU gauge alone:

- input-bound: the step waits for data a large share of its time: more loader workers help;
- GPU-underfed: little data wait, and micro-batches smaller than the card needs: each step is
  mostly kernel launches; more workers do not help (they take cores from the launching
  thread), a larger micro-batch does;
- CPU-bound elsewhere: little data wait, micro-batches large enough, the trainer's CPU
  saturated: the host's per-step work (Python, un-fused kernels, logging) holds the GPU back.

Each fix says what it is predicted to gain: from the measured wait, or from the speed model
(cockpit/speed/model.py through the speed plan).
"""

from __future__ import annotations

from typing import Any

from cockpit.doctor.window import Finding, Observation, Window, field, mean_of, phrase
from cockpit.fmt import GIB

LOW_UTIL_PCT = 70.0
CPU_SATURATED_PCT = 90.0
INPUT_WAIT_SHARE = 0.25  # the step waits for data this share of its time: the loader is the bottleneck
WORTH_GAIN = 1.1  # a predicted gain below this is not worth a finding's fix
GC_SHARE = 0.05  # Python's garbage collector took this share of the step: named in the evidence


def measured(state: Any) -> dict[str, Any] | None:
    """The trainer's step measurements, when it made them (a run from an older trainer has none)."""
    got = field(state, "input") or {}
    return got if got.get("data_wait_share") is not None else None


def _stepping(o: Observation) -> bool:
    return o.stepping


def _waiting(o: Observation) -> bool:
    """Training with its steps measured, the GPU below 70% (its mean over one recorded bin)."""
    util = o.util_smooth
    return o.stepping and util is not None and util < LOW_UTIL_PCT


def _cpu_saturated(o: Observation) -> bool:
    trainer = o.trainer_cpu_smooth
    return trainer is not None and trainer >= CPU_SATURATED_PCT


def _common(window: Window, state: Any) -> tuple[dict[str, Any], float, float | None] | None:
    """The step measurements, the mean util and trainer CPU of the time the run trained with its
    steps measured, when the GPU waited for most of that time (and >= MIN_HELD_S)."""
    m = measured(state)
    if m is None or not window.stepped_enough() or not window.held(_waiting, during=_stepping):
        return None
    stepping = [o for o in window if o.stepping]
    util = mean_of(o.trainer_util for o in stepping)
    if util is None or util >= LOW_UTIL_PCT:
        return None
    return m, util, mean_of(field(o.host, "trainer_cpu_pct") for o in stepping)


def _util_text(window: Window, util: float) -> str:
    return f"GPU util {util:.0f}% (mean of {window.span_text(_stepping)} of steps)"


def _step_text(m: dict[str, Any]) -> str:
    wait, compute = m.get("data_wait_s"), m.get("compute_s")
    share = f"data wait {m['data_wait_share']:.0%} of the step"
    if wait is not None and compute is not None:
        share += f" ({wait:.3f} of {wait + compute:.3f} s)"
    return share


def _busy(state: Any) -> int | None:
    return (field(state, "speed_plan") or {}).get("busy_tokens_per_micro_batch")


def _processed_tokens_per_s(m: dict[str, Any], state: Any) -> float | None:
    """Tokens per second the GPU computed (padding included, as the speed model counts them)."""
    tokens, wait, compute = m.get("tokens_per_micro_batch"), m.get("data_wait_s"), m.get("compute_s")
    accum = (field(state, "plan") or {}).get("gradient_accumulation_steps") or (
        field(state, "speed_plan") or {}
    ).get("gradient_accumulation_steps")
    if not tokens or wait is None or compute is None or not accum or wait + compute <= 0:
        return None
    return float(tokens * accum / (wait + compute))


def _since(window: Window) -> float | None:
    return window.first_ts(_waiting)


def input_bound_measured(window: Window, state: Any) -> Finding | None:
    """GPU util < 70% while the trainer measures its steps waiting >= 25% of their time for data."""
    common = _common(window, state)
    if common is None:
        return None
    m, util, cpu = common
    share = m["data_wait_share"]
    if share < INPUT_WAIT_SHARE:
        return None
    cores = field(window.observations[-1].host, "cpu_count_usable")
    workers = (field(state, "speed_plan") or {}).get("dataloader_num_workers")
    suggested = max(1, min(8, cores // 2)) if cores else 4
    if workers is not None and suggested <= workers:
        suggested = workers * 2
    gain = 1 / max(1e-6, 1 - share)
    return Finding(
        rule="input_bound",
        severity="warn",
        title="Input-bound: each step waits for its data",
        evidence=phrase(
            [
                _util_text(window, util),
                _step_text(m) + " (measured by the trainer)",
                f"trainer CPU {cpu:.0f}% of one core" if cpu is not None else None,
                f"dataloader_num_workers {workers}" if workers is not None else None,
            ]
        ),
        fix=f"Raise training.dataloader_num_workers (e.g. to {suggested}) and pre-tokenise the dataset; "
        f"with the wait gone a step is up to ~{gain:.1f}x faster (the measured wait).",
        since_ts=_since(window),
    )


def gpu_underfed(window: Window, state: Any) -> Finding | None:
    """GPU util < 70%, little data wait (< 25% of the step), and micro-batches carrying fewer tokens
    than the speed model says the card needs to outlast the host's kernel launches."""
    common = _common(window, state)
    if common is None:
        return None
    m, util, cpu = common
    tokens, busy = m.get("tokens_per_micro_batch"), _busy(state)
    if m["data_wait_share"] >= INPUT_WAIT_SHARE or not tokens or not busy or tokens >= busy:
        return None
    sp = field(state, "speed_plan") or {}
    split = sp.get("auto_split") or {}
    device = (field(state, "device") or {}).get("name") or "the card"
    evidence = phrase(
        [
            _util_text(window, util),
            f"{tokens:.0f} tokens per micro-batch, ~{busy} needed to keep {device} busy (speed model)",
            _step_text(m) + ": the loader is not what it waits for",
            f"trainer CPU {cpu:.0f}% of one core (launching kernels)" if cpu is not None else None,
        ]
    )
    rate, base = split.get("tokens_per_s"), split.get("as_run_tokens_per_s")
    if rate and base and rate / base >= WORTH_GAIN:
        ckpt = split.get("checkpoint_layers")
        layers = sp.get("num_layers")
        ckpt_text = (
            ", no checkpointing"
            if ckpt == 0
            else f", {ckpt} of {layers} layers checkpointed"
            if ckpt and layers
            else ""
        )
        fix = (
            f"speed: auto would run micro-batch {split['micro_batch_size']} x "
            f"{split['gradient_accumulation_steps']}{ckpt_text}, ~{rate / base:.1f}x "
            f"({rate / 1000:.1f}k vs {base / 1000:.1f}k tokens/s by the speed model): drop "
            "training.micro_batch_size, gradient_accumulation_steps and gradient_checkpointing from the "
            "config (and from speed.keep), or set them so. More loader workers would not help."
        )
    elif auto_fitted(sp):
        mb, accum = sp.get("micro_batch_size"), sp.get("gradient_accumulation_steps")
        fix = (
            f"speed: auto already runs the fastest split that fits: {mb} x {accum}, "
            f"~{sp['predicted_peak_bytes'] / GIB:.2f} GiB predicted of the {sp['budget_bytes'] / GIB:.2f} "
            "GiB it may use; a larger micro-batch does not fit by the memory model. More speed needs more "
            "device memory (a card with more, or a higher emulate_vram_gib) or less of it per token "
            "(a shorter training.max_length). More loader workers would not help."
        )
    else:
        need = max(1, -(-busy // max(1, int(tokens)))) * int(
            (field(state, "plan") or {}).get("micro_batch_size") or sp.get("micro_batch_size") or 1
        )
        fix = (
            f"Raise training.micro_batch_size (toward {need}, memory allowing; lower "
            "gradient_accumulation_steps to keep the step) or training.max_length with packing: "
            "fewer, larger micro-batches. More loader workers would not help."
        )
    return Finding(
        rule="gpu_underfed",
        severity="warn",
        title="GPU underfed: micro-batches too small to keep it busy",
        evidence=evidence,
        fix=fix,
        since_ts=_since(window),
    )


def auto_fitted(sp: dict[str, Any]) -> bool:
    """speed: auto chose the micro-batch itself, as the fastest split its memory budget holds."""
    chosen = next((c for c in sp.get("choices") or [] if c.get("name") == "micro-batch"), None)
    return (
        sp.get("mode") == "auto"
        and chosen is not None
        and chosen.get("source") == "auto"
        and bool(sp.get("budget_bytes"))
        and bool(sp.get("predicted_peak_bytes"))
    )


def cpu_bound(window: Window, state: Any) -> Finding | None:
    """GPU util < 70%, little data wait, micro-batches large enough by the speed model (or no model
    for this card), and the trainer's CPU saturated (>= 90% of a core): host work outside the loader."""
    common = _common(window, state)
    if common is None:
        return None
    m, util, cpu = common
    tokens, busy = m.get("tokens_per_micro_batch"), _busy(state)
    if m["data_wait_share"] >= INPUT_WAIT_SHARE or (busy and tokens and tokens < busy):
        return None
    if not window.held(lambda o: _waiting(o) and _cpu_saturated(o), during=_stepping) or cpu is None:
        return None
    predicted = (field(state, "speed_plan") or {}).get("predicted_tokens_per_s") or (
        (field(state, "speed_plan") or {}).get("auto_split") or {}
    ).get("as_run_tokens_per_s")
    actual = _processed_tokens_per_s(m, state)
    gain = (
        f" The speed model expects ~{predicted / 1000:.1f}k tokens/s here with the host keeping up, "
        f"~{predicted / actual:.1f}x the measured {actual / 1000:.1f}k."
        if predicted and actual and predicted / actual >= WORTH_GAIN
        else ""
    )
    return Finding(
        rule="cpu_bound",
        severity="warn",
        title="CPU-bound outside the data loader",
        evidence=phrase(
            [
                _util_text(window, util),
                f"trainer CPU {cpu:.0f}% of one core",
                _step_text(m),
                f"{tokens:.0f} tokens per micro-batch" + (f" (>= the ~{busy} the card needs)" if busy else "")
                if tokens
                else None,
                _gc_text(m),
            ]
        ),
        fix="The trainer's own host work holds the GPU back, not the data: "
        + ", ".join(_host_fixes(field(state, "speed_plan") or {}))
        + "."
        + gain,
        since_ts=_since(window),
    )


def _host_fixes(sp: dict[str, Any]) -> list[str]:
    """What lightens the trainer's host work, by what the plan runs. Liger's kernels are not among
    them: each of their Triton launches costs the host more than the ops it replaces (the speed
    model's HOST_LIGER_SHARE; on a host-bound H100 split 1.77x without them, docs/benchmarks.md),
    so where the plan runs them, turning them off is."""
    fixes = []
    if sp.get("liger"):
        fixes.append("turn Liger's kernels off (speed.fused_kernels: off: their launches cost the host more)")
    if sp.get("read_figures") == "each_micro_batch":
        fixes.append("read the step's figures at the log (speed.read_figures: at_log)")
    return [*fixes, "log less often (training.logging_steps)", "or take an instance with faster CPU cores"]


def _gc_text(m: dict[str, Any]) -> str | None:
    """Python's garbage collector's share of the step, where it is GC_SHARE or more."""
    gc_s, wait, compute = m.get("gc_s"), m.get("data_wait_s"), m.get("compute_s")
    if gc_s is None or wait is None or compute is None or wait + compute <= 0:
        return None
    share = gc_s / (wait + compute)
    return f"Python's garbage collector {gc_s:.3f} s a step ({share:.0%})" if share >= GC_SHARE else None
