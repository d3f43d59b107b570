"""Plain output (the commands without a screen): how wide it may be, and its lines wrapped to fit.

The terminal's width, or 80 columns when stdout is not a terminal.
"""

from __future__ import annotations

import os
import sys
import textwrap

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
        for phrase in keep:
            if len(indent) + len(phrase) <= width:
                text = text.replace(phrase, phrase.replace(" ", _GLUE))
        out.extend(
            line.replace(_GLUE, " ")
            for line in textwrap.wrap(
                text, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False
            )
            or [""]
        )
    return out


_GLUE = "\u00a0"  # a no-break space: textwrap breaks only at ASCII whitespace
