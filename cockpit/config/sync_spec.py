"""`output.sync` and `cockpit restart --from`: where a run is copied off the machine, as written.

Two kinds of target: `hf://ORG/NAME`, a private model repository on the hub (HF_ENDPOINT for a
mirror), or a folder (a mounted disk, NFS). Only the format is judged here (at load); whether the
folder exists and can be written, or a hub token is there, is judged before a run starts
(cockpit.sync.check), never by the trainer's load of its config.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from cockpit.config.schema import ConfigError
from cockpit.fmt import quoted

HUB_PREFIX = "hf://"
HUB_PART_CHARS = 96  # the hub's longest org or repository name


@dataclass(frozen=True)
class SyncSpec:
    """A sync target: `repo_id` for the hub, `path` for a folder (absolute, ~ expanded)."""

    text: str  # as the user wrote it: what every message names
    repo_id: str | None = None
    path: Path | None = None

    @property
    def kind(self) -> str:
        return "hub" if self.repo_id is not None else "folder"


def parse(text: str, key: str = "output.sync", base: Path | None = None) -> SyncSpec:
    """The target `text` names; ConfigError naming `key` when it is neither form. A relative folder
    is taken against `base` (the working directory)."""
    value = text.strip()
    if not value:
        raise ConfigError(f"{key}: empty; give hf://ORG/NAME (a private hub repository) or a folder")
    if value.startswith(HUB_PREFIX):
        repo_id = value[len(HUB_PREFIX) :].strip("/")
        if not valid_repo_id(repo_id):
            raise ConfigError(
                f"{key}: {quoted(value)} names no hub repository; write hf://ORG/NAME (your user name or an "
                f"organisation, then the repository: word characters, dots and dashes, at most "
                f"{HUB_PART_CHARS} on each side of the /), e.g. hf://alice/llama-run-backup"
            )
        return SyncSpec(value, repo_id=repo_id)
    if re.match(r"^[A-Za-z][\w+.-]*://", value):
        raise ConfigError(
            f"{key}: {quoted(value)}: only hf://ORG/NAME (a hub repository) or a folder (a mounted disk, "
            "NFS) can take a run's copy; mount the storage and give its folder"
        )
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    return SyncSpec(value, path=Path(_normalised(path)))


def valid_repo_id(repo_id: str) -> bool:
    parts = repo_id.split("/")
    return (
        len(parts) == 2
        and all(re.fullmatch(r"[\w.-]+", part) for part in parts)
        and all(len(part) <= HUB_PART_CHARS and part not in (".", "..") for part in parts)
    )


def _normalised(path: Path) -> str:
    """Absolute without resolving links (a mount point may be a link; its name is the user's)."""
    return os.path.normpath(str(path))


def absolute(text: str, base: Path) -> str:
    """`text` with a relative folder made absolute against `base` (the trainer runs elsewhere); a hub
    target as it is."""
    spec = parse(text, base=base)
    return text if spec.path is None else str(spec.path)
