"""What the clients asked for (stop, save, pause, resume), set by the command thread and signal
handlers and read by the training loop at step boundaries."""

from __future__ import annotations

import signal
import threading

from cockpit.paths import cockpit_command
from cockpit.protocol.wire import Fault
from train_backend.channel import Emitter


class Controls:
    """What the clients asked for; set by the command thread and signal handlers, read by the loop."""

    def __init__(self, emitter: Emitter):
        self.emitter = emitter
        self.stop = threading.Event()
        self.save = threading.Event()
        self.paused = threading.Event()
        self.wake = threading.Event()
        self.gone = threading.Event()  # the run directory is gone: stop, and save nothing
        self.training = False
        self.budget_reached: str | None = None  # what cost.max_usd stopped the run at

    def on_command(self, command: dict) -> None:
        name = command["type"]
        accepted, detail = True, ""
        if name == "stop":
            self.stop.set()
            detail = "stopping after the current step, with a checkpoint" if self.training else "stopping"
        elif name == "save":
            if not self.training:
                accepted, detail = False, "no training step yet: nothing to save"
            elif self.paused.is_set():  # the checkpoint is written at a step boundary, not in the pause
                self.save.set()
                detail = "paused: the checkpoint is written when the run resumes or stops"
            else:
                self.save.set()
                detail = "checkpoint after the current step"
        elif name == "pause":
            detail = "already paused" if self.paused.is_set() else "pausing after the current step"
            self.paused.set()
        elif name == "resume":
            accepted = self.paused.is_set()
            detail = "resuming" if accepted else "not paused"
            self.paused.clear()
        self.wake.set()
        self.emitter.emit("command", name=name, accepted=accepted, detail=detail)

    def agree(self) -> None:
        """Make every process act on the same requests; one process has nothing to agree with
        (several GPUs: train_backend.distributed.RankControls)."""

    def on_fault(self, fault: Fault) -> None:
        self.emitter.emit("warning", message=f"control channel: {fault.describe()}", hint="")

    def on_run_dir_gone(self, reason: str) -> None:
        self.emitter.emit("warning", message=f"{reason}: stopping at the end of this step", hint="")
        self.gone.set()
        self.stop.set()
        self.paused.clear()
        self.wake.set()

    def on_events_lost(self, reason: str) -> None:
        """events.jsonl stopped taking events (made immutable, read-only, replaced): nobody following the
        run would see it go on, nor `cockpit runs` how it ended; stop with a checkpoint (the events go
        on in the fallback file), as a stop request does."""
        self.emitter.emit(
            "warning",
            message=f"{reason}: stopping with a checkpoint at the end of this step",
            hint=f"make the events file writable again (chattr -i, chmod u+w), then {cockpit_command()} "
            "restart RUN",
        )
        self.stop.set()
        self.paused.clear()
        self.wake.set()

    def on_signal(self, signum, _frame) -> None:
        self.emitter.emit(
            "command", name="stop", accepted=True, detail=f"signal {signal.Signals(signum).name}"
        )
        self.stop.set()
        self.paused.clear()
        self.wake.set()
