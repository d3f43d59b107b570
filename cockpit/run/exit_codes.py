"""How a run ended -> the client's exit code (docs/guide.md: "Exit codes")."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cockpit.run.state import RunState

EXIT_FINISHED, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED, EXIT_DETACHED = 0, 1, 2, 3, 4


def exit_code(state: RunState) -> int:
    """0 finished, 3 stopped, 2 a config the trainer refused (as the CLI does one it refuses), else 1."""
    if state.status == "failed" and (state.error or {}).get("kind") == "config":
        return EXIT_USAGE
    return {"finished": EXIT_FINISHED, "stopped": EXIT_STOPPED}.get(state.status, EXIT_FAILED)
