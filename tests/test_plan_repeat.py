"""The same config on the same machine gives the same plan: a host probe's noise between runs does not
change the split (issue 44, item 2). The readings are the trainer's probes recorded on unslowed boxes
(bench/results/2026-12-03-speed-sweep-probe*-h200.jsonl, 2026-12-04-speed-sweep-*-h200.jsonl, and the
H100 runs of issue 44); bench/plan_repeat.py starts one config three times on a GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_speed_auto import FIXED, H200, LLAMA7, RAGGED, choice, gpu, qlora

from cockpit.live.event_text import describe
from cockpit.models.shape import load_shape
from cockpit.speed import auto as speed_auto
from cockpit.speed import model as speed_model

# ms per probe iteration, as recorded (at the start of each run, and after its last step)
RECORDED_MS = (2.98, 3.27, 3.34, 3.79, 4.01, 4.27, 4.29, 4.37, 4.51, 4.94, 5.22, 5.37, 5.59, 6.06, 6.35)
SLOWED_MS = (7.07, 8.47)  # bench/speed_sweep.py --slow-host: the host made slower on purpose
LLAMA8 = load_shape("synthetic:llama-3.1-8b")


def _facts(memory_gib: float, probe_ms: float, spread: float = 1.1) -> speed_auto.Facts:
    card = replace(H200, host_scale=speed_model.host_scale_for(probe_ms))
    return gpu(memory_gib, card=card, host_probe_ms=probe_ms, host_probe_spread=spread)


def _split(plan: speed_auto.SpeedPlan) -> tuple[int, int, int, bool, bool, str]:
    """The split and the kernels weighed against it (Liger's, the MLP block), which must not follow
    the probe's noise either."""
    t = plan.config.training
    split = (
        t.micro_batch_size,
        t.gradient_accumulation_steps,
        plan.checkpoint_layers,
        plan.checkpoint_offload,
    )
    return (*split, plan.liger, plan.mlp_block)


CASES = {
    # the two that flipped between readings of this range before the plan ranked at the reference host
    "7b-qlora-fixed-22gib": (qlora(), FIXED, LLAMA7, 22),
    "8b-qlora-2048-24gib": (
        qlora(**{"model.name": "synthetic:llama-3.1-8b", "training.max_length": 2048}),
        [2048] * 64,
        LLAMA8,
        24,
    ),
    "7b-qlora-ragged-16gib": (qlora(), RAGGED, LLAMA7, 16),
    "7b-qlora-fixed-40gib": (qlora(), FIXED, LLAMA7, 40),
    # held to a few GiB: the host binds, and speed: auto turns Liger's kernels off at every reading
    "7b-qlora-ragged-5.45gib": (qlora(), RAGGED, LLAMA7, 5.45),
}


@pytest.mark.parametrize("case", list(CASES))
def test_probe_readings_within_the_recorded_range_give_the_same_plan(case):
    cfg, lengths, shape, memory_gib = CASES[case]
    plans = {ms: speed_auto.plan(cfg, _facts(memory_gib, ms), lengths, shape) for ms in RECORDED_MS}
    splits = {_split(p) for p in plans.values()}
    assert len(splits) == 1, f"{case}: {splits}"
    if case == "7b-qlora-ragged-5.45gib":
        assert not next(iter(splits))[4]  # Liger off, as the comment says
    # the prediction still follows the reading: a slower host, no faster a run
    rates = [plans[ms].predicted_tokens_per_s for ms in RECORDED_MS]
    assert rates == sorted(rates, reverse=True) and rates[0] > rates[-1]


def test_the_plan_says_which_reading_it_used_and_where_it_ranked():
    plan = speed_auto.plan(qlora(), _facts(22, 6.06, spread=1.12), FIXED, LLAMA7)
    event = plan.to_event()
    assert event["host_probe_ms"] == 6.06 and event["host_probe_spread"] == 1.12
    assert event["host_scale"] == pytest.approx(6.06 / speed_model.HOST_PROBE_REFERENCE_MS, abs=1e-3)
    assert event["host_rank_scale"] == 1.0
    assert "ranked at the reference host: this probe's x1.59 is inside the x1.75" in (
        choice(plan, "micro-batch").reason
    )
    text = describe({"type": "speed_plan", **event})
    assert "the probe's step took 6.06 ms (its rounds spread x1.12)" in text
    assert "splits ranked at x1.00 (the reference host)" in text


@pytest.mark.parametrize("probe_ms", SLOWED_MS)
def test_a_host_slower_than_any_recorded_noise_is_ranked_at_its_own_speed(probe_ms):
    plan = speed_auto.plan(qlora(), _facts(22, probe_ms), FIXED, LLAMA7)
    event = plan.to_event()
    assert event["host_rank_scale"] == event["host_scale"] > speed_model.HOST_NOISE_RATIO
    assert "ranked at this host" in choice(plan, "micro-batch").reason
    assert "splits ranked at" not in describe({"type": "speed_plan", **event})


def test_the_noise_ratio_holds_every_recorded_unslowed_reading_and_no_slowed_one():
    reference = speed_model.HOST_PROBE_REFERENCE_MS
    assert all(speed_model.host_rank_scale(ms / reference) == 1.0 for ms in RECORDED_MS)
    assert all(speed_model.host_rank_scale(ms / reference) == ms / reference for ms in SLOWED_MS)
