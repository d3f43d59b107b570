"""The chat screen: a conversation with a run's model, its answer streamed as the backend writes it.

The session (`cockpit.results.chat_client.ChatSession`, or a test double with the same `start`,
`ask`, `reset` and `close`) is handed in. A worker thread loads the model and reads each answer;
it posts messages, and only their handlers touch the widgets.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Input, Static

from cockpit.results.chat_client import ChatError, Done, Token, ready_line
from screens.hangup import leave_when_terminal_goes
from widgets.footer import Footer


class ChatApp(App[int]):
    TITLE = "lora-cockpit chat"
    CSS_PATH = "chat.tcss"
    ENABLE_COMMAND_PALETTE = False
    AUTO_FOCUS = "#message"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+n", "new_chat", "New chat"),
        Binding("ctrl+q", "quit", "Quit"),
        Binding("escape", "quit", "Quit", show=False),
    ]

    class Loaded(Message):
        def __init__(self, ready: dict | None, error: str | None) -> None:
            super().__init__()
            self.ready, self.error = ready, error

    class Piece(Message):
        def __init__(self, piece: Token | Done | None, error: str | None = None) -> None:
            super().__init__()
            self.piece, self.error = piece, error

    def __init__(self, session, run_id: str):
        super().__init__()
        self._terminal = None  # watches for the terminal going away (screens/hangup.py)
        self.session = session
        self.run_id = run_id
        self.ready: dict | None = None
        self.busy = True  # loading, or answering: the next message waits
        self._answer: Static | None = None
        self._answer_text = Text()
        self.turns = 0

    def compose(self) -> ComposeResult:
        yield Static(f"chat with run {self.run_id}: {self.session.target.label}", id="chat-head")
        yield Static("loading the model in the backend…", id="chat-status")
        yield VerticalScroll(id="conversation")
        yield Input(placeholder="loading…", id="message", disabled=True)
        yield Footer()

    def on_mount(self) -> None:
        self._terminal = leave_when_terminal_goes(self, lambda: 0, last_words=self.session.close)
        self.query_one("#conversation").border_title = "conversation"
        note = getattr(self.session.target, "note", "")
        if note:
            self._add(Text(note, style="dim"), "note")
        self._load()

    @work(thread=True, exclusive=True, group="chat")
    def _load(self) -> None:
        try:
            self.post_message(self.Loaded(self.session.start(), None))
        except ChatError as exc:
            self.post_message(self.Loaded(None, str(exc)))

    def on_chat_app_loaded(self, message: Loaded) -> None:
        if message.error is not None:
            self.query_one("#chat-status", Static).update(Text(message.error, style="bold red"))
            self.query_one(Input).placeholder = "the model did not load: Ctrl-Q leaves"
            return
        self.ready = message.ready
        self.busy = False
        self.query_one("#chat-status", Static).update(Text(ready_line(message.ready), style="dim"))
        field = self.query_one(Input)
        field.disabled = False
        field.placeholder = "your message, then Enter"
        field.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text or self.busy:
            return
        event.input.value = ""
        self.busy = True
        event.input.placeholder = "answering…"
        self._add(Text(text), "user")
        self._answer_text = Text()
        self._answer = self._add(self._answer_text, "assistant")
        self._ask(text)

    @work(thread=True, exclusive=True, group="chat")
    def _ask(self, text: str) -> None:
        try:
            for piece in self.session.ask(text):
                self.post_message(self.Piece(piece))
        except ChatError as exc:
            self.post_message(self.Piece(None, str(exc)))

    def on_chat_app_piece(self, message: Piece) -> None:
        piece = message.piece
        if isinstance(piece, Token):
            self._answer_text.append(piece.text)
            self._answer.update(self._answer_text)
        else:
            if message.error is not None:
                self._answer_text.append(f"\n{message.error}", style="bold red")
            else:
                self.turns += 1
                rate = f", {piece.tokens_per_s} tokens/s" if piece.tokens_per_s else ""
                self._answer_text.append(f"\n{piece.finish}: {piece.new_tokens} tokens{rate}", style="dim")
            self._answer.update(self._answer_text)
            self.busy = message.error is not None and self.ready is None
            field = self.query_one(Input)
            field.placeholder = "your message, then Enter"
        self.query_one("#conversation", VerticalScroll).scroll_end(animate=False)

    def _add(self, content: Text, role: str) -> Static:
        turn = Static(content, classes=f"turn -{role}")
        if role in ("user", "assistant"):
            turn.border_title = "you" if role == "user" else "model"
        self.query_one("#conversation", VerticalScroll).mount(turn)
        return turn

    def action_new_chat(self) -> None:
        if self.busy:
            self.notify("wait for the answer to end")
            return
        self.session.reset()
        self.query_one("#conversation", VerticalScroll).remove_children()
        self.notify("new conversation")

    def action_quit(self) -> None:
        self.exit(0)

    def on_unmount(self) -> None:
        if self._terminal is not None:
            self._terminal.stop()
        self.session.close()
