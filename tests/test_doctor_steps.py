"""The doctor's step rules: input-bound, GPU-underfed and CPU-bound told apart by what the trainer
measures of each step (data wait, tokens per micro-batch) and what the speed plan says the card
needs; each fires on its case with its predicted gain and stays quiet on the others."""

from __future__ import annotations

import pytest
from test_doctor import feed, only, rules, run_state

from cockpit.doctor.engine import Doctor
from cockpit.fmt import GIB

STEP_RULES = {"input_bound", "gpu_underfed", "cpu_bound"}
# the packed demo-data QLoRA 7B run at micro-batch 4: ~37% util, the trainer at ~114% of a core
LAUNCH_BOUND = dict(gpu={"util_pct": 37.0}, host={"trainer_cpu_pct": 114.0})
SPEED_PLAN = {
    "micro_batch_size": 4,
    "gradient_accumulation_steps": 4,
    "num_layers": 32,
    "dataloader_num_workers": 4,
    "predicted_tokens_per_s": 4892.2,
    "busy_tokens_per_micro_batch": 3072,
    "auto_split": {
        "micro_batch_size": 12,
        "gradient_accumulation_steps": 1,
        "checkpoint_layers": 0,
        "tokens_per_s": 11741.0,
        "as_run_tokens_per_s": 4892.2,
    },
}


def state_with(wait_share: float, tokens: float, speed_plan: dict | None = None, step_s: float = 0.9):
    state = run_state(micro_batch_size=4, gradient_accumulation_steps=4)
    state.device["name"] = "NVIDIA H200"
    state.speed_plan = dict(SPEED_PLAN if speed_plan is None else speed_plan)
    state.input = {
        "data_wait_s": round(wait_share * step_s, 4),
        "compute_s": round((1 - wait_share) * step_s, 4),
        "data_wait_share": wait_share,
        "tokens_per_micro_batch": tokens,
    }
    return state


def test_the_demo_data_case_is_gpu_underfed_not_input_bound():
    findings = feed(Doctor(), 0, 60, state=state_with(0.03, 2048.0), **LAUNCH_BOUND)
    assert rules(findings) & STEP_RULES == {"gpu_underfed"}
    finding = only(findings, "gpu_underfed")
    assert "2048 tokens per micro-batch, ~3072 needed to keep NVIDIA H200 busy" in finding.evidence
    assert "data wait 3% of the step" in finding.evidence
    assert "speed: auto would run micro-batch 12 x 1, no checkpointing, ~2.4x" in finding.fix
    assert "11.7k vs 4.9k tokens/s by the speed model" in finding.fix
    assert "dataloader_num_workers" not in finding.fix and "would not help" in finding.fix


def test_gpu_underfed_without_a_better_split_says_raise_the_micro_batch():
    plan = {**SPEED_PLAN, "auto_split": {**SPEED_PLAN["auto_split"], "tokens_per_s": 5000.0}}
    finding = only(
        feed(Doctor(), 0, 60, state=state_with(0.03, 2048.0, plan), **LAUNCH_BOUND), "gpu_underfed"
    )
    assert "Raise training.micro_batch_size (toward 8" in finding.fix


def test_input_bound_needs_the_measured_wait_and_says_its_gain():
    findings = feed(Doctor(), 0, 60, state=state_with(0.5, 2048.0), **LAUNCH_BOUND)
    assert rules(findings) & STEP_RULES == {"input_bound"}
    finding = only(findings, "input_bound")
    assert "data wait 50% of the step (0.450 of 0.900 s) (measured by the trainer)" in finding.evidence
    assert "training.dataloader_num_workers (e.g. to 8)" in finding.fix and "~2.0x" in finding.fix


def test_input_bound_fires_on_a_waiting_loader_even_without_a_busy_cpu():
    findings = feed(Doctor(), 0, 60, state=state_with(0.4, 4096.0), gpu={"util_pct": 40.0})
    assert rules(findings) & STEP_RULES == {"input_bound"}


def test_cpu_bound_elsewhere_when_the_batches_are_big_and_the_wait_small():
    findings = feed(Doctor(), 0, 60, state=state_with(0.05, 8192.0, step_s=4.0), **LAUNCH_BOUND)
    assert rules(findings) & STEP_RULES == {"cpu_bound"}
    finding = only(findings, "cpu_bound")
    assert "trainer CPU 114% of one core" in finding.evidence
    assert "8192 tokens per micro-batch (>= the ~3072 the card needs)" in finding.evidence
    # 8192 x 4 tokens per 4 s step = 8.2k measured; the speed model's 4.9k is not more: no gain claimed
    assert "speed model expects" not in finding.fix
    # the plan runs no Liger and reads its figures at the log: neither is offered
    assert "Liger" not in finding.fix and "read_figures" not in finding.fix
    assert "training.logging_steps" in finding.fix and "garbage collector" not in finding.evidence


def test_cpu_bound_offers_liger_off_and_figures_at_the_log_where_the_plan_runs_them_and_names_the_gc():
    plan = {**SPEED_PLAN, "liger": True, "read_figures": "each_micro_batch"}
    state = state_with(0.05, 8192.0, plan, step_s=4.0)
    state.input["gc_s"] = 0.4  # of a 4 s step
    finding = only(feed(Doctor(), 0, 60, state=state, **LAUNCH_BOUND), "cpu_bound")
    assert "speed.fused_kernels: off" in finding.fix and "speed.read_figures: at_log" in finding.fix
    assert "Python's garbage collector 0.400 s a step (10%)" in finding.evidence
    state.input["gc_s"] = 0.1  # 2.5%: not named
    finding = only(feed(Doctor(), 0, 60, state=state, **LAUNCH_BOUND), "cpu_bound")
    assert "garbage collector" not in finding.evidence


def test_cpu_bound_states_the_speed_model_s_gain():
    finding = only(
        feed(Doctor(), 0, 60, state=state_with(0.05, 8192.0, step_s=16.0), **LAUNCH_BOUND), "cpu_bound"
    )
    assert "~4.9k tokens/s here with the host keeping up, ~2.4x the measured 2.0k" in finding.fix


@pytest.mark.parametrize(
    ("reading", "wait", "tokens"),
    [
        (dict(gpu={"util_pct": 71.0}, host={"trainer_cpu_pct": 114.0}), 0.03, 2048.0),  # busy enough
        (dict(gpu={"util_pct": 71.0}, host={"trainer_cpu_pct": 114.0}), 0.6, 2048.0),
        (dict(gpu={"util_pct": 40.0}, host={"trainer_cpu_pct": 89.0}), 0.05, 8192.0),  # CPU not saturated
        (dict(gpu={"util_pct": 40.0}, host={"trainer_cpu_pct": 60.0}), 0.24, 4096.0),  # wait just below
    ],
)
def test_the_step_rules_stay_quiet_beside_their_thresholds(reading, wait, tokens):
    assert not rules(feed(Doctor(), 0, 120, state=state_with(wait, tokens), **reading)) & STEP_RULES


def test_quiet_while_the_model_loads_and_without_a_speed_model_underfed_cannot_be_said():
    loading = state_with(0.03, 2048.0)
    loading.status = "starting"
    assert not rules(feed(Doctor(), 0, 60, state=loading, **LAUNCH_BOUND)) & STEP_RULES
    blind = state_with(0.03, 2048.0, speed_plan={})  # a CPU run or a card the models do not know
    assert rules(feed(Doctor(), 0, 60, state=blind, **LAUNCH_BOUND)) & STEP_RULES == {"cpu_bound"}


def test_a_run_without_measurements_keeps_the_old_input_bound_rule():
    state = run_state()
    assert rules(feed(Doctor(), 0, 60, state=state, **LAUNCH_BOUND)) & STEP_RULES == {"input_bound"}


def test_the_log_event_fills_the_state_the_rules_read():
    from cockpit.run.state import RunState

    state = RunState()
    state.apply({"type": "speed_plan", "ts": 1.0, **SPEED_PLAN})
    state.apply(
        {"type": "log", "ts": 2.0, "step": 3, "data_wait_s": 0.01, "compute_s": 0.3, "data_wait_share": 0.03,
         "tokens_per_micro_batch": 2048.0}
    )  # fmt: skip
    assert state.speed_plan["busy_tokens_per_micro_batch"] == 3072
    assert state.input == {"data_wait_s": 0.01, "compute_s": 0.3, "data_wait_share": 0.03,
                           "tokens_per_micro_batch": 2048.0}  # fmt: skip


def test_gpu_underfed_when_speed_auto_already_fills_the_memory_says_so():
    # as on the H200 held to 5.45 GiB (bench/results/2026-12-02-vs-unsloth-7b-padded-h200.log): speed:
    # auto chose 1 x 9 as the fastest split that fits; "raise the micro-batch" would run out
    plan = {
        **SPEED_PLAN,
        "mode": "auto",
        "micro_batch_size": 1,
        "gradient_accumulation_steps": 9,
        "budget_bytes": int(5.18 * GIB),
        "predicted_peak_bytes": int(5.08 * GIB),
        "choices": [
            {"name": "micro-batch", "value": "1 x 9 (9 rows per step)", "reason": "", "source": "auto"}
        ],
        "auto_split": {
            **SPEED_PLAN["auto_split"],
            "micro_batch_size": 1,
            "gradient_accumulation_steps": 9,
            "tokens_per_s": 1011.0,
            "as_run_tokens_per_s": 1011.0,
        },
    }
    finding = only(feed(Doctor(), 0, 60, state=state_with(0.01, 512.0, plan), **LAUNCH_BOUND), "gpu_underfed")
    assert (
        "speed: auto already runs the fastest split that fits: 1 x 9, ~5.08 GiB predicted of the 5.18"
        in finding.fix
    )
    assert "Raise training.micro_batch_size" not in finding.fix
    yours = {**plan, "choices": [{**plan["choices"][0], "source": "yours"}]}  # the user's split: raise it
    finding = only(
        feed(Doctor(), 0, 60, state=state_with(0.01, 512.0, yours), **LAUNCH_BOUND), "gpu_underfed"
    )
    assert "Raise training.micro_batch_size" in finding.fix
