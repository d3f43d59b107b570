"""The card table in words: the cells the picker's table and `cockpit cards` show, and the
plain-text table of `cockpit cards` (as wide as the terminal, 80 columns by default).

Every figure of a row is for one run: the run as given where it fits, else the run with the
single change named in the fit column ("no→ckpt"): its peak, free memory, speed, time and cost.
"""

from __future__ import annotations

from datetime import date

from cockpit import fmt
from cockpit.fmt import GIB
from cockpit.gpus.card import price_age_days
from cockpit.models.memory import SAFETY_MARGIN
from cockpit.plain import wrapped
from cockpit.plan.cards import CardRow
from cockpit.plan.table import CardTable
from cockpit.speed.model import CALIBRATED_ON

MULTI_NOTE = (
    "rows xN: N GPUs of the card above, run as distributed.strategy auto would (DDP or FSDP); peak and "
    "free per GPU; tok/s of all N GPUs from a communication model NOT calibrated on a measured multi-GPU "
    "run (extrapolated); cost and $/hour: N x the price per GPU-hour"
)
CHEAPEST_MARK = "$"
FASTEST_MARK = "»"
TEXT_WIDTH = 80
# (key, header, width, right-aligned): the picker drops "vram" on narrow terminals
COLUMNS: tuple[tuple[str, str, int, bool], ...] = (
    ("flag", "", 2, False),
    ("card", "card", 15, False),
    ("vram", "VRAM", 5, True),
    ("fit", "fit", 8, False),
    ("peak", "peak", 6, True),
    ("free", "free", 6, True),
    ("tok_s", "tok/s", 6, True),
    ("time", "time", 8, True),
    ("cost", "cost", 8, True),
    ("price", "$/hour", 10, False),
)
# a few words for the fit column: the single change that makes the run fit
CHANGE_WORDS = {
    "gradient_checkpointing": "ckpt",
    "micro_batch": "mb/2",
    "optimizer": "8bit",
    "qlora": "qlora",
    "lora": "lora",
    "nf4": "4-bit",
    "targets": "q,v",
    "max_length": "len/2",
}


def gib_cell(n_bytes: float, sign: bool = False) -> str:
    """A table cell: one decimal, none from 100 GiB (the column stays narrow)."""
    return fmt.gib(n_bytes, 0 if abs(n_bytes / GIB) >= 99.95 else 1, "G", sign=sign)


def fit_cell(row: CardRow) -> str:
    if row.fit.verdict == "no" and row.fit.change is not None:
        return f"no→{CHANGE_WORDS.get(row.fit.change.key, row.fit.change.key)}"
    return row.fit.verdict


def flag_cell(row: CardRow) -> str:
    return (CHEAPEST_MARK if row.cheapest else "") + (FASTEST_MARK if row.fastest else "")


def card_cell(row: CardRow) -> str:
    """The card's name; a row of several GPUs follows its card's row: `  x4 FSDP`."""
    if row.gpus == 1:
        return row.card.name
    assert row.sharding is not None  # set on a row of several GPUs
    return f"  x{row.gpus} {row.sharding.upper()}"


def price_cell(row: CardRow, today: date) -> str:
    """`$0.59 30d` (a default price, 30 days old) or `$0.44 own` (your cards.yaml); a row of
    several GPUs: what they cost together an hour, `$2.36 x4`."""
    if row.gpus > 1:
        return f"${row.usd_per_hour:.2f} x{row.gpus}"
    price = f"${row.card.price_per_hour:.2f}"
    if not row.card.price_is_default:
        return f"{price} own"
    return f"{price} {max(price_age_days(row.card, today), 0)}d"


def row_cells(row: CardRow, today: date) -> dict[str, str]:
    """Every column of one row, as text."""
    shown = row.shown
    peak: int = row.fit.peak_bytes
    free: float = row.fit.headroom_bytes
    if row.shown_workload_is_changed:
        assert row.fit.change is not None  # the figures with the change are the change's
        peak = row.fit.change.peak_bytes
        free = row.card.vram_gib * GIB - peak
    return {
        "flag": flag_cell(row),
        "card": card_cell(row),
        "vram": f"{row.card.vram_gib:.0f}G" if row.card.vram_gib >= 99.95 else f"{row.card.vram_gib:.1f}G",
        "fit": fit_cell(row),
        "peak": gib_cell(peak),
        "free": gib_cell(free, sign=True),
        "tok_s": "-" if shown is None else fmt.rate(shown.speed.tokens_per_s),
        "time": "-" if shown is None or shown.time_s is None else fmt.duration(shown.time_s),
        "cost": "-" if shown is None else fmt.money(shown.cost_usd),
        "price": price_cell(row, today),
    }


def workload_words(table: CardTable) -> str:
    w = table.workload
    s = w.shape
    if w.method == "full":
        method = "full fine-tune"
    else:
        targets = w.lora_targets if isinstance(w.lora_targets, str) else ",".join(w.lora_targets)
        base = f"{w.quant_bits}-bit QLoRA" if w.method == "qlora" else "LoRA"
        method = f"{base} r{w.lora_r} on {targets}"
    ckpt = "checkpointing on" if w.gradient_checkpointing else "checkpointing off"
    if w.objective != "sft":  # docs/preference.md: pairs are twice the sequences; the reference
        method += f", {w.objective} (reference: {w.reference})"
    return (
        f"{s.name} ({fmt.params(s.params)} params), {method}, max length {w.seq_len}, "
        f"micro-batch {w.micro_batch} x {w.grad_accum} accumulation, {ckpt}, {w.optimizer}"
    )


def legend_lines(table: CardTable) -> list[str]:
    """What the flags mean and which rows they mark."""
    lines = []
    cheapest, fastest = table.cheapest, table.fastest
    margin = f"with the {SAFETY_MARGIN:.0%} margin"
    if cheapest is None:
        lines.append(f"no card fits the run as given ({margin}); see what makes it fit below")
    else:
        cost = cheapest.runs_as_given().cost_usd
        what = fmt.money(cost) if cost is not None else f"${cheapest.usd_per_hour:.2f}/hour"
        lines.append(
            f"{CHEAPEST_MARK} cheapest card the run fits ({margin}), by {table.cheapest_by}: "
            f"{cheapest.name} ({what})"
        )
    if fastest is not None:
        within = "" if table.budget_usd is None else f" within {fmt.money(table.budget_usd)}"
        figures = fastest.runs_as_given()
        time = "" if figures.time_s is None else f", {fmt.duration(figures.time_s)}"
        lines.append(
            f"{FASTEST_MARK} fastest card that fits{within}: {fastest.name} "
            f"({fmt.rate(figures.speed.tokens_per_s)} tok/s{time})"
        )
        if table.tied_with_fastest:
            lines.append(f"  {tie_words(table)}; {tie_reason(fastest)}")
    return lines


def tie_words(table: CardTable, most: int | None = None) -> str:
    """The cards as fast as the flagged fastest (`table.tied_with_fastest`: the cheapest of a tie is
    flagged), "as fast and dearer: H100 SXM, B200"; "" when none ties. `most`: name that many, then
    say how many more ("L4, A10, A10G and 8 more"), so a short summary never stops mid-list."""
    names = [r.name for r in table.tied_with_fastest]
    if most is not None and len(names) > most + 1:
        names = [*names[:most], f"{len(names) - most} more"]
        return f"as fast and dearer: {', '.join(names[:-1])} and {names[-1]}"
    return f"as fast and dearer: {', '.join(names)}" if names else ""


def tie_reason(fastest: CardRow) -> str:
    """Why several cards run at one speed."""
    if fastest.runs_as_given().speed.bound == "overhead":
        return (
            "the run is host-bound on them (Python and kernel launches set the pace, not the GPU): "
            "a bigger micro-batch speeds it up, a faster card does not"
        )
    return "the speed model rates them alike"


def table_text(table: CardTable, width: int = TEXT_WIDTH) -> str:
    """`cockpit cards`: the inputs, the table, the flags, what makes each card fit, the warnings."""
    est = table.estimate
    lines = [
        f"{workload_words(table)}; an estimate:",
        f"peak {est.band_text()} on any card (while loading {est.load_peak_bytes / GIB:.1f} "
        f"GiB); run: {table.size.describe(table.workload)}"
        + ("" if table.budget_usd is None else f"; budget {fmt.money(table.budget_usd)}"),
        f"prices: {table.prices_from}; $/hour shows a default's age in days, or 'own' for yours",
        f"speeds: calibrated on {CALIBRATED_ON}; other cards scaled by dense bf16 TFLOPS and bandwidth",
    ]
    for band in est.unsure:
        lines.append(f"band: +{band.bytes / GIB:.1f} GiB at the top for {band.note}; the fit counts the top")
    if max(table.gpu_counts) > 1:
        lines.append(MULTI_NOTE)
    lines += [
        "",
    ]
    cells = [row_cells(row, table.today) for row in table.rows]
    # each column as wide as its header or its widest cell (user cards may have long names)
    widths = {key: max([len(header), *(len(c[key]) for c in cells)]) for key, header, _, _ in COLUMNS}
    widths["card"] = min(widths["card"], 22)
    widths["flag"] = len(CHEAPEST_MARK + FASTEST_MARK)

    def line(values: dict[str, str]) -> str:
        out = []
        for key, _, _, right in COLUMNS:
            text = values[key][: widths[key]]
            out.append(text.rjust(widths[key]) if right else text.ljust(widths[key]))
        return " ".join(out).rstrip()

    lines.append(line({key: header for key, header, _, _ in COLUMNS}))
    lines.extend(line(c) for c in cells)
    lines.append("")
    lines.extend(legend_lines(table))
    changed = [row for row in table.rows if row.fit.change is not None]
    if changed:
        lines.append(
            "what makes it fit (no→X in the table: its peak, speed, time and cost are with that change):"
        )
        lines.extend(f"  {row.phrase()}" for row in changed)
    hopeless = [row.name for row in table.rows if row.fit.verdict == "no" and row.fit.change is None]
    if hopeless:
        lines.append(f"no single change makes it fit: {', '.join(hopeless)}")
    lines.extend(f"warning: {w}" for w in table.warnings)
    return "\n".join(wrapped(lines, width))
