"""Formatting figures for people: one place, so the TUI and --no-ui agree."""

from __future__ import annotations

import math

GIB = 2**30  # bytes in a GiB: nvidia-smi's and torch's "GB"
MIB = 2**20


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
    """Dollars, the same everywhere: "$0.62"; under a cent, to a hundredth of a cent ("$0.0048", what
    a minute of a CPU demo costs); from a thousand, whole dollars ("$1,234")."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) < 0.01:
        return f"${value:.4f}"
    return f"${value:,.0f}" if value >= 1000 else f"${value:.2f}"


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
