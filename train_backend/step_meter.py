"""What the doctor needs to tell a run that waits for data from one whose GPU is underfed.

The trainer's loop takes each optimizer step's micro-batches from the data loader in
`Trainer.get_batch_samples`; the time spent in there is the time the step waited for its data
(the loader's workers, collation, the copy to the device), the rest of the step is compute
(and the kernel launches that drive it). `StepMeter` adds both up, with the tokens each
micro-batch carries (padding included: what the GPU computes on), and the `log` event reports
them per window (cockpit.doctor.rules reads them).

It also times Python's cyclic garbage collector (`gc.callbacks`): while it runs, the host queues no
kernel, so a collection over the millions of objects a trainer process holds shows as a step whose
GPU sat idle, with no data wait to explain it. The `log` event reports the window's collector time
per step and its full (generation 2) collections.
"""

from __future__ import annotations

import gc
import threading
import time


class StepMeter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gc_started: float | None = None
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.wait_s = 0.0
            self.micro_batches = 0
            self.tokens = 0
            self.gc_s = 0.0
            self.gc_full = 0

    def watch_gc(self) -> None:
        """Time the collector from now on (once; `unwatch_gc` stops)."""
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def unwatch_gc(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._gc_started = now
            return
        if self._gc_started is None:
            return
        took, self._gc_started = now - self._gc_started, None
        with self._lock:
            self.gc_s += took
            self.gc_full += info.get("generation") == 2

    def add(self, wait_s: float, batches: list) -> None:
        tokens = sum(_tokens(b) for b in batches)
        with self._lock:
            self.wait_s += wait_s
            self.micro_batches += len(batches)
            self.tokens += tokens

    def window(self, wall_s: float, steps: int) -> dict:
        """The log event's fields for a window of `wall_s` seconds and `steps` optimizer steps; resets."""
        with self._lock:
            wait_s, batches, tokens = self.wait_s, self.micro_batches, self.tokens
            gc_s, gc_full = self.gc_s, self.gc_full
        self.reset()
        if steps <= 0 or wall_s <= 0:
            return {}
        wait_share = min(1.0, wait_s / wall_s)
        step_s = wall_s / steps
        out = {
            "data_wait_s": round(wait_s / steps, 5),
            "compute_s": round(max(0.0, step_s - wait_s / steps), 5),
            "data_wait_share": round(wait_share, 4),
            "gc_s": round(gc_s / steps, 5),
            "gc_full": gc_full,
        }
        if batches:
            out["tokens_per_micro_batch"] = round(tokens / batches, 1)
        return out


def _tokens(batch) -> int:
    """Tokens the micro-batch puts through the model, padding included: its input_ids (a DPO pair's
    chosen and rejected rows are both in them); ORPO's batches carry the two apart, and its trainer runs
    them as one batch of twice the rows, each padded to the longer."""
    if not (isinstance(batch, dict) or hasattr(batch, "get")):
        return 0
    ids = batch.get("input_ids")
    if ids is None:
        return _pair_tokens(batch.get("chosen_input_ids"), batch.get("rejected_input_ids"))
    try:
        return int(ids.numel())
    except AttributeError:
        return 0


def _pair_tokens(chosen, rejected) -> int:
    try:
        return int(2 * chosen.shape[0] * max(chosen.shape[1], rejected.shape[1]))
    except (AttributeError, IndexError, TypeError):
        return 0


def metered(trainer_cls, meter: StepMeter):
    """`trainer_cls` whose batch fetching is timed into `meter`."""

    class MeteredTrainer(trainer_cls):
        def get_batch_samples(self, epoch_iterator, num_batches, device):
            started = time.perf_counter()
            batches, items = super().get_batch_samples(epoch_iterator, num_batches, device)
            meter.add(time.perf_counter() - started, batches)
            return batches, items

    MeteredTrainer.__name__ = MeteredTrainer.__qualname__ = trainer_cls.__name__
    return MeteredTrainer
