"""The doctor's preference rules (cockpit.doctor.preference_rules) on run states folded from
`preference_log` events: accuracy stuck at 0.5, DPO margins running away, KTO's KL blowing up; each
quiet on a healthy run, beside its threshold and for the other objectives; and the Doctor runs them."""

from __future__ import annotations

from cockpit.doctor import preference_rules as rules
from cockpit.doctor.engine import Doctor
from cockpit.doctor.window import Window
from cockpit.run.state import RunState

EMPTY = Window(observations=(), length_s=60.0, now_ts=0.0)


def state_of(objective: str, rows: list[dict], beta: float = 0.1) -> RunState:
    state = RunState()
    state.apply({"v": 1, "type": "preference_setup", "objective": objective, "beta": beta, "reference": "x"})
    for step, row in enumerate(rows, 1):
        state.apply({"v": 1, "type": "preference_log", "step": step, "objective": objective, **row})
    return state


def dpo_rows(count: int, accuracy, margins, chosen=lambda i: 0.1) -> list[dict]:
    return [
        {
            "accuracy": accuracy(i),
            "margins": margins(i),
            "rewards_chosen": chosen(i),
            "rewards_rejected": -1.0,
        }
        for i in range(count)
    ]


def test_accuracy_stuck_at_a_coin_flip_is_found_late_with_its_numbers():
    stuck = state_of("dpo", dpo_rows(30, lambda i: 0.5 if i % 2 else 0.45, lambda i: 0.01))
    found = rules.accuracy_stuck(EMPTY, stuck)
    assert found is not None and found.rule == "preference_accuracy_stuck"
    assert "0.47" in found.evidence and "steps 21-30" in found.evidence and "beta 0.1" in found.evidence
    assert "training.learning_rate" in found.fix and "preference.beta" in found.fix
    # too early (accuracy starts at 0: the policy is its own reference), learning, or margins moving
    assert rules.accuracy_stuck(EMPTY, state_of("dpo", dpo_rows(15, lambda i: 0.5, lambda i: 0.0))) is None
    assert rules.accuracy_stuck(EMPTY, state_of("dpo", dpo_rows(30, lambda i: 0.65, lambda i: 0.01))) is None
    assert rules.accuracy_stuck(EMPTY, state_of("dpo", dpo_rows(30, lambda i: 0.5, lambda i: 0.2))) is None
    assert rules.accuracy_stuck(EMPTY, state_of("kto", dpo_rows(30, lambda i: 0.5, lambda i: 0.0))) is None


def test_margins_running_away_with_the_chosen_reward_falling():
    runaway = dpo_rows(12, lambda i: 1.0, lambda i: 4.0 + 2 * i, chosen=lambda i: -0.5 * i)
    found = rules.margins_running_away(EMPTY, state_of("dpo", runaway))
    assert found is not None and "+26.0 at step 12" in found.evidence
    assert "preference.beta" in found.fix and "ipo" in found.fix
    # large margins while the chosen answers' reward still rises: learning, not drifting
    rising = dpo_rows(12, lambda i: 1.0, lambda i: 4.0 + 2 * i, chosen=lambda i: 0.5 * i)
    assert rules.margins_running_away(EMPTY, state_of("dpo", rising)) is None
    below = dpo_rows(12, lambda i: 1.0, lambda i: 9.0, chosen=lambda i: -0.5 * i)
    assert rules.margins_running_away(EMPTY, state_of("dpo", below)) is None


def test_kto_kl_blowing_up():
    rows = [{"kl": 0.5 + (20.0 if i >= 9 else 0.2 * i)} for i in range(12)]
    found = rules.kl_blowing_up(EMPTY, state_of("kto", rows))
    assert found is not None and found.rule == "preference_kl_blowup" and "to step 12" in found.evidence
    steady = [{"kl": 12.0} for _ in range(12)]  # high but not rising
    assert rules.kl_blowing_up(EMPTY, state_of("kto", steady)) is None
    assert rules.kl_blowing_up(EMPTY, state_of("dpo", rows)) is None


def test_the_doctor_runs_the_preference_rules():
    ids = {rule_id for rule_id, _, _ in Doctor().rules}
    assert {"preference_accuracy_stuck", "preference_margins_runaway", "preference_kl_blowup"} <= ids
    assert rules.accuracy_stuck(EMPTY, RunState()) is None  # an SFT run: nothing to judge
