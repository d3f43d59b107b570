"""The OOM rehearsal: a real GPU out-of-memory failure and its relaunch, recorded and shipped with the
project, replayed into the OOM wizard on any machine (`cockpit replay --oom-rehearsal`).

The recording (`cockpit/data/rehearsal/oom/`, made by `scripts/make_oom_rehearsal.py` from a
bench/results record of `bench/oom_scenarios.py` on a GPU; its `rehearsal.json` says which, and
what the relaunch measured) is a run directory: the trainer's events up to the OOM, the config
the run failed with and the bench's data file. It is copied into a folder of its own and
replayed, labelled as a replay; the replay holds at the OOM while the wizard is open, with the
recorded figures (the allocator's own, the device, the data) and the remedies the memory model
ranks for the recorded config. Nothing is relaunched: choosing a remedy or closing the wizard
tells what the recorded relaunch (`--on-oom auto`'s choice) did and measured.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from cockpit.live.replay import ReplaySession
from cockpit.paths import cockpit_command
from cockpit.run import journal
from cockpit.run.rundir import RunDir

RECORDING = ("data", "rehearsal", "oom")
RECORD = "rehearsal.json"
DATA = "tokens.jsonl"
FILES = ("events.jsonl", "config.yaml", RECORD, DATA)


def recording_dir() -> Path:
    """The shipped recording's folder (inside the installed package)."""
    return Path(str(resources.files("cockpit"))).joinpath(*RECORDING)


def record(folder: Path | None = None) -> dict[str, Any]:
    """The recording's `rehearsal.json`: its source, the remedy applied and what the relaunch measured."""
    path = (folder or recording_dir()) / RECORD
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return data if isinstance(data, dict) else {}


def source_text(folder: Path | None = None) -> str:
    """Where the recording comes from: the bench record, its scenario, the GPU and the date."""
    return str(record(folder).get("source") or "a recorded GPU run")


def prepare(parent: Path | None = None, folder: Path | None = None) -> RunDir:
    """A fresh run directory holding the recording, named as the recorded run (its id is the
    folder's name), in a new temporary folder under `parent`; the caller removes it."""
    source = folder or recording_dir()
    events = [e for e in journal.read_all(source / "events.jsonl") if isinstance(e, dict)]
    run_id = next((str(e["run_id"]) for e in events if e.get("type") == "hello" and e.get("run_id")), "oom")
    root = Path(tempfile.mkdtemp(prefix="cockpit-oom-rehearsal-", dir=parent))
    run = RunDir(root / run_id)
    run.path.mkdir()
    for name in FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, run.path / name)
    config = run.config_path.read_text(encoding="utf-8")  # the data file is the copy beside it
    run.config_path.write_text(
        config.replace(f"path: {DATA}\n", f"path: {run.path / DATA}\n", 1), encoding="utf-8"
    )
    return run


def remove(run: RunDir) -> None:
    """Delete the folder `prepare` made (the run directory's parent)."""
    shutil.rmtree(run.path.parent, ignore_errors=True)


class RehearsalSession(ReplaySession):
    """A replay that holds at the recorded OOM until `go_on()`: the wizard opens over it (the run
    view offers it when `rehearsal` is set), and closing the wizard plays the recorded relaunch."""

    rehearsal = True

    def __init__(self, run: RunDir, speed: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(run, speed=speed, clock=clock)
        # what the summary says goes on from here: the recorded run is not on this machine to restart
        self.next_commands = [
            f"a rehearsal (nothing to restart here); on your own run, {cockpit_command()} train CONFIG "
            "--on-oom auto relaunches with the first remedy below, or choose one in the OOM wizard"
        ]
        self.holding = True
        self.source = source_text(run.path)  # what was recorded, where
        self._oom_offset: float | None = None

    def oom_offset(self) -> float | None:
        """Seconds into the replay of the recorded OOM (None: the recording has none)."""
        self._load()
        if self._oom_offset is None:
            self._oom_offset = next(
                (
                    offset
                    for offset, item in self._events
                    if isinstance(item, dict) and item.get("type") == "error" and item.get("kind") == "oom"
                ),
                None,
            )
        return self._oom_offset

    def position_s(self) -> float:
        at = super().position_s()
        hold = self.oom_offset() if self.holding else None
        if hold is None or at <= hold:
            return at
        with self._lock:  # the clock stands at the OOM while it is held
            if self.speed:
                self._started_at = self.clock() - hold / self.speed
        return hold

    def go_on(self) -> None:
        """Play on from the OOM: the recorded relaunch."""
        self.holding = False

    def recorded_relaunch(self) -> str:
        """What the recorded run did after the OOM, in one sentence: the remedy `--on-oom auto`
        applied, its prediction, and what the relaunch measured."""
        rec = record(self.run.path)
        remedy, relaunch = rec.get("remedy") or {}, rec.get("relaunch") or {}
        if not remedy:
            return "the recorded run was not relaunched"
        text = f"the recorded run was relaunched with {remedy.get('title')} (--on-oom auto"
        peak = remedy.get("predicted_peak_gib")
        text += f", predicted {peak:.2f} GiB)" if isinstance(peak, (int, float)) else ")"
        measured, steps = relaunch.get("nvml_peak_gib"), relaunch.get("steps") or []
        if isinstance(measured, (int, float)):
            text += f", measured {measured:.2f} GiB at peak (nvidia-smi)"
        if relaunch.get("finished") and steps:
            text += f" and finished its {len(steps)} steps"
        return text


def headless(session: RehearsalSession, log_every_s: float = 10.0, out: TextIO | None = None) -> int:
    """The rehearsal without a screen: the recorded lines to the OOM, the wizard's report of the
    remedies for the recorded config, and what the recorded relaunch did."""
    from cockpit.live.headless import follow
    from cockpit.oom import relaunch as relaunch_mod

    stream = out or sys.stdout
    session.go_on()  # the recording ends at the OOM: nothing to hold for without a wizard
    follow(session, out=stream, log_every_s=log_every_s, force_terminal=False)
    print(relaunch_mod.report(relaunch_mod.analyse_run(session.run, session.state)), file=stream)
    print(f"{session.recorded_relaunch()}; a rehearsal: nothing ran here", file=stream)
    return 0
