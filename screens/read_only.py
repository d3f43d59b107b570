"""A read-only view (`cockpit attach --read-only`, `cockpit serve` without --control): what it says
for a key that would command the run, on the run screen and in the OOM wizard alike."""

from __future__ import annotations

READ_ONLY = "read-only view: '{command}' refused (served without --control, or attached with --read-only)"


def read_only_refusal(command: str) -> str:
    """What a read-only view says for a key that would send `command` (or export, or relaunch)."""
    return READ_ONLY.format(command=command)
