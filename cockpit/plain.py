"""Plain output (the commands without a screen): how wide it may be, and its lines wrapped to fit.

The terminal's width, or 80 columns when stdout is not a terminal. On a terminal every command's
stdout and stderr go through `WrappedOutput` (installed by the CLI), so a line no one wrapped is
broken at a word, never by the terminal inside one.
"""

from __future__ import annotations

import io
import os
import re
import sys
import textwrap
from collections.abc import Callable
from typing import Any, TextIO

PLAIN_WIDTH = 80  # a file or a pipe: the width of the smallest terminal people use
MIN_WIDTH = 40


def output_width() -> int:
    """Columns that one line of plain output may take without wrapping."""
    try:
        if sys.stdout.isatty():
            return max(MIN_WIDTH, os.get_terminal_size(sys.stdout.fileno()).columns)
    except (AttributeError, OSError, ValueError):
        pass
    return PLAIN_WIDTH


def terminal_width(stream: TextIO) -> int | None:
    """The columns of the terminal `stream` writes to; None when it is not one."""
    try:
        if stream.isatty():
            return max(MIN_WIDTH, os.get_terminal_size(stream.fileno()).columns)
    except (AttributeError, OSError, ValueError):
        pass
    return None


class WrappedOutput(io.TextIOBase):
    """A terminal's stdout or stderr whose lines are wrapped at words to its width when written
    (`wrapped`: a long word, a path, stays whole). A line that draws in place (`\r`, a progress
    bar) or is styled (an escape code: rich wraps its own) goes out as it is; a line not yet ended
    waits for its end, or for `flush` (a prompt). Anything else (isatty, fileno, encoding) is the
    wrapped stream's."""

    def __init__(self, inner: TextIO, width: Callable[[], int | None] | None = None) -> None:
        self._inner = inner
        self._width = width or (lambda: terminal_width(inner))
        self._pending = ""

    def write(self, text: str) -> int:
        if "\r" in text or "\x1b" in text:
            self._inner.write(self._pending + text)
            self._pending = ""
            return len(text)
        *lines, self._pending = (self._pending + text).split("\n")
        if lines:
            width = self._width()
            self._inner.write("".join(line + "\n" for line in (wrapped(lines, width) if width else lines)))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._inner.write(self._pending)
            self._pending = ""
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def wrapped(lines: list[str], width: int, keep: tuple[str, ...] = ()) -> list[str]:
    """Each line cut at word boundaries to `width`, its continuation indented two more than it.

    A phrase in `keep` (a command to copy, `cockpit attach RUN_ID`) is not broken inside when it
    fits on one line."""
    out = []
    for text in lines:
        if len(text) <= width:
            out.append(text)
            continue
        indent = " " * (len(text) - len(text.lstrip()) + 2)
        out.extend(_wrap(text, width, indent, keep, break_long_words=False) or [""])
    return out


def hanging(head: str, text: str, width: int, keep: tuple[str, ...] = (), min_body: int = 30) -> list[str]:
    """`text` after `head`, wrapped at `width` with its continuation under the text (two columns in
    when `head` leaves it fewer than `min_body`); a phrase in `keep` is not broken inside."""
    indent = " " * len(head) if width - len(head) >= min_body else "  "
    return _wrap(head + text, width, indent, keep, break_long_words=True) or [head.rstrip()]


def _wrap(text: str, width: int, indent: str, keep: tuple[str, ...], break_long_words: bool) -> list[str]:
    for phrase in keep:
        if len(indent) + len(phrase) <= width:
            text = text.replace(phrase, phrase.replace(" ", _GLUE))
    lines = textwrap.wrap(
        text, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=break_long_words
    )
    return [line.replace(_GLUE, " ") for line in lines]


_GLUE = "\u00a0"  # a no-break space: textwrap breaks only at ASCII whitespace


# a figure and its unit, which a line should not be broken between (`12.9 MiB`, `0.057 s`, `31 %`)
_FIGURE_UNIT = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|ms|s|min|h|%|tok/s|tokens/s)(?=[\s,;:.)]|$)")


def fold_paths(text: str, width: int) -> str:
    """`text` for a panel `width` columns wide that does not wrap softly (a screen's log, a toast): a
    line with a word longer than the panel (a path, say), or one that would be broken between a
    figure and its unit, is wrapped at spaces here, a figure kept with its unit, and a long word
    broken after a `/` where it has one, so that `/tmp/runs/20261203-090715-tiny/final` is not cut
    inside `tiny` as rich's wrapping (at any space, then anywhere) cuts it. Other lines are left to
    rich; so is text that is not ASCII (its columns are not its characters). Plain output
    (`wrapped`) leaves a long word whole instead: a terminal wraps it softly, and copies it whole."""
    if not text.isascii():
        return text
    out: list[str] = []
    for paragraph in text.split("\n"):
        glued = _FIGURE_UNIT.sub(lambda m: m.group(1) + _GLUE + m.group(2), paragraph)
        if len(paragraph) <= width or (
            glued == paragraph and all(len(word) <= width for word in paragraph.split())
        ):
            out.append(paragraph)
            continue
        for line in textwrap.wrap(
            glued, width, break_long_words=False, break_on_hyphens=False, replace_whitespace=False
        ):
            line = line.replace(_GLUE, " ")
            while len(line) > width:
                cut = line.rfind("/", 0, width) + 1 or width  # after the last `/` that fits
                out.append(line[:cut])
                line = line[cut:]
            out.append(line)
    return "\n".join(out)
