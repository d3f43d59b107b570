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
