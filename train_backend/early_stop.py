"""Early stopping on the eval loss (`eval.early_stop_patience`, `eval.early_stop_min_gain`): plain
arithmetic, no torch, so the tests read it directly.

Every eval loss (the base model's before step 1 included) is fed in step order. One lower than the
best by more than the minimum gain is a new best: the trainer saves a checkpoint there (kept by the
rotation as the best). After `patience` evals in a row without one, the run stops; final/ then
holds the best checkpoint's weights, and the `done` event says what the steps left would have cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from cockpit import fmt


@dataclass
class EarlyStop:
    patience: int
    min_gain: float = 0.0
    best_step: int | None = None
    best_loss: float | None = None
    without_gain: int = 0  # evals in a row since the best that did not beat it

    def feed(self, step: int, loss: float) -> bool:
        """True when this eval is a new best."""
        if loss == loss and (self.best_loss is None or loss < self.best_loss - self.min_gain):
            self.best_step, self.best_loss, self.without_gain = step, loss, 0
            return True
        self.without_gain += 1  # NaN never counts as a gain
        return False

    @property
    def due(self) -> bool:
        return self.without_gain >= self.patience

    def event_fields(self) -> dict[str, int]:
        return {"evals_without_gain": self.without_gain, "early_stop_patience": self.patience}

    def why(self) -> str:
        """`eval loss not below 1.2345 (step 800) by more than 0.01 in 3 evals`."""
        gain = f" by more than {self.min_gain:g}" if self.min_gain else ""
        return (
            f"eval loss not below {fmt.loss(self.best_loss)} (step {self.best_step}){gain} in "
            f"{self.without_gain} eval{'s' if self.without_gain != 1 else ''}"
        )


def not_spent(
    step: int, total_steps: int, start_step: int, runtime_s: float, price_per_hour: float | None
) -> tuple[float | None, float | None]:
    """(seconds, USD) the steps left would have taken at this attempt's pace; None where unknown."""
    done = step - start_step
    if done <= 0 or total_steps <= step or runtime_s <= 0:
        return None, None
    seconds = (total_steps - step) * runtime_s / done
    usd = seconds / 3600 * price_per_hour if price_per_hour is not None else None
    return seconds, usd


def stop_message(
    early: EarlyStop, step: int, total_steps: int, seconds: float | None, usd: float | None
) -> str:
    """`stopped at 1,200 of 3,000 steps: ~$4.10 not spent (~25 min); eval loss not below ...`."""
    spared = ""
    if usd is not None:
        spared = f": ~{fmt.money(usd)} not spent (~{fmt.duration(seconds or 0)})"
    elif seconds is not None:
        spared = f": ~{fmt.duration(seconds)} not spent"
    return f"stopped early at {step:,} of {total_steps:,} steps{spared}; {early.why()}"
