"""The export screen, over the run screen of an ended run (`e`): what `cockpit export` does, chosen
with keys, checked before it starts and followed while it runs.

The choices: the weights (final, the best checkpoint by eval loss, or any complete checkpoint),
merge on or off, the merged dtype, GGUF none or a type of schema.GGUF_TYPES, and the destination
(empty: the default folder under the run's exports/). Each change re-checks RAM and disk
(cockpit.results.export.prepare, in a thread: the base's shape may be read from the hub) and shows
the numbers. Enter starts the
export process (`python -m train_backend.export`, which alone imports torch) from a thread that
posts its progress; only the handlers here draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Static

from cockpit import fmt
from cockpit.config.schema import GGUF_TYPES as schema_gguf_types
from cockpit.results import export as exporter
from cockpit.results.merge_check import describe_event, describe_readback
from cockpit.run.rundir import RunDir
from widgets.footer import Footer

DTYPES = ("bf16", "fp16")
GGUF_TYPES = (None, *schema_gguf_types)
STAGE_WIDTH = 20  # the progress bar's width: a stage line fits 80 columns


@dataclass(frozen=True)
class Weights:
    label: str  # shown
    checkpoint: int | None  # None: final/ (else the last complete checkpoint)


def weight_choices(run: RunDir, best_checkpoint: str | None) -> list[Weights]:
    """final first, then the best by eval loss, then every complete checkpoint, newest first."""
    out = [Weights("final", None)]
    numbers = [int(p.name.rsplit("-", 1)[1]) for p in run.complete_checkpoints()]
    if best_checkpoint and best_checkpoint.startswith("checkpoint-"):
        best = int(best_checkpoint.rsplit("-", 1)[1])
        if best in numbers:
            out.append(Weights(f"best by eval: checkpoint-{best}", best))
    out += [Weights(f"checkpoint-{n}", n) for n in sorted(numbers, reverse=True)]
    return out


def shown_path(path: str | Path, run: RunDir) -> str:
    """A path in the run's folder relative to it (the head names the run), others as they are."""
    path = Path(path)
    try:
        rel = path.resolve().relative_to(run.path.resolve())
    except ValueError:
        return str(path)
    return "the run's folder" if str(rel) == "." else str(rel)


class ScreenProgress:
    """The `Progress` interface of cockpit.results.export, posting to the screen from the export thread."""

    def __init__(self, screen: ExportScreen) -> None:
        self.screen = screen

    def update(self, event: dict) -> None:
        self.screen.post_message(ExportScreen.Stage(exporter.stage_line(event, STAGE_WIDTH)))

    def check(self, event: dict) -> None:
        self.screen.post_message(ExportScreen.Stage(f"  check    {describe_event(event)}", key="check"))

    def readback(self, event: dict) -> None:
        line = f"  readback {describe_readback(event)}"
        self.screen.post_message(ExportScreen.Stage(line, key="readback-check"))

    def warning(self, message: str) -> None:
        self.screen.post_message(ExportScreen.Stage(f"  warning: {message}", key="warning"))


class ExportScreen(Screen):
    CSS_PATH = "export.tcss"
    AUTO_FOCUS = ""  # nothing focused: the keys below work at once; Tab reaches the destination
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "weights", "Weights"),
        Binding("m", "merge", "Merge"),
        Binding("t", "dtype", "Dtype"),
        Binding("g", "gguf", "GGUF"),
        Binding("enter", "start", "Export"),
        Binding("escape", "close", "Back"),
    ]

    class Checked(Message):
        """The RAM/disk check for the choices numbered `asked`: a plan, or why it cannot start."""

        def __init__(self, asked: int, plan: exporter.Plan | None, problem: str | None) -> None:
            super().__init__()
            self.asked, self.plan, self.problem = asked, plan, problem

    class Stage(Message):
        """A line of the running export (a stage's bar, the merge check, a warning)."""

        def __init__(self, line: str, key: str | None = None) -> None:
            super().__init__()
            self.line = line
            self.key = key or line.split()[0]

    class Ended(Message):
        """The export finished (`out`, `info`) or failed (`error`)."""

        def __init__(self, out: Path | None, info: dict | None, error: str | None) -> None:
            super().__init__()
            self.out, self.info, self.error = out, info, error

    def __init__(self, run: RunDir, best_checkpoint: str | None = None) -> None:
        super().__init__()
        self.run = run
        self.choices = weight_choices(run, best_checkpoint)
        self.weights = 0
        self.merge = False
        self.dtype = "bf16"
        self.gguf: str | None = None
        self.asked = 0  # numbers each check, so that a slow one for old choices is dropped
        self.plan: exporter.Plan | None = None
        self.problem: str | None = None
        self.state = "choosing"  # choosing | exporting | done | failed
        self.stages: dict[str, str] = {}
        self.result: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static(Text(f"Export run {self.run.run_id}", style="bold"), id="export-head")
        yield Static("", id="export-choices")
        yield Input(placeholder="(empty: the default folder below)", id="export-to")
        with VerticalScroll(id="export-body"):
            yield Static("", id="export-check")
            yield Static("", id="export-progress")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#export-to").border_title = "to (Tab, then a folder)"
        self.query_one("#export-body").border_title = "check"
        self._draw_choices()
        self._check()

    # ------------------------------------------------------------ choices

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in ("weights", "merge", "dtype", "gguf", "start") and self.state != "choosing")

    def action_weights(self) -> None:
        self.weights = (self.weights + 1) % len(self.choices)
        self._changed()

    def action_merge(self) -> None:
        self.merge = not self.merge
        if not self.merge:
            self.gguf = None  # a GGUF is of the merged model
        self._changed()

    def action_dtype(self) -> None:
        """The merged model's dtype; the adapter alone has none, so `t` merges it first (as `g`)."""
        if self.merge:
            self.dtype = DTYPES[(DTYPES.index(self.dtype) + 1) % len(DTYPES)]
        self.merge = True
        self._changed()

    def action_gguf(self) -> None:
        self.gguf = GGUF_TYPES[(GGUF_TYPES.index(self.gguf) + 1) % len(GGUF_TYPES)]
        if self.gguf:
            self.merge = True
        self._changed()

    def on_input_changed(self, _event: Input.Changed) -> None:
        if self.state == "choosing":
            self._check()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.set_focus(None)
        self.action_start()

    def _changed(self) -> None:
        self._draw_choices()
        self.refresh_bindings()
        self._check()

    def _draw_choices(self) -> None:
        text = Text()
        rows = [
            ("c", "weights", self.choices[self.weights].label),
            (
                "m",
                "merge",
                "on: the adapter merged into the base" if self.merge else "off: the adapter alone",
            ),
            ("t", "dtype", self.dtype if self.merge else "- (merge only)"),
            ("g", "GGUF", self.gguf or "none"),
        ]
        for key, name, value in rows:
            text.append(f" {key} ", style="bold reverse" if self.state == "choosing" else "dim")
            text.append(f" {name:<8}", style="bold")
            text.append(f"{value}\n")
        text.rstrip()
        self.query_one("#export-choices", Static).update(text)

    def _check(self) -> None:
        self.asked += 1
        self.plan, self.problem = None, None
        self.query_one("#export-check", Static).update(Text("checking RAM and disk...", style="dim"))
        to = self.query_one("#export-to", Input).value.strip() or None
        self._prepare(
            self.asked, self.choices[self.weights].checkpoint, self.merge, self.dtype, self.gguf, to
        )

    @work(thread=True, exclusive=True, group="export-check")
    def _prepare(self, asked: int, checkpoint: int | None, merge: bool, dtype: str, gguf, to) -> None:
        try:
            plan = exporter.prepare(self.run, checkpoint, merge, dtype, gguf, to)
        except (exporter.ExportError, OSError, ValueError) as exc:
            self.post_message(self.Checked(asked, None, str(exc)))
            return
        self.post_message(self.Checked(asked, plan, None))

    def on_export_screen_checked(self, message: Checked) -> None:
        if message.asked != self.asked or self.state != "choosing":
            return
        self.plan, self.problem = message.plan, message.problem
        self.query_one("#export-check", Static).update(self._check_text())

    def _check_text(self, started: bool = False) -> Text:
        if started:  # the figures were seen; the room goes to the progress
            need = self.plan.need
            text = Text(f"{self.plan.what} from {self.plan.source.label}", style="bold")
            text.append(
                f" into {shown_path(self.plan.out, self.run)}; needs ~{fmt.size(need.ram_bytes)} RAM, "
                f"~{fmt.size(need.disk_bytes)} disk"
            )
            return text
        if self.problem is not None:
            text = Text("cannot start: ", style="bold red")
            text.append(self.problem)
            return text
        plan = self.plan
        need = plan.need
        text = Text(f"{plan.what} from {plan.source.label}\n", style="bold")
        text.append(f"into {shown_path(plan.out, self.run)}\n")
        for note in plan.notes:
            text.append(f"{note}\n", style="yellow")
        text.append(
            f"RAM   ~{fmt.size(need.ram_bytes)} of {fmt.size(need.ram_free)} available ({need.ram_parts})\n"
        )
        text.append(
            f"disk  ~{fmt.size(need.disk_bytes)} of {fmt.size(need.disk_free)} free at "
            f"{shown_path(need.disk_where, self.run)}\n"
        )
        for predicted in need.files:
            text.append(f"  {predicted.line()}\n")
        text.append("Enter starts it.", style="bold")
        return text

    # ------------------------------------------------------------ the export

    def action_start(self) -> None:
        if self.state != "choosing":
            return
        if self.plan is None:
            self.notify(self.problem or "the check is still running", severity="warning")
            return
        self.state = "exporting"
        self.refresh_bindings()
        self.query_one("#export-to", Input).disabled = True
        self.query_one("#export-body").border_title = "exporting"
        self.query_one("#export-check", Static).update(self._check_text(started=True))
        self._draw_choices()
        self._export(self.plan)

    @work(thread=True, exclusive=True, group="export")
    def _export(self, plan: exporter.Plan) -> None:
        try:
            out, info = exporter.execute(plan, ScreenProgress(self))
        except (exporter.ExportError, OSError) as exc:
            self.post_message(self.Ended(None, None, str(exc)))
            return
        except Exception as exc:  # said on screen rather than a dead worker
            self.post_message(self.Ended(None, None, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(self.Ended(out, info, None))

    def on_export_screen_stage(self, message: Stage) -> None:
        self.stages[message.key] = message.line
        self._draw_progress()

    def on_export_screen_ended(self, message: Ended) -> None:
        body = self.query_one("#export-body")
        if message.error is not None:
            self.state = "failed"
            body.border_title = "the export failed"
            self.result = [
                f"FAILED: {message.error}",
                f"the run is untouched; the export's log: {exporter.LOG_NAME}",
            ]
        else:
            self.state = "done"
            body.border_title = "exported"
            lines = exporter.summary_lines(message.out, message.info)
            checks = [
                x for x in lines if x.startswith(("merge check:", "against the trained", "GGUF check:"))
            ]
            rest = [x for x in lines[1:] if x not in checks]
            self.result = [f"written to {shown_path(message.out, self.run)}", *checks, *rest]
        self.refresh_bindings()
        self._draw_progress()

    def _draw_progress(self) -> None:
        """The stages while it runs; once done the result (each stage's time is in its `time:` line),
        or the stages reached and the error."""
        text = Text()
        if self.state != "done":
            text.append("\n".join(self.stages.values()))
        if self.result:
            style = "bold red" if self.state == "failed" else "bold green"
            text.append(("\n" if text else "") + self.result[0] + "\n", style=style)
            text.append("\n".join(self.result[1:]))
        self.query_one("#export-progress", Static).update(text)

    def action_close(self) -> None:
        if self.focused is self.query_one("#export-to"):
            self.set_focus(None)
            return
        if self.state == "exporting":
            self.notify("the export is running: wait for it to end (it cannot be left half written)")
            return
        self.app.pop_screen()
