"""The trainer's sync worker: each complete checkpoint, the final adapter and the run's record copied
to the target in a thread of its own, so the step loop never waits on the network.

The training thread only hands a checkpoint over (`checkpoint_saved`): its files are hard-linked
into `RUN/.sync/` (a rotation that deletes the checkpoint meanwhile takes nothing from the copy) and
queued; a newer checkpoint replaces one still waiting (a restart needs the newest). The thread
copies the checkpoint, then the record with the manifest naming it (cockpit.sync.manifest), and
says so in a `sync` event. A failed copy is tried again later (RETRY_S), said in a `sync` event
each time and in a `warning` once per kind of failure (cockpit.sync.failures); it never raises
into training.

At the run's end the trainer `drain`s the queue (a bounded wait, one more try for each copy), emits
its last event, then `close`s: the record once more, silently, so the copy holds the ending too.
"""

from __future__ import annotations

import errno
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cockpit.run.rundir import COMPLETE_MARKER, CONFIG_NAME, RunDir
from cockpit.sync import manifest as manifests
from cockpit.sync.failures import classify
from cockpit.sync.manifest import MANIFEST_NAME, RECORD_FILES, Manifest
from cockpit.sync.targets import Target
from cockpit.sync.text import seconds_text

RETRY_S = (30.0, 60.0, 120.0, 300.0)  # after the 1st, 2nd, 3rd and later failures of one copy
SPOOL_NAME = ".sync"  # in the run directory: the hard-linked snapshots and the record being sent
Emit = Callable[..., None]  # emit(type, **fields): the trainer's Emitter.emit


@dataclass
class Job:
    """A folder to copy: a checkpoint, or final/."""

    what: str  # checkpoint | final
    name: str  # checkpoint-8 | final
    local: Path  # its snapshot in the spool
    step: int | None
    saved_at: float | None
    tries: int = 0
    not_before: float = 0.0  # the worker's clock: a failed copy waits for its retry


RECORD = "record"  # the work item that copies the record alone


class SyncWorker:
    def __init__(
        self,
        target: Target,
        run: RunDir,
        emit: Emit,
        *,
        keep: int,
        record_every_s: float,
        retry_s: tuple[float, ...] = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.target, self.run, self.emit = target, run, emit
        self.keep, self.record_every_s, self.retry_s, self.clock = keep, record_every_s, retry_s, clock
        self.spool = run.path / SPOOL_NAME
        self.failures = 0
        self.left: list[str] = []  # copies given up at the end
        self._cond = threading.Condition()
        self._jobs: list[Job] = []
        self._busy: Job | str | None = None
        self._record_at = clock() + record_every_s
        self._closing = False  # drain: one more try for each copy, then given up
        self._stopping = False  # close: the record once more, then the thread ends
        self._quiet = False  # after the run's last event: nothing more is said
        self._ready = False
        self._manifest: Manifest | None = None
        self._said: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="cockpit-sync", daemon=True)

    @property
    def text(self) -> str:
        return self.target.spec.text

    @property
    def synced(self) -> Manifest | None:
        """The manifest last written to the target by this worker (or read there)."""
        return self._manifest

    # ------------------------------------------------------------ the training thread's side

    def start(self) -> SyncWorker:
        shutil.rmtree(self.spool, ignore_errors=True)  # what a killed attempt left
        try:
            self.spool.mkdir(mode=0o700)
        except OSError:  # never a reason not to train: each snapshot that fails says why
            pass
        self.emit("sync", status="started", target=self.text)
        self._thread.start()
        return self

    def checkpoint_saved(self, checkpoint: Path) -> None:
        """Queue a complete checkpoint; returns at once (its files are hard-linked, not copied)."""
        step = manifests.step_of(checkpoint.name)
        saved_at = manifests.saved_at(checkpoint)
        self._queue(
            Job("checkpoint", checkpoint.name, self.spool / checkpoint.name, step, saved_at), checkpoint
        )

    def final_saved(self, folder: Path) -> None:
        self._queue(Job("final", "final", self.spool / "final", None, None), folder)

    def _queue(self, job: Job, folder: Path) -> None:
        """`folder` snapshotted as `job.local` and queued; a snapshot that fails (the run directory
        full or gone) is said as a failed copy, never raised into training."""
        try:
            snapshot(folder, job.local)
        except OSError as exc:
            shutil.rmtree(job.local, ignore_errors=True)
            self._failed_safely(job, exc, retry=False)
            return
        self._add(job)

    def _add(self, job: Job) -> None:
        with self._cond:
            for older in [j for j in self._jobs if j.what == job.what]:
                self._jobs.remove(older)
                shutil.rmtree(older.local, ignore_errors=True)
            self._jobs.append(job)
            self._cond.notify_all()

    def drain(self, timeout_s: float) -> list[str]:
        """Wait up to `timeout_s` for the queued copies (each tried once more, now) and a copy of the
        record; the names of the copies that are still not on the target."""
        deadline = self.clock() + timeout_s
        with self._cond:
            self._closing = True
            for job in self._jobs:
                job.not_before = 0.0
            self._record_at = 0.0
            self._cond.notify_all()
            while self._jobs or self._busy is not None or self._record_at <= self.clock():
                left_s = deadline - self.clock()
                if left_s <= 0:
                    break
                self._cond.wait(min(left_s, 0.5))
            pending = [j.name for j in self._jobs]
            if isinstance(self._busy, Job):
                pending.insert(0, self._busy.name)
        return self.left + pending

    def close(self, timeout_s: float) -> bool:
        """After the run's last event: the record copied once more without a word, and the thread
        ends; False when it did not end within `timeout_s` (it dies with the process)."""
        with self._cond:
            self._quiet = self._stopping = True
            self._record_at = 0.0
            self._cond.notify_all()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            shutil.rmtree(self.spool, ignore_errors=True)
        return not self._thread.is_alive()

    # ------------------------------------------------------------ the worker thread

    def _loop(self) -> None:
        while True:
            with self._cond:
                work = self._next()
                if work is None:
                    return
                self._busy = work
            try:
                if isinstance(work, Job):
                    self._copy(work)
                else:
                    self._copy_record()
            except Exception as exc:  # whatever it is, training goes on; it is said
                self._failed_safely(work, exc)
            finally:
                with self._cond:
                    self._busy = None
                    self._cond.notify_all()

    def _next(self) -> Job | str | None:
        """The next work that is due, waiting for it; None when the worker is to end."""
        while True:
            now = self.clock()
            due = [j for j in self._jobs if j.not_before <= now]
            if due:
                job = min(due, key=lambda j: j.what != "checkpoint")  # the checkpoint first
                self._jobs.remove(job)
                return job
            if self._record_at <= now:
                self._record_at = now + self.record_every_s
                return RECORD
            if self._stopping:
                self.left += [j.name for j in self._jobs]
                return None
            wake = min([j.not_before for j in self._jobs] + [self._record_at])
            self._cond.wait(max(0.01, wake - now))

    def _ready_manifest(self) -> Manifest:
        if not self._ready:
            self.target.prepare()
            self._manifest = self.target.read_manifest(self.run.run_id) or self._manifest
            self._ready = True
        return self._manifest or Manifest(self.run.run_id)

    def _copy(self, job: Job) -> None:
        started = self.clock()
        previous = self._ready_manifest()
        if job.what == "checkpoint" and not (job.local / COMPLETE_MARKER).is_file():
            # its snapshot is gone (the run directory deleted): never a checkpoint on the target
            raise FileNotFoundError(errno.ENOENT, "the checkpoint's snapshot is gone", str(job.local))
        dest = f"checkpoints/{job.name}" if job.what == "checkpoint" else job.name
        self.target.put_folder(job.local, self.run.run_id, dest)
        files = manifests.files_of(job.local)
        if job.what == "checkpoint" and job.step is not None:
            updated, dropped = previous.with_checkpoint(job.name, job.step, job.saved_at, files, self.keep)
        else:
            updated, dropped = replace(previous, final=True, synced_at=time.time()), []
        self.target.put_record(
            self._stage_record(updated), self.run.run_id, [f"checkpoints/{d}" for d in dropped]
        )
        self._manifest = updated
        shutil.rmtree(job.local, ignore_errors=True)
        self._say(
            "sync",
            status="synced",
            what=job.what,
            target=self.text,
            checkpoint=job.name,
            step=job.step,
            bytes=sum(files.values()),
            duration_s=round(self.clock() - started, 2),
            lag_s=round(max(0.0, time.time() - job.saved_at), 1) if job.saved_at else None,
            removed=dropped,
            failures=self.failures,
        )

    def _copy_record(self) -> None:
        manifest = self._ready_manifest()
        self.target.put_record(self._stage_record(manifest), self.run.run_id, [])
        self._manifest = manifest

    def _stage_record(self, manifest: Manifest) -> Path:
        """The record as it stands, in the spool: the config, the events up to their last whole line,
        the manifest."""
        record = self.spool / RECORD
        shutil.rmtree(record, ignore_errors=True)
        record.mkdir(mode=0o700)
        for name in RECORD_FILES:
            try:
                data = (self.run.path / name).read_bytes()
            except FileNotFoundError:
                continue
            if name != CONFIG_NAME:
                data = data[: data.rfind(b"\n") + 1]  # a line being written is left for the next copy
            (record / name).write_bytes(data)
        (record / MANIFEST_NAME).write_text(manifest.to_json(), encoding="utf-8")
        return record

    def _failed_safely(self, work: Job | str, exc: Exception, retry: bool = True) -> None:
        try:
            self._failed(work, exc, retry)
        except Exception:  # the thread must live on: the next checkpoint may get through
            traceback.print_exc(file=sys.stderr)

    def _failed(self, work: Job | str, exc: Exception, again: bool) -> None:
        failure = classify(exc, self.target.spec)
        label = "the record" if isinstance(work, str) else work.name
        if failure.kind == "other":
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        print(f"[cockpit] output.sync: {label} not copied to {self.text}: {failure.reason}", file=sys.stderr)
        with self._cond:
            self.failures += 1
            retry = self._retry(work) if again else None
            quiet = self._quiet
        if quiet:
            return
        then = f"; it tries again in {seconds_text(retry)}" if retry is not None else ""
        if failure.kind not in self._said:
            self._said.add(failure.kind)
            self.emit(
                "warning",
                message=f"output.sync: {label} could not be copied to {self.text}: {failure.reason}. "
                f"Training goes on{then}",
                hint=failure.hint,
            )
        self.emit(
            "sync",
            status="failed",
            what="record" if isinstance(work, str) else work.what,
            target=self.text,
            checkpoint=None if isinstance(work, str) else work.name,
            step=None if isinstance(work, str) else work.step,
            kind=failure.kind,
            reason=failure.reason,
            retry_s=retry,
            failures=self.failures,
        )

    def _retry(self, work: Job | str) -> float | None:
        """Schedule the failed work again (under the lock); its delay, or None when given up."""
        if isinstance(work, str):
            delay = self.retry_s[0]
            self._record_at = self.clock() + delay
            return None if self._closing else delay
        if self._closing:
            self.left.append(work.name)
            return None
        if any(j.what == work.what for j in self._jobs):  # a newer one waits: this one is not needed
            shutil.rmtree(work.local, ignore_errors=True)
            return None
        delay = self.retry_s[min(work.tries, len(self.retry_s) - 1)]
        work.tries += 1
        work.not_before = self.clock() + delay
        self._jobs.append(work)
        return delay

    def _say(self, kind: str, **fields: Any) -> None:
        if not self._quiet:
            self.emit(kind, **fields)


def snapshot(folder: Path, place: Path) -> Path:
    """`folder`'s files hard-linked under `place` (copied where the file system takes no links): the
    checkpoint's files stay readable there whatever happens to the checkpoint."""
    shutil.rmtree(place, ignore_errors=True)
    place.mkdir(mode=0o700, parents=True)
    for path in sorted(folder.rglob("*")):
        target = place / path.relative_to(folder)
        if path.is_dir():
            target.mkdir(mode=0o700, exist_ok=True)
            continue
        try:
            target.hardlink_to(path)
        except OSError:
            shutil.copy2(path, target)
    return place
