"""Formatting figures for people: one place, so the TUI and --no-ui agree."""

from __future__ import annotations

import math
import reprlib

GIB = 2**30  # bytes in a GiB: nvidia-smi's and torch's "GB"
MIB = 2**20
MAX_QUOTED_CHARS = 200  # docs/reliability.md: a message quotes a user's value in part, however large


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 48:
        return f"{hours // 24}d{hours % 24:02d}h"
    return f"{hours}:{minutes:02d}:{secs:02d}"


def gib(value: float | None, digits: int = 2, unit: str = " GiB", sign: bool = False) -> str:
    """Bytes as GiB: `gib(3 * GIB, 1)` is "3.0 GiB"; `sign=True` writes "+1.50" for a difference."""
    if value is None:
        return "-"
    return f"{value / GIB:{'+' if sign else ''}.{digits}f}{unit}"


def rate(value: float | None, unit: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if value >= 1_000_000:
        text = f"{value / 1e6:.2f}M"
    elif value >= 10_000:
        text = f"{value / 1000:.1f}k"
    elif value >= 100:
        text = f"{value:.0f}"
    else:
        text = f"{value:.2f}"
    return f"{text}{unit}"


def params(count: float) -> str:
    """6.74B, or 4.54M below a billion (a tiny model is not 0.00B)."""
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.2f}M"


def money(value: float | None) -> str:
    """Dollars, the same everywhere: below a dollar two significant digits ("$0.62", "$0.013",
    "$0.0091": a minute of a CPU demo) down to a hundredth of a cent ("$0.0001"), so one column
    reads alike; from a dollar, cents ("$1.20"); from a thousand, whole dollars ("$1,234")."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 1000:
        return f"${value:,.0f}"
    rounded = float(f"{value:.2g}")  # 0.0996 is 0.10, two digits, not 0.100
    if rounded == 0 or abs(rounded) >= 1:
        return f"${value:.2f}"
    decimals = min(4, max(2, 1 - math.floor(math.log10(abs(rounded)))))  # to a hundredth of a cent
    return f"${value:.{decimals}f}"


def gib_or_mib(value: float, width: int = 0, sign: bool = False) -> str:
    """Bytes in a column of GiB with two decimals; below 0.1 GiB in MiB, below 0.1 MiB in KiB, so a
    small part keeps its digits ("    37.6 MiB", not "    0.04 GiB"), and nothing is "     0.0 MiB"
    (a part that is not there, not one too small for two decimals of GiB). `sign=True` writes
    "+1.50 GiB" for what adds to a total."""
    plus = "+" if sign else ""
    for unit, scale, digits in (("GiB", GIB, 2), ("MiB", MIB, 1), ("KiB", 2**10, 1)):
        if abs(value) >= 0.1 * scale:
            return f"{value / scale:{plus}{width}.{digits}f} {unit}"
    if value:
        return f"{value / 2**10:{plus}{width}.1f} KiB"
    return f"{0:{width}.1f} MiB"


def billions(count: float) -> str:
    """Parameters in billions, as a breakdown writes them ("6.48B", "0.26B"); below 0.01B in
    millions ("3.28M"), so a tiny model is not 0.00B."""
    return f"{count / 1e9:.2f}B" if count >= 1e7 else f"{count / 1e6:.2f}M"


def loss(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4f}"


def sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def size(value: float | None) -> str:
    """Bytes for people: 512 B, 3.4 MiB, 13.48 GiB."""
    if value is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}" if unit == "GiB" else f"{value / scale:.1f} {unit}"
    return f"{int(value)} B"


def share(value: float | None) -> str:
    """A utilisation (0-1) as a whole percent, e.g. MFU: '31%'; '-' when unknown."""
    if value is None:
        return "-"
    return f"{value:.1%}" if value < 0.1 else f"{value:.0%}"


_REPR = reprlib.Repr()  # stops early inside a large list or mapping: bounded time too
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxother = 3, 6, 6, 120


def quoted(value: object, limit: int = MAX_QUOTED_CHARS) -> str:
    """A user's value as a message echoes it: its repr, at most `limit` characters. A longer string
    keeps its start and end around `...` and says its length (`'aaaa...aaaa' (120,000 characters)`),
    so a pasted file or a runaway `--set` neither floods the terminal nor hides what it was."""
    if isinstance(value, str):
        text = repr(value[: limit + 1])
        if len(value) <= limit and len(text) <= limit + 2:  # the quotes aside
            return text
        note = f" ({len(value):,} characters)"
        room = max(8, limit - len(note) - 5)  # less the quotes and the "..."
        head, tail = room * 2 // 3, room - room * 2 // 3
        return f"'{repr(value[:head])[1:-1][:head]}...{repr(value[-tail:])[1:-1][-tail:]}'{note}"
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
