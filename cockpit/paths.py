"""Where the cockpit keeps things: run directories and caches (docs/architecture.md), and the
`cockpit` command itself, as the user can type it here."""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import stat
import sys
import sysconfig
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


def cockpit_command() -> str:
    """The `cockpit` command as it works when typed in this shell, for every line that tells the user
    what to run next: `cockpit` where that name on PATH is this install's entry point, else the
    entry point's path (relative to the current directory when under it: `.venv/bin/cockpit`),
    else this interpreter with `-m cockpit`. $COCKPIT_COMMAND, when set, is used as it is."""
    if os.environ.get("COCKPIT_COMMAND"):
        return os.environ["COCKPIT_COMMAND"]
    # where pip put the entry point: this environment's scripts folder (outside a venv, pip --user's)
    scripts = [sysconfig.get_path("scripts")]
    if sys.prefix == sys.base_prefix:
        scripts.append(sysconfig.get_path("scripts", f"{os.name}_user"))
    ours = [Path(d, "cockpit") for d in scripts if Path(d, "cockpit").is_file()]
    on_path = shutil.which("cockpit")
    if on_path and any(Path(on_path).resolve() == p.resolve() for p in ours):
        return "cockpit"
    if ours:
        return _as_typed(ours[0])
    return f"{_as_typed(Path(sys.executable))} -m cockpit"


def _as_typed(path: Path) -> str:
    """A path to type: relative to the current directory when under it (`.venv/bin/cockpit`), else
    absolute; quoted for the shell where it needs it."""
    try:
        shown = str(path.absolute().relative_to(Path.cwd()))
        shown = shown if "/" in shown else f"./{shown}"  # a bare name would be looked up on PATH
    except (ValueError, OSError):  # not under it, or it is gone
        shown = str(path.absolute())
    return shlex.quote(shown)


def file_kind(mode: int) -> str:
    """What an `os.stat` mode is, in words: "a regular file", "a FIFO", "a directory"..."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (a named pipe)"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((words for test, words in kinds if test(mode)), "not a file")


def not_a_regular_file(path: Path) -> str | None:
    """Why `path`, which exists, is no file to read or write whole: a loop of symbolic links, a FIFO
    (reading or writing it waits for the other end for ever), a socket, a device; None for a regular file,
    a directory, or nothing there."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links (it leads back to itself)"
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return file_kind(mode)
