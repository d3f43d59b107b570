"""The text of a Textual screenshot (an SVG from `App.export_screenshot()` or a snapshot test), as the
terminal showed it: one line per row, each character in its column.

    python scripts/screen_text.py tests/__snapshots__/test_tui_snapshots/test_finished_replay_80x24.svg
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

# Textual's SVG: one <text> per run of equally styled cells, at x = column * the cell width, clipped
# to its row's line
TEXT = re.compile(
    r'<text class="[^"]*" x="([\d.]+)" y="[\d.]+" textLength="[\d.]+" '
    r'clip-path="url\(#[\w-]+-line-(\d+)\)">([^<]*)</text>'
)
CELL_WIDTH = 12.2  # Textual's screenshot: px per terminal column


def screen_text(svg: str) -> str:
    rows: dict[int, dict[int, str]] = {}
    for x, row, text in TEXT.findall(svg):
        column = round(float(x) / CELL_WIDTH)
        for offset, char in enumerate(html.unescape(text).replace("\xa0", " ")):
            rows.setdefault(int(row), {})[column + offset] = char
    lines = []
    for row in range(max(rows, default=-1) + 1):
        cells = rows.get(row, {})
        lines.append("".join(cells.get(c, " ") for c in range(max(cells, default=-1) + 1)).rstrip())
    return "\n".join(lines)


if __name__ == "__main__":
    print(screen_text(Path(sys.argv[1]).read_text()))
