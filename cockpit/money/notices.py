"""What a run's events call to be told (cockpit.money.notify): plain data from the events, no sending.

During the run the end runner feeds it every new event: a `budget` event (budget reached), an
`error` of kind `oom` (out of memory), an `eval` lower than every earlier one (with
`notify.best_eval`; the base model's eval before step 1 is only the first mark). At the end,
`ending` says how the run ended: finished or stopped (`end`), failed (`failure`; an OOM already told
is not told again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cockpit import fmt
from cockpit.run.state import RunState


@dataclass(frozen=True)
class Notice:
    kind: str  # end | failure | oom | budget | idle | best_eval
    title: str
    body: str


class RunNotices:
    """Fed the run's events in order; each `feed` answers the notices they call for."""

    def __init__(self, best_eval: bool = False) -> None:
        self.best_eval = best_eval
        self.best_loss: float | None = None  # lowest eval loss so far
        self.told_oom = False

    def feed(self, item: dict[str, Any]) -> list[Notice]:
        kind = item.get("type")
        if kind == "budget":
            return [Notice("budget", "budget reached", str(item.get("message") or "budget reached"))]
        if kind == "error" and item.get("kind") == "oom":
            self.told_oom = True
            step = item.get("step")
            body = f"{item.get('message', '')}".strip()
            hint = "`cockpit restart RUN` or the OOM wizard (cockpit attach) relaunches it with a remedy"
            return [Notice("oom", f"out of GPU memory at step {step}", f"{body}\n{hint}".strip())]
        if kind == "eval":
            return self._eval(item)
        return []

    def _eval(self, item: dict[str, Any]) -> list[Notice]:
        loss, step = item.get("eval_loss"), item.get("step")
        if not isinstance(loss, (int, float)):
            return []
        before, self.best_loss = self.best_loss, loss if self.best_loss is None else min(self.best_loss, loss)
        if not self.best_eval or before is None or loss >= before:
            return []
        title = f"new best eval loss {fmt.loss(loss)} at step {step}"
        return [Notice("best_eval", title, f"was {fmt.loss(before)}; the checkpoint there is kept as best")]

    def ending(self, state: RunState, then: list[str]) -> Notice | None:
        """How the run ended, with its figures and what happens next (`then`: the export, on_end)."""
        steps = f"step {state.step}" + (f" of {state.total_steps}" if state.total_steps else "")
        cost = state.cost_so_far()
        figures = [
            f"{steps} in {fmt.duration(state.billed_s())}"
            + (f", {fmt.money(cost)} at {fmt.money(state.price_per_hour)}/h" if cost is not None else ""),
        ]
        if state.loss is not None:
            figures.append(f"train loss {fmt.loss(state.loss)}")
        if state.eval_loss is not None:
            figures.append(f"eval loss {fmt.loss(state.eval_loss)}")
        if state.status == "failed":
            if self.told_oom:
                return None
            error = state.error or {}
            why = f"{error.get('kind', 'other')}: {error.get('message', 'the trainer ended')}"
            return Notice("failure", f"failed at {steps}", "\n".join([why, *figures, *then]))
        reason = (state.outcome or {}).get("reason")
        title = state.status + (f" ({reason})" if reason else "")
        output = (state.outcome or {}).get("output")
        early = [str(state.outcome.get("message"))] if state.outcome and reason == "early_stop" else []
        lines = [*early, *figures, *([f"adapter: {output}"] if output else []), *then]
        return Notice("end", f"{title} at {steps}", "\n".join(lines))
