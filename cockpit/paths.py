"""Where the cockpit keeps things: run directories and caches (documented in the README)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """$COCKPIT_HOME, else $XDG_DATA_HOME/lora-cockpit, else ~/.local/share/lora-cockpit."""
    if os.environ.get("COCKPIT_HOME"):
        return Path(os.environ["COCKPIT_HOME"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or "~/.local/share"
    return Path(base).expanduser() / "lora-cockpit"


def runs_root() -> Path:
    return home() / "runs"


def cache_root() -> Path:
    """$COCKPIT_CACHE, else $XDG_CACHE_HOME/lora-cockpit (synthetic models live here)."""
    if os.environ.get("COCKPIT_CACHE"):
        return Path(os.environ["COCKPIT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "lora-cockpit"
