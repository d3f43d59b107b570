"""`output.sync` judged before a run starts (`cockpit train`, `--check`): a folder must exist and
take a file, a hub target needs a token. The format was judged at load (cockpit.config.sync_spec)."""

from __future__ import annotations

import os
import shutil
import tempfile

from cockpit import fmt
from cockpit.config.schema import ConfigError
from cockpit.config.sync_spec import SyncSpec, parse
from cockpit.sync import hub
from cockpit.sync.failures import classify, hint

HUB_CHECK_S = 10.0  # the repository asked about before a run starts


def check_target(text: str) -> str:
    """The line that says where the run's copy goes; ConfigError when it cannot go there."""
    spec = parse(text)
    if spec.path is None:
        return _hub_line(spec)
    path = spec.path
    if not path.exists():
        raise ConfigError(
            f"output.sync: the folder {path} does not exist (a disk or NFS share not mounted?). Mount it "
            "or make it, then run again: the copy is never written into a folder the cockpit made"
        )
    if not path.is_dir():
        raise ConfigError(f"output.sync: {path} is a file; give a folder (a mounted disk, NFS)")
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".cockpit-sync-check-") as probe:
            probe.write(b"x")
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        raise ConfigError(
            f"output.sync: {path} cannot be written: {exc.strerror or exc}. Make it writable for this user "
            f"(ls -ld {path}) or give another folder"
        ) from None
    free = fmt.gib(shutil.disk_usage(path).free, 1)
    return f"output.sync: each checkpoint and the record go to {path} (exists, writable, {free} free)"


def _hub_line(spec: SyncSpec) -> str:
    """A hub target: a token, and the repository asked about once (bounded): private, or not there
    yet; a public one, a refused token or an offline trainer is refused; a hub that does not answer
    now is said, not refused (copies are tried at each checkpoint)."""
    text = spec.text
    if not hub.token_found():
        raise ConfigError(
            f"output.sync: {text} needs a hub token that may write there, and none was found: set "
            "HF_TOKEN or run `hf auth login` (the token is read from there, never from the config)"
        )
    source = "HF_TOKEN" if os.environ.get("HF_TOKEN") else "your saved hub login"
    try:
        info = hub.hub_api().repo_info(spec.repo_id, repo_type=hub.REPO_TYPE, timeout=HUB_CHECK_S)
    except Exception as exc:
        failure = classify(exc, spec)
        if failure.kind in ("auth", "offline"):
            raise ConfigError(f"output.sync: {text}: {failure.reason}. {failure.hint}") from None
        there = (
            "not there yet: made private at the first copy"
            if failure.kind == "not_found"
            else f"not reached now ({failure.reason}); copies are tried at each checkpoint"
        )
    else:
        if getattr(info, "private", None) is False:
            raise ConfigError(
                f"output.sync: {text} is a public repository; output.sync writes only to a private one. "
                f"{hint('public', spec)}"
            )
        there = "exists, private"
    return f"output.sync: each checkpoint and the record go to {text} ({there}), with the token of {source}"
