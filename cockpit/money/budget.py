"""The budget: `cost.max_usd` against what a run has cost, over all its attempts.

A run's cost is `cost.price_per_hour` times the time of its trainer attempts (each from its
`hello` to its last event, on the trainer's monotonic clock, `mono_s`, where its events carry it:
a step of the wall clock bills nothing; cockpit.run.state.RunState.billed_s), the figure the run
view shows.
The trainer checks it at every step end and, once it reaches the budget, saves a checkpoint and
stops; a restart whose budget is already spent is refused before anything loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cockpit import fmt
from cockpit.config.schema import TrainConfig
from cockpit.paths import cockpit_command
from cockpit.run import journal
from cockpit.run.state import RunState


def history_state(events_path: Path) -> RunState:
    """The run as its events so far tell it (a restart's previous attempts)."""
    try:
        return journal.fold(events_path)
    except OSError:
        return RunState()


@dataclass(frozen=True)
class Budget:
    max_usd: float
    price_per_hour: float
    prior_s: float  # billed seconds of the attempts before this one
    started_ts: float  # this attempt's start (its hello), on the clock `now_ts` is read from: monotonic

    def cost_usd(self, now_ts: float) -> float:
        return self.price_per_hour * (self.prior_s + max(0.0, now_ts - self.started_ts)) / 3600

    def reached(self, now_ts: float) -> bool:
        return self.cost_usd(now_ts) >= self.max_usd

    def reached_message(self, now_ts: float, step: int) -> str:
        return (
            f"budget reached at step {step}: {fmt.money(self.cost_usd(now_ts))} spent of cost.max_usd "
            f"{fmt.money(self.max_usd)} ({fmt.money(self.price_per_hour)}/h); saving a checkpoint and "
            "stopping"
        )


def budget_for(cfg: TrainConfig, prior: RunState, started_ts: float) -> Budget | None:
    c = cfg.cost
    if c.max_usd is None or c.price_per_hour is None:
        return None
    return Budget(c.max_usd, c.price_per_hour, prior.billed_s(), started_ts)


def spent_usd(cfg: TrainConfig, prior: RunState) -> float | None:
    """What the run's attempts so far cost at the config's price; None without a price."""
    if cfg.cost.price_per_hour is None:
        return None
    return cfg.cost.price_per_hour * prior.billed_s() / 3600


def already_spent(cfg: TrainConfig, prior: RunState, run_id: str) -> str | None:
    """Why a restart cannot start within the budget, or None when it can."""
    spent = spent_usd(cfg, prior)
    if cfg.cost.max_usd is None or spent is None or spent < cfg.cost.max_usd:
        return None
    attempts = len(prior.attempts)
    return (
        f"cost.max_usd is {fmt.money(cfg.cost.max_usd)} but run {run_id} has already cost {fmt.money(spent)} "
        f"({fmt.duration(prior.billed_s())} over {attempts} attempt{'s' if attempts != 1 else ''} at "
        f"{fmt.money(cfg.cost.price_per_hour)}/h): nothing is left to train with. Raise the budget: "
        f"{cockpit_command()} restart {run_id} --max-usd N (N above {fmt.money(spent)}), or remove "
        "cost.max_usd from the run's config.yaml"
    )
