"""A notification's text folded for its toast, so that a path in it breaks after a `/`, not inside
a file name as the toast's own wrapping breaks it (`.../preflight-20261203-15102` / `0.json`)."""

from __future__ import annotations

from cockpit.plain import fold_paths

# Textual's Toast: 60 columns at most and half its rack (the screen less the rack's 2-column
# scrollbar), of which its left border and its padding take 3.
TOAST_MAX_WIDTH = 60
TOAST_RACK_SCROLLBAR = 2
TOAST_FRAME = 3


def toast_text(text: str, screen_width: int) -> str:
    """`text` folded to the width of a toast on a screen `screen_width` columns wide."""
    width = min(TOAST_MAX_WIDTH, (screen_width - TOAST_RACK_SCROLLBAR) // 2) - TOAST_FRAME
    return fold_paths(text, max(width, 1))
