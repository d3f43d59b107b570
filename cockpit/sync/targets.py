"""Where a run's copy goes: the `Target` interface, and the folder target (a mounted disk, NFS).

The hub's target is `cockpit.sync.hub.HubTarget`; `open_target` picks one for a `SyncSpec`. Every
call may raise (a full disk, a lost mount, a refused token): the worker (cockpit.sync.worker)
says why, and tries again later; nothing here retries or waits.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Protocol

from cockpit.config.sync_spec import SyncSpec
from cockpit.sync.manifest import MANIFEST_NAME, Manifest

INCOMING_PREFIX = ".incoming-"  # a folder being copied in: renamed into place once whole
REMOVING_PREFIX = ".removing-"


class Target(Protocol):
    """One run's copy at a target lives under `<run id>/` there (cockpit.sync.manifest)."""

    spec: SyncSpec

    def prepare(self) -> None:
        """Ready to take copies (the hub: the private repository made); raises when it cannot be."""

    def read_manifest(self, run_id: str) -> Manifest | None:
        """The run's manifest there, or None when it has none."""

    def put_folder(self, local: Path, run_id: str, dest: str) -> None:
        """The folder `local` as `<run id>/<dest>` (e.g. checkpoints/checkpoint-8, final), whole."""

    def put_record(self, record: Path, run_id: str, delete: list[str]) -> None:
        """Every file in `record` into `<run id>/`, the manifest last; then the folders `delete`
        (relative to `<run id>/`) removed."""

    def list_manifests(self) -> list[Manifest]:
        """The manifest of every run there."""

    def fetch(self, run_id: str, wanted: list[str], into: Path) -> None:
        """The files and folders `wanted` (relative to `<run id>/`) into `into`, at the same
        relative paths; what is not there is left out."""


def open_target(spec: SyncSpec) -> Target:
    if spec.repo_id is not None:
        from cockpit.sync.hub import HubTarget  # huggingface_hub only where a hub target is used

        return HubTarget(spec)
    return FolderTarget(spec)


class FolderTarget:
    """A folder on a mounted disk: each run in `<folder>/<run id>/` (0700), each file written aside,
    synced to the disk and renamed into place."""

    def __init__(self, spec: SyncSpec):
        assert spec.path is not None
        self.spec, self.root = spec, spec.path

    def prepare(self) -> None:
        if not self.root.is_dir():  # an unmounted NFS: never written into the empty mount point
            raise FileNotFoundError(2, "No such directory (not mounted?)", str(self.root))

    def _run_folder(self, run_id: str) -> Path:
        self.prepare()
        folder = self.root / run_id
        folder.mkdir(mode=0o700, exist_ok=True)  # never its parents: the target must exist
        return folder

    def read_manifest(self, run_id: str) -> Manifest | None:
        self.prepare()
        try:
            return Manifest.from_json((self.root / run_id / MANIFEST_NAME).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def put_folder(self, local: Path, run_id: str, dest: str) -> None:
        place = self._run_folder(run_id) / dest
        place.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        incoming = place.with_name(INCOMING_PREFIX + place.name)
        shutil.rmtree(incoming, ignore_errors=True)
        copy_tree(local, incoming)
        if place.exists():
            _remove(place)
        os.rename(incoming, place)
        _fsync_dir(place.parent)

    def put_record(self, record: Path, run_id: str, delete: list[str]) -> None:
        folder = self._run_folder(run_id)
        names = sorted(p.name for p in record.iterdir() if p.is_file())
        for name in [n for n in names if n != MANIFEST_NAME] + [n for n in names if n == MANIFEST_NAME]:
            aside = folder / f"{INCOMING_PREFIX}{name}"
            copy_file(record / name, aside)
            os.replace(aside, folder / name)
        _fsync_dir(folder)
        for relative in delete:
            _remove(folder / relative)

    def list_manifests(self) -> list[Manifest]:
        self.prepare()
        found = []
        for child in sorted(self.root.iterdir()):
            try:
                text = (child / MANIFEST_NAME).read_text(encoding="utf-8")
            except OSError:
                continue
            manifest = Manifest.from_json(text)
            if manifest is not None and manifest.run_id == child.name:
                found.append(manifest)
        return found

    def fetch(self, run_id: str, wanted: list[str], into: Path) -> None:
        folder = self.root / run_id
        for relative in wanted:
            source, place = folder / relative, into / relative
            place.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if source.is_dir():
                copy_tree(source, place)
            elif source.is_file():
                copy_file(source, place)


def copy_file(source: Path, place: Path) -> None:
    """A private copy (0600), on the disk before it returns."""
    shutil.copyfile(source, place)
    os.chmod(place, 0o600)
    fd = os.open(place, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_tree(source: Path, place: Path) -> None:
    place.mkdir(mode=0o700, parents=True)
    for path in sorted(source.rglob("*")):
        target = place / path.relative_to(source)
        if path.is_dir():
            target.mkdir(mode=0o700, exist_ok=True)
        elif path.is_file():
            copy_file(path, target)
    _fsync_dir(place)


def _remove(path: Path) -> None:
    """Renamed aside, then deleted: a kill in the middle never leaves a checkpoint missing files."""
    aside = path.with_name(REMOVING_PREFIX + path.name)
    shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
