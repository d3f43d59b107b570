"""The OOM wizard's figures, as plain rows and text: an `Analysis` (cockpit.oom.remedies), formatted.

Pure: an analysis in, rows and text out; the screen draws them.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from cockpit import fmt
from cockpit.oom.remedies import Analysis, Option

Row = tuple[str, "str | Text"]  # label, value

VERDICT_STYLE = {"fits": "bold green", "tight": "yellow", "no": "red", "unknown": "dim"}
PHASE_WORDS = {
    "first_forward": "during the first forward pass",
    "forward": "during a forward pass",
    "backward": "during a backward pass",
    "optimizer_step": "during an optimizer step",
    "evaluation": "during evaluation",
    "checkpoint_save": "while saving a checkpoint",
    "model_load": "while loading the model",
    "loading_model": "while loading the model",
    "quantising": "while quantising the model",
    "final_save": "while saving the final adapter",
    "data": "while preparing the data",
    "startup": "while starting",
    "training": "while training",
}


def gib(n_bytes: int | None, sign: bool = False) -> str:
    return fmt.gib(n_bytes, 2, "", sign=sign)


def what_happened(analysis: Analysis) -> Text:
    """Two lines: where it struck, and what the card had against what the run needed."""
    obs, target = analysis.observation, analysis.target
    text = Text()
    kind = "the host ran out of RAM" if obs.host else "out of GPU memory"
    text.append(kind.upper(), style="bold")
    if obs.phase:
        text.append(f" {PHASE_WORDS.get(obs.phase, 'while ' + obs.phase.replace('_', ' '))}")
    if obs.step:
        text.append(f" at step {obs.step}")
    if obs.seq_len:
        text.append(f", batch {obs.batch_rows} x {obs.seq_len} tokens")
    if obs.kind not in ("allocator", "host"):
        text.append(f" ({obs.kind.replace('_', ' ')})")
    text.append("\n")
    if obs.host:
        limit = obs.details.get("limit_bytes")
        text.append("host RAM ", style="dim")
        text.append(f"{gib(limit)} GiB cgroup limit" if limit else "no cgroup limit: the machine's RAM")
        return text
    text.append("card ", style="dim")
    text.append(f"{gib(target.bytes)} GiB" if target.bytes else "unknown")
    text.append(f" ({target.source})", style="dim")
    if obs.demand_bytes is not None:
        text.append("  needed at least ", style="dim")
        text.append(f"{gib(obs.demand_bytes)} GiB", style="bold")
    if analysis.estimate is not None:
        text.append("  memory model ", style="dim")
        text.append(f"{analysis.estimate.peak_gib:.2f} GiB")
    return text


def observed_rows(analysis: Analysis) -> list[Row]:
    """What the allocator's message said, then the allocator's own counters at the failure."""
    obs = analysis.observation
    if obs.host:
        kills = f"{obs.details.get('oom_kills_before')} -> {obs.details.get('oom_kills_after')}"
        return [
            ("OOM kills (cgroup)", kills),
            ("cgroup limit", f"{gib(obs.details.get('limit_bytes'))} GiB"),
            ("cgroup peak", f"{gib(obs.details.get('peak_bytes'))} GiB"),
        ]
    rows: list[Row] = []
    for label, value in (
        ("allocated by PyTorch", obs.allocated_bytes),
        ("reserved, unallocated", obs.reserved_unallocated_bytes),
        ("outside PyTorch", obs.non_pytorch_bytes),
        ("asked for", obs.requested_bytes),
        # an emulated card is a cap inside a bigger GPU: what the whole GPU had free says nothing
        ("free on the GPU", None if analysis.target.emulated else obs.free_bytes),
    ):
        if value is not None:
            rows.append((label, f"{gib(value)} GiB"))
    if obs.demand_bytes is not None:
        rows.append(("needed, at least", Text(f"{gib(obs.demand_bytes)} GiB", style="bold")))
    if not rows:
        rows.append(("figures", Text(f"none in a {obs.kind.replace('_', ' ')} error", style="dim")))
    return rows


def predicted_rows(analysis: Analysis) -> list[Row]:
    """The memory model's parts for the failed config, and its peak."""
    if analysis.estimate is None:
        return [("", Text("no prediction for this run", style="dim"))]
    rows: list[Row] = [(p.label, f"{gib(p.bytes)} GiB") for p in analysis.estimate.parts]
    rows.append(("peak (as nvidia-smi)", Text(f"{analysis.estimate.peak_gib:.2f} GiB", style="bold")))
    return rows


def remedy_cells(index: int, option: Option, picked: bool, narrow: bool = False) -> tuple:
    """One row of the remedies table; `narrow` (80 columns): the columns of NARROW_COLUMNS."""
    speed = "-" if option.speed is None else f"{option.speed:.2f}x"
    pick = Text("[x]" if picked else "[ ]", style="bold" if picked else "dim")
    figures = (
        gib(option.peak_bytes),
        gib(option.headroom_bytes, sign=True),
        Text(option.verdict, style=VERDICT_STYLE[option.verdict]),
        speed,
    )
    if narrow:
        return (pick, option.title, *figures)
    return (pick, str(index), option.title, *figures, option.effect)


REMEDY_COLUMNS = ("", "#", "remedy", "peak GiB", "headroom", "fit", "speed", "effect on results")
# below NARROW_BELOW columns the table keeps what fits whole: the detail box under it gives the
# highlighted remedy's effect on the results, and the order is the rank
NARROW_COLUMNS = ("", "remedy", "peak GiB", "free", "fit", "speed")
NARROW_BELOW = 100


def option_text(option: Option, what: str = "") -> Text:
    """The highlighted or combined remedy in full: prediction, speed and why, effect, resume."""
    text = Text()
    if what:
        text.append(f"{what}: ", style="dim")
    text.append(option.title, style="bold")
    text.append("\n")
    if option.peak_bytes is not None:
        text.append(f"peak {gib(option.peak_bytes)} GiB, ")
        text.append(option.verdict, style=VERDICT_STYLE[option.verdict])
        text.append(f" ({gib(option.headroom_bytes, sign=True)} GiB headroom)")
    if option.speed is not None:
        text.append(f"; {option.speed:.2f}x tokens/s")
    if option.speed_reasons:
        text.append(f" ({'; '.join(option.speed_reasons)})", style="dim")
    text.append(f"\neffect: {option.effect}; resumes {option.resume}")
    return text


def notes_text(analysis: Analysis) -> Text:
    return Text("\n".join(f"- {note}" for note in analysis.notes), style="dim")


def rows_table(rows: list[Row]) -> RowsTable:
    """Label/value rows: the value always whole (a figure and its unit), the label dim and cut with
    an ellipsis when the panel is too narrow for both."""
    return RowsTable(rows)


class RowsTable:
    """Label/value rows laid out for the width they are drawn at: the values' column as wide as the
    widest value, the labels' column what is left (rich's own table shares a cut among columns)."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = [(label, Text(value) if isinstance(value, str) else value) for label, value in rows]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        values = max((value.cell_len for _, value in self.rows), default=0)
        labels = max((cell_len(label) for label, _ in self.rows), default=0)
        label_width = min(labels, max(1, options.max_width - values - 1))
        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True, overflow="ellipsis", style="dim", width=label_width)
        table.add_column(no_wrap=True, width=values)
        for label, value in self.rows:
            table.add_row(label, value)
        yield table

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        values = max((value.cell_len for _, value in self.rows), default=0)
        labels = max((cell_len(label) for label, _ in self.rows), default=0)
        return Measurement(values + 2, labels + 1 + values)
