"""The JSON-lines channel between the cockpit and the trainer (see docs/protocol.md).

One message per line: a UTF-8 JSON object with the protocol version `v`, a `type` and
a timestamp `ts` (Unix seconds). The decoder is incremental and never raises on bad
input: partial lines wait for their end, and a non-JSON line, an over-long line, a
line that is not an object, a missing type, another protocol version or a line cut
off when the writer died each come out as a `Fault` that the reader reports.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from cockpit.protocol.events import EVENTS

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 1 << 20  # a log event is ~600 bytes; a traceback rarely passes 64 KiB

# Trainer -> client: the types of events.py, each documented in docs/protocol.md.
EVENT_TYPES = frozenset(EVENTS)
# Client -> trainer, through the run directory's control FIFO.
COMMAND_TYPES = frozenset({"stop", "save", "pause", "resume"})
PHASES = (
    "starting",
    "preparing_data",
    "loading_model",
    "quantising",
    "training",
    "evaluating",
    "saving",
    "sampling",
    "syncing",
    "done",
)
# Client -> chat backend (`python -m train_backend.chat`), on its stdin
CHAT_REQUEST_TYPES = frozenset({"chat", "quit"})
ERROR_KINDS = ("config", "data", "model_load", "oom", "disk", "gpu", "other")


@dataclass(frozen=True)
class Fault:
    """A line that could not be taken as a message, with enough of it to show the user."""

    kind: str  # not_json | not_object | no_type | bad_version | overlong | truncated | bad_utf8
    detail: str
    preview: str = ""

    def describe(self) -> str:
        text = f"channel fault ({self.kind}): {self.detail}"
        return f"{text}: {self.preview!r}" if self.preview else text


@dataclass
class LineDecoder:
    """Turns a byte stream into messages (dicts) and faults, whatever the stream holds."""

    max_line_bytes: int = MAX_LINE_BYTES
    _buffer: bytearray = field(default_factory=bytearray)
    _skipping: bool = False  # inside an over-long line: drop bytes up to its newline

    def feed(self, data: bytes) -> list[dict[str, Any] | Fault]:
        items: list[dict[str, Any] | Fault] = []
        self._buffer.extend(data)
        while True:
            newline = self._buffer.find(b"\n")
            if newline < 0:
                if len(self._buffer) > self.max_line_bytes:
                    if not self._skipping:
                        items.append(
                            Fault(
                                "overlong",
                                f"line longer than {self.max_line_bytes} bytes, skipped",
                                _preview(self._buffer),
                            )
                        )
                    self._skipping = True
                    self._buffer.clear()
                return items
            line = bytes(self._buffer[:newline])
            del self._buffer[: newline + 1]
            if self._skipping:
                self._skipping = False
                continue
            if len(line) > self.max_line_bytes:
                items.append(
                    Fault(
                        "overlong", f"line of {len(line)} bytes, over {self.max_line_bytes}", _preview(line)
                    )
                )
                continue
            item = decode_line(line)
            if item is not None:
                items.append(item)

    def finish(self) -> list[dict[str, Any] | Fault]:
        """The writer is gone: whatever is left is a line it did not finish."""
        rest, skipping = bytes(self._buffer), self._skipping
        self._buffer.clear()
        self._skipping = False
        if not rest.strip() or skipping:
            return []
        return [Fault("truncated", "the writer stopped in the middle of a line", _preview(rest))]

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)


def decode_line(line: bytes) -> dict[str, Any] | Fault | None:
    """One complete line; None for a blank line."""
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Fault("bad_utf8", str(exc), _preview(line))
    try:
        obj = json.loads(text)
    except ValueError as exc:
        return Fault("not_json", str(exc), _preview(line))
    if not isinstance(obj, dict):
        return Fault("not_object", f"expected a JSON object, got {type(obj).__name__}", _preview(line))
    if not isinstance(obj.get("type"), str):
        return Fault("no_type", "message has no string 'type'", _preview(line))
    if obj.get("v") != PROTOCOL_VERSION:
        return Fault(
            "bad_version", f"protocol version {obj.get('v')!r}, this cockpit speaks {PROTOCOL_VERSION}"
        )
    return obj


def encode(msg_type: str, ts: float | None = None, **fields: Any) -> bytes:
    """One message as a line of bytes. Non-finite floats become strings ("NaN", "Infinity")."""
    message = {"v": PROTOCOL_VERSION, "type": msg_type, "ts": round(time.time() if ts is None else ts, 3)}
    message.update(fields)
    line = json.dumps(_finite(message), ensure_ascii=False, separators=(",", ":"), default=str)
    return line.encode("utf-8") + b"\n"


def number(value: Any) -> float | None:
    """A numeric field as a float: accepts the strings `encode` writes for non-finite values."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("NaN", "Infinity", "-Infinity"):
        return float(value.replace("Infinity", "inf"))
    return None


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _preview(raw: bytes | bytearray, limit: int = 120) -> str:
    text = bytes(raw[:limit]).decode("utf-8", errors="replace")
    return text + ("..." if len(raw) > limit else "")
