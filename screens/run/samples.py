"""The Samples view, over the run screen (`m`): each prompt's answer from the base model beside the
answer of the weights picked (the newest by default; `[` and `]` step through the checkpoints), in
one scrollable column. Everything shown comes from the run's `sample` events."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from cockpit.results.samples import Answer, SampleBook, count_of, finish_text
from widgets.footer import Footer


def answer_text(answer: Answer | None, missing: str) -> Text:
    if answer is None:
        return Text(missing, style="dim")
    text = Text(answer.output) if answer.output.strip() else Text("(no visible text)", style="italic")
    text.append(f"\n{finish_text(answer)}", style="dim")
    return text


class SamplesView(Screen):
    CSS_PATH = "samples.tcss"
    AUTO_FOCUS = "#samples"  # arrows and PgUp/PgDn scroll
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left_square_bracket", "other(-1)", "Earlier"),
        Binding("right_square_bracket", "other(1)", "Later"),
        Binding("escape", "close", "Back"),
        Binding("m", "close", "Back", show=False),
    ]

    def __init__(self, book: SampleBook, run_id: str):
        super().__init__()
        self.book = book
        self.run_id = run_id
        self.label: str | None = None  # None: the newest trained weights, following new samples

    def compose(self) -> ComposeResult:
        yield Static("", id="samples-head")
        yield VerticalScroll(id="samples")
        yield Footer()

    def on_mount(self) -> None:
        self._draw()

    def show_book(self, book: SampleBook) -> None:
        """New samples came in (a checkpoint, the end)."""
        self.book = book
        self._draw()

    @property
    def shown_label(self) -> str | None:
        trained = self.book.trained_labels
        if self.label in trained:
            return self.label
        return trained[-1] if trained else None

    def action_other(self, delta: int) -> None:
        trained = self.book.trained_labels
        if not trained:
            self.notify("only the base model has answered so far: the next samples come with a checkpoint")
            return
        current = trained.index(self.shown_label)
        wanted = min(max(current + delta, 0), len(trained) - 1)
        if wanted == current:
            self.notify(
                "these are the " + ("earliest" if delta < 0 else "newest") + " trained weights sampled"
            )
            return
        # the newest again: follow new samples as they come
        self.label = None if wanted == len(trained) - 1 else trained[wanted]
        self._draw()

    def action_close(self) -> None:
        self.app.pop_screen()

    def _draw(self) -> None:
        book, label = self.book, self.shown_label
        trained = book.trained_labels
        where = f"{trained.index(label) + 1}/{len(trained)}" if label else "none yet"
        head = Text(f"Samples: base vs {label or '-'}", style="bold")
        head.append(
            f" ({where}) · greedy, {count_of(book.max_new_tokens, 'token', 'new')}, seed {book.seed}",
            style="dim",
        )
        self.query_one("#samples-head", Static).update(head)
        box = self.query_one("#samples", VerticalScroll)
        box.remove_children()
        widgets = []
        for prompt in book.prompts:
            title = Text(f"[{prompt.index + 1}] ", style="bold")
            title.append(prompt.prompt)
            if prompt.reference:
                title.append(f"\nreference: {prompt.reference}", style="dim")
            base = Static(answer_text(prompt.base, "no base answer"), classes="answer")
            base.border_title = "base"
            now = Static(answer_text(prompt.answer(label), "not sampled yet"), classes="answer -now")
            now.border_title = label or "trained"
            widgets += [Static(title, classes="prompt"), Horizontal(base, now, classes="pair")]
        box.mount_all(widgets)
