"""train_backend/step_meter.py: the tokens a micro-batch puts through the model, which the doctor sets
against the speed model's busy threshold (a pair's two sequences both, as the speed model counts)."""

from __future__ import annotations

import torch

from train_backend.step_meter import StepMeter, _tokens


def test_input_ids_count_as_they_are_and_orpo_pairs_as_one_batch_of_twice_the_rows():
    assert _tokens({"input_ids": torch.zeros(4, 128)}) == 512  # SFT, KTO, and DPO's 2 x 2 pair rows
    orpo = {"chosen_input_ids": torch.zeros(2, 100), "rejected_input_ids": torch.zeros(2, 120)}
    assert _tokens(orpo) == 2 * 2 * 120  # concatenated_inputs pads both halves to the longer
    assert _tokens({"labels": torch.zeros(2, 8)}) == 0 and _tokens([1, 2]) == 0
    meter = StepMeter()
    meter.add(0.0, [orpo, orpo])
    assert meter.window(1.0, 1)["tokens_per_micro_batch"] == 480.0


def test_the_collectors_time_and_full_collections_are_in_the_window_while_watched():
    """A step the host spent in Python's garbage collector shows in the log event (gc_s a step, gc_full),
    not as a data wait; nothing is counted before watch_gc or after unwatch_gc."""
    import gc

    class Cycle:
        def __init__(self):
            self.me = self

    meter = StepMeter()
    gc.collect()
    assert meter.window(1.0, 1)["gc_s"] == 0.0
    meter.watch_gc()
    meter.watch_gc()  # once, however often asked
    gc.disable()  # only the collections asked for here
    try:
        junk = [Cycle() for _ in range(200_000)]
        del junk
        gc.collect()  # a full collection over the cycles
        gc.collect(0)
        got = meter.window(2.0, 2)
    finally:
        gc.enable()
        meter.unwatch_gc()
    assert got["gc_full"] == 1 and got["gc_s"] > 0 and got["data_wait_s"] == 0.0
    gc.collect()
    assert meter.window(1.0, 1)["gc_full"] == 0  # unwatched: not counted
    assert meter._on_gc not in gc.callbacks
