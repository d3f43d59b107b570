"""A preference run's figures folded from its events (`preference_setup`, `preference_log`,
`preference_eval`): what RunState keeps for the run view, `--no-ui`, the doctor and the summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cockpit.protocol.wire import number

# the figures of a preference_log or preference_eval event, in the order they are shown
FIGURES = (
    "accuracy",
    "margins",
    "rewards_chosen",
    "rewards_rejected",
    "kl",
    "log_odds_ratio",
    "log_odds_chosen",
    "nll_loss",
    "logps_chosen",
    "logps_rejected",
)
KEPT_LOGS = 2000  # the figures of this many logged steps are kept for the plot and the doctor


@dataclass
class PreferenceState:
    setup: dict[str, Any] = field(default_factory=dict)  # the preference_setup event
    logs: list[dict[str, float]] = field(default_factory=list)  # step and figures, per logged step
    evals: list[dict[str, Any]] = field(default_factory=list)  # the preference_eval events

    @property
    def objective(self) -> str | None:
        value = self.setup.get("objective") or (self.logs[-1].get("objective") if self.logs else None)
        return str(value) if value else None

    @property
    def last(self) -> dict[str, float]:
        return self.logs[-1] if self.logs else {}

    @property
    def last_eval(self) -> dict[str, Any]:
        return self.evals[-1] if self.evals else {}

    def copy(self) -> PreferenceState:
        """A copy that folding more events no longer changes (RunState.snapshot)."""
        return PreferenceState(dict(self.setup), list(self.logs), list(self.evals))

    def series(self, name: str) -> list[tuple[int, float]]:
        """(step, value) of one figure over the logged steps."""
        return [(int(row["step"]), row[name]) for row in self.logs if name in row]

    def on_setup(self, item: dict[str, Any]) -> None:
        self.setup = {k: v for k, v in item.items() if k not in ("v", "type", "ts", "mono_s")}

    def on_log(self, item: dict[str, Any]) -> None:
        step = number(item.get("step"))
        if step is None:
            return
        row: dict[str, Any] = {"step": int(step), "objective": item.get("objective")}
        for name in FIGURES:
            value = number(item.get(name))
            if value is not None:
                row[name] = value
        if self.logs and self.logs[-1]["step"] >= row["step"]:  # a restart logs its steps again
            self.logs = [r for r in self.logs if r["step"] < row["step"]]
        self.logs.append(row)
        del self.logs[:-KEPT_LOGS]

    def on_eval(self, item: dict[str, Any]) -> None:
        self.evals.append({k: v for k, v in item.items() if k not in ("v", "type", "mono_s")})
