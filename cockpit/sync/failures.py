"""Why a copy to the sync target failed, in a kind, a one-line reason and what to do.

The kinds: space, permission, missing (the folder is gone: a dropped mount), auth, not_found,
public, offline, rate (the hub's commit limit), network, other. The worker says each kind once
as a warning, and counts every failed try in its `sync` events.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from cockpit.config.sync_spec import SyncSpec
from cockpit.sync.hub import PublicRepository, endpoint

REASON_CHARS = 300
NETWORK_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ETIMEDOUT,
    errno.EPIPE,
}


@dataclass(frozen=True)
class Failure:
    kind: str
    reason: str
    hint: str


def classify(exc: BaseException, spec: SyncSpec) -> Failure:
    kind = _kind(exc, spec)
    return Failure(kind, reason_text(exc), hint(kind, spec))


def _kind(exc: BaseException, spec: SyncSpec) -> str:
    if isinstance(exc, PublicRepository):
        return "public"
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "OfflineModeIsEnabled" in names:
        return "offline"
    if "LocalTokenNotFoundError" in names:
        return "auth"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int):
        if status in (401, 403):
            return "auth"
        if status == 404:
            return "not_found"
        if status == 429:
            return "rate"
        if status >= 500:
            return "network"
    if "RepositoryNotFoundError" in names:
        return "not_found"
    if isinstance(exc, OSError) and not _is_network_class(names):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "space"
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return "permission"
        if spec.path is not None and not spec.path.is_dir():
            return "missing"
        if exc.errno in NETWORK_ERRNOS or exc.errno == errno.ESTALE:  # a stale NFS handle: the link
            return "network"
    if _is_network_class(names) or isinstance(exc, (ConnectionError, TimeoutError)):
        return "network"
    return "other"


def _is_network_class(names: set[str]) -> bool:
    """requests' and httpx's connection errors and timeouts (some of them are OSErrors)."""
    return any(n.endswith(("ConnectionError", "ConnectError", "Timeout", "TimeoutException")) for n in names)


def reason_text(exc: BaseException) -> str:
    """The error's first line, bounded, after its HTTP status where it has one."""
    text = str(exc).strip()
    first = text.splitlines()[0][:REASON_CHARS] if text else type(exc).__name__
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, OSError) and exc.strerror and not isinstance(status, int):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    prefix = f"HTTP {status}: " if isinstance(status, int) else f"{type(exc).__name__}: "
    return prefix + first


def hint(kind: str, spec: SyncSpec) -> str:
    """What to do about a failure of `kind` at `spec`, in a line."""
    where, hub = str(spec.path or spec.text), endpoint()
    org = (spec.repo_id or "").split("/")[0]
    hints = {
        "space": f"free space on the disk of {where} (df -h {where}); the next checkpoint is copied once "
        "there is room",
        "permission": f"make {where} writable for this user (ls -ld {where})",
        "missing": f"{where} is gone: mount it again (a disk or NFS mount that dropped); copies go on "
        "once it is back",
        "auth": f"run `hf auth login` with a token that may write to {org} ({hub}/settings/tokens): "
        "the next try reads it. HF_TOKEN set for the trainer wins over a login",
        "not_found": f"{hub} has no user or organisation {org!r} your token may create repositories in; "
        "check the name in output.sync",
        "public": f"{spec.text} is a public repository and output.sync writes only to a private one: make "
        f"it private in its settings on {hub}, then the next try goes through",
        "offline": "HF_HUB_OFFLINE is set in the trainer's environment: no copy can reach the hub; sync "
        "to a folder, or restart the run without it",
        "rate": "the hub limits commits an hour: raise output.sync_record_s (fewer copies of the record) "
        "or output.save_steps for the next run",
        "network": f"the link to {hub if spec.repo_id else where} failed; copies go on when it answers",
        "other": "backend.log has the traceback",
    }
    return hints[kind]
