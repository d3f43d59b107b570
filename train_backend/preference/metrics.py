"""The preference figures TRL logs, as the protocol names them: a `preference_log` event after each
training log, the eval's figures for `preference_eval`."""

from __future__ import annotations

from transformers import TrainerCallback

from train_backend.channel import Emitter

# TRL's log key -> the event's field (the eval's keys carry an `eval_` prefix)
FIELDS = {
    "rewards/accuracies": "accuracy",
    "rewards/margins": "margins",
    "rewards/chosen": "rewards_chosen",
    "rewards/rejected": "rewards_rejected",
    "kl": "kl",
    "log_odds_ratio": "log_odds_ratio",
    "log_odds_chosen": "log_odds_chosen",
    "nll_loss": "nll_loss",
    "logps/chosen": "logps_chosen",
    "logps/rejected": "logps_rejected",
}


def figures(logs: dict, prefix: str = "") -> dict:
    """The preference fields of one log (rounded), those TRL wrote for this objective."""
    out = {}
    for key, name in FIELDS.items():
        value = logs.get(prefix + key)
        if isinstance(value, (int, float)) and value == value:
            out[name] = round(float(value), 6)
    return out


class PreferenceCallback(TrainerCallback):
    """After each training log that carries TRL's preference figures: one `preference_log` event."""

    def __init__(self, emitter: Emitter, objective: str):
        self.emitter, self.objective = emitter, objective

    def on_log(self, args, state, control, logs=None, **kw):
        logs = logs or {}
        if "loss" not in logs:  # an eval's or the run's summary, not a training step's
            return
        found = figures(logs)
        if found:
            self.emitter.emit(
                "preference_log",
                step=state.global_step,
                objective=self.objective,
                loss=logs.get("loss"),
                **found,
            )
