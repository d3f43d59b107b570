"""The trainer's answers to save/pause say what will happen, also while the run is paused."""

from __future__ import annotations

from train_backend.controls import Controls


class Emitted:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def emit(self, kind: str, **fields) -> None:
        self.events.append({"type": kind, **fields})


def test_save_and_pause_while_paused_say_so():
    emitted = Emitted()
    controls = Controls(emitted)
    controls.training = True
    controls.on_command({"type": "save"})
    controls.on_command({"type": "pause"})
    controls.on_command({"type": "pause"})
    controls.on_command({"type": "save"})
    details = [e["detail"] for e in emitted.events]
    assert details == [
        "checkpoint after the current step",
        "pausing after the current step",
        "already paused",
        "paused: the checkpoint is written when the run resumes or stops",
    ]
    assert controls.save.is_set() and controls.paused.is_set()
