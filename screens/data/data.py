"""The Data screen: the data check's report (`cockpit data`'s, `train_backend.datacheck`) on
screen: the verdict, the data errors and warnings, each source with its format, columns and rows,
the token lengths with their histogram and the run's time and cost, and a few rows as the trainer
sees them, the trained text underlined in colour, ✂ where max_length cuts.

A reusable Screen given the report (plain data): the picker opens it with `d`; a run view can
push it with the report of its config. Everything scrolls; `e`, `s`, `t`, `p` jump to a part.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from cockpit.datacheck import text as report_text
from widgets.footer import Footer

TRAINED_STYLE = "bold green underline"
CUT_STYLE = "bold red"


class DataScreen(Screen[None]):
    CSS_PATH = "data.tcss"
    AUTO_FOCUS = "#data-body"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("e", "jump('data-problems')", "Errors"),
        Binding("s", "jump('data-sources')", "Sources"),
        Binding("t", "jump('data-tokens')", "Tokens"),
        Binding("p", "jump('data-preview')", "Preview"),
    ]

    def __init__(self, report: dict, source: str = "the config", width: int | None = None) -> None:
        super().__init__()
        self.report = report
        self.source = source
        self.text_width = width or 78  # columns the plain parts are wrapped to (the screen's, once known)

    def compose(self) -> ComposeResult:
        self.text_width = max(40, self.app.size.width - 4)
        yield Static(self._summary(), id="data-summary")
        with VerticalScroll(id="data-body"):
            yield Static(self._problems(), id="data-problems")
            yield Static(self._sources(), id="data-sources")
            yield Static(self._tokens(), id="data-tokens")
            yield Static(self._preview(), id="data-preview")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#data-summary").border_title = "data"
        for part, title in (
            ("data-problems", "errors and warnings"),
            ("data-sources", "sources"),
            ("data-tokens", "tokens, time and cost"),
            ("data-preview", "as the trainer sees it"),
        ):
            self.query_one(f"#{part}").border_title = title

    # ------------------------------------------------------------ parts

    def _summary(self) -> Text:
        report = self.report
        problems, warnings = report.get("problems") or [], report.get("warnings") or []
        totals = report.get("totals") or {}
        tokens = totals.get("tokens_per_epoch")
        size = f"{totals.get('train_rows', 0):,} rows" + (f", {tokens:,} tokens an epoch" if tokens else "")
        head = Text(f"{self.source}: ")
        if problems:
            head.append(f"{len(problems)} data error(s): nothing can train", style="bold red")
        else:
            head.append("OK", style="bold green")
            if warnings:
                head.append(f", {len(warnings)} warning(s)", style="yellow")
        fmt = report.get("format") or "no single format"
        head.append(f" · {size} · {fmt} · max_length {report.get('max_length')}")
        return head

    def _problems(self) -> Text:
        out = Text()
        lines = report_text.problem_lines(self.report)
        warnings = report_text.warning_lines(self.report)
        if not lines and not warnings:
            return Text("no data errors, no warnings", style="green")
        for line in self._wrap(lines):
            out.append(line + "\n", style="red" if "data error" in line or line.startswith("data") else "")
        for line in self._wrap(warnings):
            out.append(line + "\n", style="yellow" if "warning:" in line else "")
        return _trimmed(out)

    def _sources(self) -> Text:
        lines = []
        for entry in self.report.get("sources") or []:
            lines += report_text.source_lines(entry, self.report)
        dupes = self.report.get("duplicates") or {}
        if not dupes.get("count"):
            lines.append(f"exact duplicates: none among {dupes.get('checked_rows', 0):,} rows")
        return Text("\n".join(self._wrap(lines)))

    def _tokens(self) -> Text:
        lines = report_text.token_lines(self.report, self.text_width, duplicates=False)
        lines += report_text.preference_lines(self.report.get("preference"))
        lines += report_text.run_lines(self.report.get("run"))
        return Text("\n".join(self._wrap(lines)) or "token lengths not counted (no tokenizer)")

    def _preview(self) -> Text:
        rows = self.report.get("preview") or []
        if not rows:
            return Text("no rows to show")
        out = Text()
        out.append("trained text ")
        out.append("underlined", style=TRAINED_STYLE)
        out.append("; ")
        out.append(report_text.CUT_MARK, style=CUT_STYLE)
        out.append(" where max_length cuts\n")
        several = len(self.report.get("sources") or []) > 1
        for row in rows:
            at = report_text.where([row], 1)
            source = f"source {row['source']} " if several else ""
            if row.get("error"):
                out.append(f"\n{source}{at}: not shown: {row['error']}\n", style="yellow")
                continue
            cut = f", {row['answer_tokens_cut']:,} answer tokens cut" if row.get("answer_tokens_cut") else ""
            out.append(
                f"\n{source}{at}: {row['tokens']:,} tokens, {row['trained_tokens']:,} trained{cut}\n",
                style="bold",
            )
            out.append_text(styled_row(row))
            if row.get("chars_hidden"):
                out.append(f"\n... ({row['chars_hidden']:,} characters more)", style="dim")
            out.append("\n")
        return _trimmed(out)

    def _wrap(self, lines: list[str]) -> list[str]:
        from cockpit.plain import wrapped

        return wrapped(lines, self.text_width)

    # ------------------------------------------------------------ keys

    def action_back(self) -> None:
        self.dismiss(None)

    def action_jump(self, part: str) -> None:
        self.query_one(f"#{part}").scroll_visible(top=True, animate=False)


def styled_row(row: dict) -> Text:
    """A preview row's text: what trains underlined in colour, ✂ where max_length cuts."""
    out, at, cut = Text(), 0, row.get("cut_at")
    for segment in row.get("segments") or []:
        text = segment["text"]
        style = TRAINED_STYLE if segment["trained"] else ""
        if cut is not None and at <= cut < at + len(text):
            out.append(text[: cut - at], style=style)
            out.append(report_text.CUT_MARK, style=CUT_STYLE)
            out.append(text[cut - at :], style=style)
        else:
            out.append(text, style=style)
        at += len(text)
    return out


def _trimmed(text: Text) -> Text:
    text.rstrip()
    return text
