"""`cockpit compare RUN RUN ...`: runs side by side, their training and eval loss by step, by tokens
and by dollars, what their configs set differently, and their final figures.

Each run's events are folded event by event (the same RunState the views use): every `log` and
`eval` becomes a point with the step, the tokens seen by then and the dollars billed by then
(price_per_hour x the time of every attempt so far), so a run restarted twice lines up with one
that was not. Plain data for the text table, `--json` and the compare screen; nothing here draws.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from cockpit import fmt
from cockpit.config.load import load_config
from cockpit.config.schema import ConfigError
from cockpit.run import journal
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState

AXES = ("step", "tokens", "usd")
AXIS_WORDS = {"step": "step", "tokens": "tokens", "usd": "dollars"}
# config keys that differ between any two runs but say nothing about how they trained
NOT_COMPARED = ("output.dir", "output.run_name")


@dataclass(frozen=True)
class Point:
    step: int
    tokens: int | None  # real tokens trained on by then
    usd: float | None  # billed by then; None without a price
    loss: float

    def x(self, axis: str) -> float | None:
        return float(self.step) if axis == "step" else getattr(self, axis)


@dataclass
class RunCurves:
    run_id: str
    path: str
    state: RunState
    train: list[Point] = field(default_factory=list)
    evals: list[Point] = field(default_factory=list)  # step 0: the base model
    config: dict[str, Any] = field(default_factory=dict)  # dotted key -> value
    config_error: str | None = None

    def figures(self) -> dict[str, Any]:
        s = self.state
        best = min(self.evals, key=lambda p: p.loss, default=None)
        reason = (s.outcome or {}).get("reason")
        return {
            "status": s.status + (f" ({reason})" if reason else ""),
            "step": s.step,
            "total_steps": s.total_steps,
            "billed_s": round(s.billed_s(), 2),
            "cost_usd": s.cost_so_far(),
            "price_per_hour": s.price_per_hour,
            "tokens": s.tokens_seen,
            "train_loss": s.loss,
            "eval_loss": s.eval_loss,
            "best_eval_loss": best.loss if best else None,
            "best_eval_step": best.step if best else None,
        }

    def to_dict(self) -> dict[str, Any]:
        def points(ps: list[Point]) -> list[dict[str, Any]]:
            return [dataclasses.asdict(p) for p in ps]

        return {
            "run": self.run_id,
            "path": self.path,
            "figures": self.figures(),
            "train": points(self.train),
            "eval": points(self.evals),
            "config_error": self.config_error,
        }


def curves_of(run: RunDir) -> RunCurves:
    state = RunState()
    curves = RunCurves(run.run_id, str(run.path), state)
    for item in journal.read_all(run.events_path):
        state.apply(item)
        if not isinstance(item, dict) or item.get("type") not in ("log", "eval"):
            continue
        loss = item.get("loss") if item["type"] == "log" else item.get("eval_loss")
        step = item.get("step")
        if not isinstance(loss, (int, float)) or not isinstance(step, int) or loss != loss:
            continue
        point = Point(step, state.tokens_seen, state.cost_so_far(), float(loss))
        if item["type"] == "log":
            curves.train = [p for p in curves.train if p.step < step] + [point]  # a restart goes back
        else:
            curves.evals = [p for p in curves.evals if p.step != step] + [point]
    curves.evals.sort(key=lambda p: p.step)
    try:
        cfg = load_config(run.config_path)
        curves.config = flatten(dataclasses.asdict(cfg))
    except (ConfigError, OSError) as exc:
        curves.config_error = str(exc)
    return curves


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_diff(runs: list[RunCurves]) -> dict[str, list[Any]]:
    """The config keys whose values are not the same in every run (readable configs only)."""
    readable = [r for r in runs if r.config_error is None]
    keys = sorted({k for r in readable for k in r.config} - set(NOT_COMPARED))
    diff = {}
    for key in keys:
        values = [r.config.get(key) for r in readable]
        if any(v != values[0] for v in values[1:]):
            diff[key] = values
    return diff


def value_at(points: list[Point], x: float, axis: str) -> float | None:
    """The loss of the last point at or before `x`; None before the first or past the run's last."""
    found = None
    for p in points:
        px = p.x(axis)
        if px is None:
            return None
        if px > x:
            break
        found = p.loss
    last = points[-1].x(axis) if points else None
    return None if last is None or x > last else found


def grid(runs: list[RunCurves], axis: str, rows: int) -> list[float]:
    """`rows` evenly spaced x values from 0 to the furthest run's end on `axis`."""
    ends = [p.x(axis) for r in runs for p in (r.train[-1:] + r.evals[-1:])]
    top = max((e for e in ends if e is not None), default=None)
    if top is None or top <= 0:
        return []
    xs = [top * i / (rows - 1) for i in range(rows)] if rows > 1 else [top]
    return [float(round(x)) for x in xs] if axis != "usd" else xs


def x_words(x: float, axis: str) -> str:
    if axis == "usd":
        return fmt.money(x)
    return f"{int(x):,}"


def report(runs: list[RunCurves], axis: str = "step", rows: int = 9) -> dict[str, Any]:
    """What `--json` prints: each run's points and figures, the config difference, and the table's
    rows on `axis`."""
    xs = grid(runs, axis, rows)
    return {
        "axis": axis,
        "runs": [r.to_dict() for r in runs],
        "config_diff": config_diff(runs),
        "table": [
            {
                axis: x,
                "train": [value_at(r.train, x, axis) for r in runs],
                "eval": [value_at(r.evals, x, axis) for r in runs],
            }
            for x in xs
        ],
    }


def _figure_rows(runs: list[RunCurves]) -> list[tuple[str, list[str]]]:
    figs = [r.figures() for r in runs]

    def best(f: dict[str, Any]) -> str:
        if f["best_eval_loss"] is None:
            return "-"
        return f"{fmt.loss(f['best_eval_loss'])} at step {f['best_eval_step']}"

    return [
        ("status", [f["status"] for f in figs]),
        ("steps", [f"{f['step']:,}/{f['total_steps'] or '?'}" for f in figs]),
        ("time", [fmt.duration(f["billed_s"]) for f in figs]),
        ("cost", [fmt.money(f["cost_usd"]) for f in figs]),
        ("tokens", [f"{f['tokens']:,}" if f["tokens"] is not None else "-" for f in figs]),
        ("train loss", [fmt.loss(f["train_loss"]) for f in figs]),
        ("eval loss", [fmt.loss(f["eval_loss"]) for f in figs]),
        ("best eval", [best(f) for f in figs]),
    ]


def _columns(rows: list[tuple[str, list[str]]], head: tuple[str, list[str]]) -> list[str]:
    first = max(len(label) for label, _ in [head, *rows])
    widths = [max(len(cells[i]) for _, cells in [head, *rows]) for i in range(len(head[1]))]
    out = []
    for label, cells in [head, *rows]:
        out.append("  ".join([label.ljust(first), *(c.ljust(w) for c, w in zip(cells, widths))]).rstrip())
    return out


def text_lines(runs: list[RunCurves], axis: str = "step", rows: int = 9) -> list[str]:
    """The comparison as plain text: final figures, what the configs set differently, and the train
    and eval loss of each run at evenly spaced points on `axis`."""
    names = [r.run_id for r in runs]
    lines = _columns(_figure_rows(runs), ("run", names))
    diff = config_diff(runs)
    lines.append("")
    unreadable = [f"{r.run_id}: {r.config_error}" for r in runs if r.config_error]
    if diff:
        lines.append("config (what differs):")
        shown = [(f"  {k}", [_short(v) for v in values]) for k, values in diff.items()]
        readable = [r.run_id for r in runs if r.config_error is None]
        lines += _columns(shown, ("  key", readable))
    else:
        lines.append("config: the same in every run" + (" that could be read" if unreadable else ""))
    lines += [f"  config not read: {u}" for u in unreadable]
    table = report(runs, axis, rows)["table"]
    lines.append("")
    if not table:
        lines.append(
            f"loss by {AXIS_WORDS[axis]}: no points yet" + (" (no price set)" if axis == "usd" else "")
        )
        return lines
    lines.append(f"loss by {AXIS_WORDS[axis]} (train / eval; - where a run has no point):")
    body = [
        (
            f"  {x_words(row[axis], axis)}",
            [
                f"{fmt.loss(t) if t is not None else '-'} / {fmt.loss(e) if e is not None else '-'}"
                for t, e in zip(row["train"], row["eval"])
            ],
        )
        for row in table
    ]
    lines += _columns(body, (f"  {AXIS_WORDS[axis]}", names))
    return lines


def _short(value: Any) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= 40 else text[:39] + "…"
