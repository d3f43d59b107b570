"""The client of the chat backend (`python -m train_backend.chat`): start it on a run's weights,
send conversations, read the answer as it streams. Used by `cockpit chat` (one-shot, REPL, TUI).

The backend's stdout carries protocol messages only; its stderr goes to the run's `chat.log`, whose
tail is quoted when it dies. A conversation is a list of {role, content}; the backend renders it
with the chat template (or the text format the run trained on) and stops at the template's end.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cockpit.protocol.wire import PROTOCOL_VERSION, Fault, LineDecoder
from cockpit.results.targets import ChatTarget
from cockpit.run.process import project_root
from cockpit.run.rundir import RunDir
from cockpit.run.state import RunState

CHAT_LOG_NAME = "chat.log"
LOAD_TIMEOUT_S = 1800.0  # a 70B base from a slow disk
ANSWER_TIMEOUT_S = 600.0
DEFAULT_MAX_NEW_TOKENS = 256


class ChatError(RuntimeError):
    """The backend failed or went away; the message says why (its error event, or its log's tail)."""


@dataclass
class Token:
    text: str


@dataclass
class Done:
    text: str
    finish: str
    new_tokens: int
    seconds: float
    tokens_per_s: float | None
    end_token: str | None = None  # the end token that stopped it (finish eos)


@dataclass
class ChatSession:
    """One backend process and the conversation so far."""

    run: RunDir
    target: ChatTarget
    style: str
    prefix: str = ""
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    command: list[str] | None = None  # tests replace the backend
    messages: list[dict[str, Any]] = field(default_factory=list)
    ready: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    _decoder: LineDecoder = field(default_factory=LineDecoder)
    _pending: list[dict[str, Any] | Fault] = field(default_factory=list)

    @classmethod
    def for_run(cls, run: RunDir, state: RunState, target: ChatTarget, **kw: Any) -> ChatSession:
        """The prompt style the run's data event recorded (chat template, llama2, guanaco, plain)."""
        data = state.data or {}
        return cls(
            run, target, data.get("prompt_style") or "chat_template", data.get("prompt_prefix") or "", **kw
        )

    def start(self, timeout_s: float = LOAD_TIMEOUT_S) -> dict[str, Any]:
        """Start the backend and wait until the weights are loaded: its `chat_ready` message."""
        command = self.command or [
            sys.executable,
            "-m",
            "train_backend.chat",
            str(self.run.path),
            "--target",
            str(self.target.path),
            "--kind",
            self.target.kind,
            "--style",
            self.style,
            "--prefix",
            self.prefix,
        ]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (project_root(), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        log = open(self.run.path / CHAT_LOG_NAME, "ab")  # noqa: SIM115 - the child holds it
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=project_root(),
                env=env,
                start_new_session=True,
            )
        finally:
            log.close()
        for message in self._messages(timeout_s, "loading the model"):
            if message.get("type") == "chat_ready":
                self.ready = message
                return message
        raise ChatError(self._gone("before it had loaded the model"))

    def ask(self, text: str, timeout_s: float = ANSWER_TIMEOUT_S) -> Iterator[Token | Done]:
        """Send the user's turn; yield the answer's pieces, then `Done` (the turn is kept)."""
        self.messages.append({"role": "user", "content": text})
        self._send({"type": "chat", "messages": self.messages, "max_new_tokens": self.max_new_tokens})
        for message in self._messages(timeout_s, "answering"):
            kind = message.get("type")
            if kind == "chat_token":
                yield Token(str(message.get("text", "")))
            elif kind == "chat_done":
                done = Done(
                    str(message.get("text", "")),
                    str(message.get("finish")),
                    int(message.get("new_tokens") or 0),
                    float(message.get("seconds") or 0.0),
                    message.get("tokens_per_s"),
                    message.get("end_token"),
                )
                self.messages.append({"role": "assistant", "content": done.text})
                yield done
                return
        self.messages.pop()
        raise ChatError(self._gone("in the middle of an answer"))

    def reset(self) -> None:
        self.messages.clear()

    def close(self, wait_s: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                self._send({"type": "quit"}, proc)
                if proc.stdin is not None:  # a pipe: start() asked for one
                    proc.stdin.close()
                proc.wait(wait_s)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        finally:
            if proc.stdout is not None:
                proc.stdout.close()

    # ------------------------------------------------------------ the pipe

    def _send(self, message: dict[str, Any], proc: subprocess.Popen[bytes] | None = None) -> None:
        proc = proc or self.proc
        assert proc is not None and proc.stdin is not None, "start() first: it opens the pipes"
        line = json.dumps({"v": PROTOCOL_VERSION, "ts": round(time.time(), 3), **message}) + "\n"
        try:
            proc.stdin.write(line.encode("utf-8"))
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ChatError(self._gone(f"when sent a request ({exc})")) from None

    def _messages(self, timeout_s: float, doing: str) -> Iterator[dict[str, Any]]:
        """Messages from the backend until it ends; an `error` message becomes a ChatError."""
        deadline = time.monotonic() + timeout_s
        assert self.proc is not None and self.proc.stdout is not None, "start() first: it opens the pipes"
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                while self._pending:
                    item = self._pending.pop(0)
                    if isinstance(item, Fault):
                        continue
                    if item.get("type") == "error":
                        raise ChatError(
                            f"{item.get('message')}" + (f"\nfix: {item['hint']}" if item.get("hint") else "")
                        )
                    yield item
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChatError(
                        f"the chat backend took more than {timeout_s:.0f} s {doing}; see {self.log_path}"
                    )
                if not selector.select(min(left, 1.0)):
                    if self.proc.poll() is not None:
                        self._pending.extend(self._decoder.finish())
                        if not self._pending:
                            return
                    continue
                data = os.read(fd, 1 << 16)
                if not data:
                    self._pending.extend(self._decoder.finish())
                    if not self._pending:
                        return
                    continue
                self._pending.extend(self._decoder.feed(data))

    @property
    def log_path(self) -> Path:
        return self.run.path / CHAT_LOG_NAME

    def _gone(self, when: str) -> str:
        code = self.proc.poll() if self.proc is not None else None
        tail = ""
        try:
            lines = [x for x in self.log_path.read_text(errors="replace").splitlines() if x.strip()]
            tail = "\n".join(lines[-5:])
        except OSError:
            pass
        return f"the chat backend exited (code {code}) {when}; the end of {self.log_path}:\n{tail}"


def ready_line(ready: dict[str, Any]) -> str:
    device = ready.get("device") or {}
    bits = ", 4-bit base" if ready.get("quantized") else ""
    stops = ", ".join(ready.get("stop_tokens", []) + ready.get("stop_strings", [])) or "none"
    return (
        f"loaded in {ready.get('load_s')} s on {device.get('kind')} ({ready.get('precision')}{bits}); "
        f"prompts as {ready.get('style')}; stops at: {stops}"
    )
