"""The doctor's rules for a preference run (objective dpo, kto or orpo: docs/preference.md), read from the
figures TRL logs each step (`preference_log`, folded into RunState.preference), not from telemetry:

- accuracy stuck at 0.5 (dpo, orpo): after LATE_STEP steps, the reward accuracy of the last RECENT
  logged steps averages within STUCK_BAND of a coin flip and the margins stay near zero: the policy
  does not tell chosen from rejected;
- margins running away (dpo): every pair won, margins past RUNAWAY_MARGIN (in reward units: beta times
  the log-probability ratio) and the chosen answers' reward falling: the policy moves far from the
  reference, pushing both answers down (over-optimisation);
- KL blowing up (kto): the KL estimate past KL_LIMIT and still rising.

The thresholds are chosen from what the DPO and KTO papers and TRL's docs call healthy, not fitted
on runs: each finding says the numbers it saw.
"""

from __future__ import annotations

import statistics
from typing import Any

from cockpit.doctor.window import Finding, Window, field

RECENT = 10  # logged steps a rule judges
LATE_STEP = 20  # no judgement of accuracy before this step (it starts at 0: the policy is its reference)
STUCK_BAND = 0.1  # accuracy within 0.5 +- this is a coin flip
STUCK_MARGIN = 0.05  # ... with margins this close to zero
RUNAWAY_MARGIN = 10.0
KL_LIMIT = 10.0  # nats (a sum over the completion's tokens, as TRL logs it)
KL_RISE = 2.0  # the last logs' mean this many times the mean of the ones before them


def _recent(state: Any, name: str) -> list[tuple[int, float]]:
    pref = field(state, "preference")
    if pref is None:
        return []
    return list(pref.series(name))[-RECENT:]


def _objective(state: Any) -> str | None:
    pref = field(state, "preference")
    return pref.objective if pref is not None else None


def accuracy_stuck(window: Window, state: Any) -> Finding | None:
    """dpo, orpo: the reward accuracy a coin flip for the last RECENT logged steps, margins near zero."""
    objective = _objective(state)
    if objective not in ("dpo", "orpo"):
        return None
    accuracy, margins = _recent(state, "accuracy"), _recent(state, "margins")
    if len(accuracy) < RECENT or accuracy[-1][0] < LATE_STEP or not margins:
        return None
    mean_acc = statistics.fmean(v for _, v in accuracy)
    mean_margin = statistics.fmean(v for _, v in margins)
    if abs(mean_acc - 0.5) > STUCK_BAND or abs(mean_margin) > STUCK_MARGIN:
        return None
    beta = (field(state, "preference").setup or {}).get("beta")
    return Finding(
        rule="preference_accuracy_stuck",
        severity="warn",
        title="Reward accuracy stuck at 0.5: the policy does not tell chosen from rejected",
        evidence=f"{objective}: reward accuracy {mean_acc:.2f} and margin {mean_margin:+.3f} (means of "
        f"steps {accuracy[0][0]}-{accuracy[-1][0]})" + (f"; beta {beta:g}" if beta is not None else ""),
        fix="Raise training.learning_rate (2-5x: preference runs on LoRA often need 5e-6 to 5e-5), or lower "
        "preference.beta; check that chosen and rejected differ in what matters (cockpit data CONFIG); "
        "an adapter on every linear (lora.target_modules: all-linear) learns more.",
    )


def margins_running_away(window: Window, state: Any) -> Finding | None:
    """dpo: every recent pair won with margins past RUNAWAY_MARGIN while the chosen reward falls."""
    if _objective(state) != "dpo":
        return None
    margins, accuracy = _recent(state, "margins"), _recent(state, "accuracy")
    chosen = _recent(state, "rewards_chosen")
    if len(margins) < RECENT or not accuracy or len(chosen) < 2:
        return None
    if min(v for _, v in margins[-3:]) < RUNAWAY_MARGIN or min(v for _, v in accuracy[-3:]) < 0.99:
        return None
    if not (chosen[-1][1] < 0 and chosen[-1][1] < chosen[0][1]):
        return None
    return Finding(
        rule="preference_margins_runaway",
        severity="warn",
        title="DPO margins running away: the policy drifts far from the reference",
        evidence=f"margin {margins[-1][1]:+.1f} at step {margins[-1][0]} (from {margins[0][1]:+.1f} at step "
        f"{margins[0][0]}), accuracy {accuracy[-1][1]:.2f}, chosen reward {chosen[-1][1]:+.2f} and falling: "
        "both answers are pushed down",
        fix="Raise preference.beta (2x keeps the policy nearer the reference), lower training.learning_rate "
        "or train fewer steps; keep the checkpoint with the best held-out eval (dataset.eval_fraction); "
        "preference.dpo_loss: ipo bounds the margin.",
    )


def kl_blowing_up(window: Window, state: Any) -> Finding | None:
    """kto: the KL estimate past KL_LIMIT and KL_RISE times what it was."""
    if _objective(state) != "kto":
        return None
    pref = field(state, "preference")
    kl = list(pref.series("kl"))
    if len(kl) < RECENT:
        return None
    last = statistics.fmean(v for _, v in kl[-3:])
    before = statistics.fmean(v for _, v in kl[-RECENT:-3])
    if last < KL_LIMIT or last < KL_RISE * max(before, 1e-6):
        return None
    return Finding(
        rule="preference_kl_blowup",
        severity="warn",
        title="KTO's KL blowing up: the policy leaves the reference fast",
        evidence=f"KL {last:.1f} over the last 3 logged steps (to step {kl[-1][0]}), {before:.1f} before",
        fix="Raise preference.beta or lower training.learning_rate; balance desirable and undesirable rows "
        "(preference.desirable_weight / undesirable_weight) if one kind dominates.",
    )


RULES = (
    ("preference_accuracy_stuck", accuracy_stuck),
    ("preference_margins_runaway", margins_running_away),
    ("preference_kl_blowup", kl_blowing_up),
)
