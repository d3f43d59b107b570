"""The card picker: the run's settings on top, every card below with fit, peak, headroom, speed,
time and cost, and what the highlighted card needs to fit.

Every edit re-checks the form (`screens.picker.inputs.evaluate`: the config's own validator,
then the memory and speed models; a few milliseconds) and refills the table; a bad value is
marked and explained under its row of fields, and the table keeps the last valid settings,
dimmed. A hub model's config.json is fetched in a worker (Enter in the model field) and the
answer comes back as a worker message. `g` adds (or hides) rows of 2, 4 and 8 GPUs under each
card, with per-GPU memory. Enter on a card writes a training config for it (with `gpus` and
`distributed.strategy` on a row of several GPUs). `d` opens the Data screen over the config's
data check (screens/data).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Checkbox, DataTable, Input, Label, Static
from textual.worker import Worker, WorkerState

from cockpit import fmt
from cockpit.config import schema as config_mod
from cockpit.fmt import GIB
from cockpit.gpus.card import age_words, price_age_days
from cockpit.models import shape as modelshape
from cockpit.models import shipped as shapes
from cockpit.models.memory import estimate_memory
from cockpit.paths import cockpit_command
from cockpit.plan.cards import CardRow
from cockpit.plan.cards_text import CHEAPEST_MARK, FASTEST_MARK, tie_words
from cockpit.plan.multi_rows import MULTI_COUNTS, row_workload
from cockpit.speed.model import speed_inputs
from screens.picker.inputs import (
    FORM,
    Evaluation,
    chosen_config,
    config_text,
    default_path,
    evaluate,
    needs_hub,
)
from screens.picker.save import SaveConfig
from widgets.card_table import CardTableView
from widgets.footer import Footer
from widgets.memory_breakdown import BreakdownBox, MemoryBreakdown

# the form: rows of (field id, label, width); None width: takes the rest of the row
ROWS: tuple[tuple[tuple[str, str, int | None], ...], ...] = (
    (("model", "model", None), ("method", "method", 8), ("ckpt", "checkpointing", None)),
    (("seq", "max length", 7), ("batch", "micro-batch", 5), ("r", "LoRA r", 6), ("targets", "targets", None)),
    (("dataset", "dataset", None), ("epochs", "epochs", 6), ("budget", "budget $", 9)),
)
BOUND_WORDS = {"overhead": "host"}  # the speed model's "overhead": Python and kernel launches
LABELS = {field_id: label for row in ROWS for field_id, label, _ in row}
PLACEHOLDERS = {"dataset": "tokens (5M) or samples x mean (9846x350)", "budget": "none"}


def short_price_label(row: CardRow, today) -> str:
    """`(default, 30d old)` or `(yours, 2d old)`: the detail line's account of the price."""
    days = price_age_days(row.card, today)
    age = f"{days}d old" if days > 0 else age_words(days)
    return f"({'default' if row.card.price_is_default else 'yours'}, {age})"


class PickerScreen(Screen[None]):
    CSS_PATH = "picker.tcss"
    AUTO_FOCUS = "#cards"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("e", "edit", "Edit inputs"),
        Binding("b", "breakdown", "Breakdown"),
        Binding("g", "multi", "2/4/8 GPUs"),
        Binding("d", "app.data", "Data"),
        Binding("escape", "cards", "Cards"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, fields: dict[str, str | bool], picker, multi: bool = False) -> None:
        super().__init__()
        self.picker = picker  # the app: catalog, clock, trainer, shape loader, output folder
        self.base = picker.base
        self.fields = dict(fields)
        self.shapes: dict[tuple[str, str], modelshape.ModelShape | modelshape.ShapeError] = {}
        self.evaluation = Evaluation()
        self.breakdown_open = False
        self.multi = multi  # rows of 2, 4 and 8 GPUs of each card shown (key g)

    def compose(self) -> ComposeResult:
        with Vertical(id="form"):
            for number, row in enumerate(ROWS, 1):
                with Horizontal(classes="form-row"):
                    for field_id, label, width in row:
                        if field_id == "ckpt":
                            on = bool(self.fields["ckpt"])
                            yield Checkbox(f"{label} {'on' if on else 'off'}", on, id="ckpt", compact=True)
                            continue
                        yield Label(label, classes="field-label")
                        field = Input(
                            str(self.fields[field_id]),
                            placeholder=PLACEHOLDERS.get(field_id, ""),
                            id=field_id,
                            compact=True,
                            select_on_focus=False,
                        )
                        if width is not None:
                            field.styles.width = width
                        yield field
                yield Static("", id=f"problems-{number}", classes="problems")
        yield Static("", id="summary")
        yield CardTableView(id="cards")
        yield Static("", id="detail")
        with BreakdownBox(id="breakdown-box"):
            yield MemoryBreakdown("", id="breakdown")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#breakdown-box").border_title = "where the memory goes"
        for warning in self.picker.catalog.warnings:  # e.g. default prices months old
            self.notify(warning, severity="warning", timeout=15)
        self.recompute()
        model = str(self.fields["model"]).strip()
        if needs_hub(model):
            self.fetch_shape(model)

    # ------------------------------------------------------------ the form

    def read_fields(self) -> dict[str, str | bool]:
        values: dict[str, str | bool] = {w.id: w.value for w in self.query(Input) if w.id in self.fields}
        values["ckpt"] = self.query_one("#ckpt", Checkbox).value
        return values

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id in self.fields:
            self.recompute()

    def on_checkbox_changed(self, _event: Checkbox.Changed) -> None:
        self.recompute()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        model = str(self.fields.get("model", "")).strip()
        if event.input.id == "model" and needs_hub(model) and (model, self._revision()) not in self.shapes:
            self.fetch_shape(model)
            return
        self.action_cards()

    def _revision(self) -> str:
        return self.evaluation.cfg.model.revision or "main" if self.evaluation.cfg else "main"

    def shape_for(self, name: str, revision: str) -> modelshape.ModelShape | None:
        known = self.shapes.get((name, revision))
        if isinstance(known, modelshape.ShapeError):
            raise known
        if known is not None:
            return known
        if needs_hub(name):
            return None  # fetched in a worker, on Enter
        shape = self.picker.shape_loader(name, revision)  # a shipped shape or a local config.json
        if shapes.is_synthetic(name):
            self.shapes[(name, revision)] = shape  # shipped: never changes
        return shape

    def fetch_shape(self, model: str) -> None:
        key = (model, self._revision())
        self.query_one("#problems-1", Static).update(f"fetching {model}'s config.json from the hub...")
        loader = self.picker.shape_loader

        def fetch():
            try:
                return key, loader(*key)
            except modelshape.ShapeError as exc:
                return key, exc

        self.run_worker(fetch, thread=True, name="hub-config", group="hub")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name == "hub-config" and event.state == WorkerState.SUCCESS:
            key, shape = event.worker.result
            self.shapes[key] = shape
            self.recompute()

    def recompute(self) -> None:
        self.fields = self.read_fields()
        today = self.picker.today()
        self.evaluation = evaluate(
            self.fields,
            self.base,
            self.picker.catalog,
            today,
            self.shape_for,
            self.picker.trainer,
            MULTI_COUNTS if self.multi else (1,),
        )
        ev = self.evaluation
        for number, row in enumerate(ROWS, 1):
            lines = [f"{LABELS[f]}: {ev.errors[f]}" for f, _, _ in row if f in ev.errors]
            lines += [ev.notes[f] for f, _, _ in row if f in ev.notes]
            if number == len(ROWS) and FORM in ev.errors:
                lines.append(ev.errors[FORM])
            problems = self.query_one(f"#problems-{number}", Static)
            problems.update("\n".join(lines))
            problems.display = bool(lines)
        for widget in self.query(Input):
            widget.set_class(widget.id in ev.errors, "-bad")
        ckpt = self.query_one("#ckpt", Checkbox)
        ckpt.set_class("ckpt" in ev.errors, "-bad")
        ckpt.label = f"checkpointing {'on' if ckpt.value else 'off'}"
        table = self.query_one(CardTableView)
        table.show(ev.table, today)
        table.set_class(ev.table is None, "-stale")
        self.show_summary()
        self.show_selected()

    # ------------------------------------------------------------ what the table says

    def show_summary(self) -> None:
        ev, table = self.evaluation, self.query_one(CardTableView).table
        summary = self.query_one("#summary", Static)
        if ev.table is None:
            what = "fetching the model's shape" if "model" in ev.notes else "fix the marked inputs"
            stale = "; the table shows the last valid settings" if table is not None else ""
            summary.update(Text(f"{what}{stale}", style="bold"))
            return
        est = ev.table.estimate
        first = (
            f"peak {est.band_text()} on any card{' (a band: b shows it)' if est.unsure else ''} "
            f"({est.load_peak_bytes / GIB:.1f} loading) · "
            f"run: {ev.table.size.describe(ev.table.workload)}"
        )
        cheapest, fastest = ev.table.cheapest, ev.table.fastest
        if cheapest is None:
            second = "no card fits as given; a row marked no→X fits with that change (figures with it)"
        else:
            cost = cheapest.as_given.cost_usd
            what = fmt.money(cost) if cost is not None else f"${cheapest.usd_per_hour:.2f}/h"
            second = f"{CHEAPEST_MARK} cheapest that fits: {cheapest.name} {what}"
            if fastest is not None:
                within = "" if ev.table.budget_usd is None else f" within {fmt.money(ev.table.budget_usd)}"
                figures = fastest.as_given
                when = fmt.duration(figures.time_s) if figures.time_s is not None else ""
                when = when or f"{fmt.rate(figures.speed.tokens_per_s)} tok/s"
                second += f" · {FASTEST_MARK} fastest{within}: {fastest.name} {when}"
                tie = tie_words(ev.table, most=3)  # the cards that time it alike (`cockpit cards`: all)
                second += f" ({tie})" if tie else ""
            elif ev.table.warnings:
                second += f" · {ev.table.warnings[-1]}"
        summary.update(Text(f"{first}\n{second}"))

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self.show_selected()

    def show_selected(self) -> None:
        row = self.query_one(CardTableView).selected_row
        detail = self.query_one("#detail", Static)
        if row is None:
            detail.update("")
            return
        speed = speed_inputs(row.card)
        origin = "scaled from H200" if speed["extrapolated"] else "as calibrated"
        figures = row.shown
        bound = f", {BOUND_WORDS.get(figures.speed.bound, figures.speed.bound)}-bound" if figures else ""
        second = (
            f"{row.card.vram_gib:g} GiB · ${row.card.price_per_hour:.2f}/h "
            f"{short_price_label(row, self.picker.today())} · speed {origin}{bound}"
        )
        if row.gpus > 1:
            link = f" over {row.multi['link']['label']}" if row.multi else ""
            second = (
                f"{row.card.vram_gib:g} GiB per GPU · ${row.usd_per_hour:.2f}/h for {row.gpus} · speed NOT "
                f"calibrated (a model: {row.gpus} x one GPU less communication{link}){bound}"
            )
        detail.update(Text(f"{row.phrase()}\n{second}"))
        self.show_breakdown(row)

    def show_breakdown(self, row: CardRow) -> None:
        panel, box = self.query_one(MemoryBreakdown), self.query_one(BreakdownBox)
        box.display = self.breakdown_open
        table = self.query_one(CardTableView).table
        if not self.breakdown_open or table is None:
            return
        estimate = table.estimate if row.gpus == 1 and not row.shown_workload_is_changed else None
        estimate = estimate or estimate_memory(row_workload(table.workload, row))
        how = f"with {row.fit.change.description}" if row.shown_workload_is_changed else "as set above"
        if row.gpus == 1:
            box.border_title = f"where the memory goes: {row.name}, {how}"
        elif row.sharding == "fsdp":
            share = f"weights, grads, states 1/{row.gpus} each"
            box.border_title = f"one GPU of {row.name}, {how}: {share}"
        else:
            box.border_title = f"one GPU of {row.name}, {how}: a whole replica + gradient buckets"
        panel.show(estimate.parts, int(row.card.vram_gib * GIB), estimate.load_peak_bytes, estimate.unsure)

    # ------------------------------------------------------------ keys

    def action_edit(self) -> None:
        self.query_one("#model", Input).focus()

    def action_cards(self) -> None:
        self.query_one(CardTableView).focus()

    def action_multi(self) -> None:
        self.multi = not self.multi
        self.recompute()

    def action_breakdown(self) -> None:
        self.breakdown_open = not self.breakdown_open
        self.show_selected()
        view = self.query_one(CardTableView)  # the panel shrinks the table: keep the card in view
        self.call_after_refresh(lambda: view.move_cursor(row=view.cursor_row))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_write()

    def action_write(self) -> None:
        ev, row = self.evaluation, self.query_one(CardTableView).selected_row
        if ev.table is None or row is None:
            self.notify(
                "fix the marked inputs first: the table is not for the settings above", severity="warning"
            )
            return
        if row.shown is None:
            self.notify(
                f"{row.name}: does not fit, and no single change makes it fit; pick another card "
                "or change the settings",
                severity="warning",
            )
            return
        try:
            cfg = chosen_config(self.base, ev.settings, row, ev.table.budget_usd)
        except config_mod.ConfigError as exc:
            self.notify(f"cannot write a config: {exc}", severity="error")
            return
        path = default_path(cfg.model.name, row.key, self.picker.out_dir or Path("."))
        shown = str(path) if self.picker.out_dir else f"./{path.name}"
        text = config_text(cfg, ev.table, row, self.picker.clock())
        what = row.name + (f" (with {row.fit.change.description})" if row.shown_workload_is_changed else "")
        self.app.push_screen(
            SaveConfig(what, shown, lambda p: self.picker.resolve(p).exists()),
            lambda chosen: self.write(chosen, text) if chosen else None,
        )

    def write(self, chosen: str, text: str) -> None:
        target = self.picker.resolve(chosen)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        except (OSError, ValueError) as exc:  # ValueError: a pasted path with a NUL byte
            self.notify(
                f"could not write {target}: {getattr(exc, 'strerror', None) or exc}",
                severity="error",
                timeout=10,
            )
            return
        self.picker.written.append(target)
        then = f"{cockpit_command()} train {chosen}"
        self.notify(f"wrote {chosen}. Set dataset.path in it, then: {then}", timeout=15)
