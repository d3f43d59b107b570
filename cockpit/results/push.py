"""`--push-to-hub ORG/NAME`: upload a finished export through huggingface_hub.

The token comes from HF_TOKEN only, and the hub from HF_ENDPOINT when it is set (a mirror).
A missing token or a refused push is said with the reason; the local export is never touched.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"


@dataclass(frozen=True)
class PushResult:
    ok: bool
    message: str
    url: str | None = None


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def valid_repo_id(repo_id: str) -> bool:
    return re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id) is not None


def push(folder: Path, repo_id: str, private: bool = True) -> PushResult:
    kept = f"The export is kept in {folder}."
    if not valid_repo_id(repo_id):
        return PushResult(False, f"not pushed: {repo_id!r} is not a repo id ORG/NAME. {kept}")
    token = os.environ.get("HF_TOKEN")
    if not token:
        return PushResult(
            False,
            f"not pushed to {repo_id}: HF_TOKEN is not set. Create a token with write access at "
            f"{endpoint()}/settings/tokens, export HF_TOKEN=..., and push again with --push-to-hub "
            f"(or: huggingface-cli upload {repo_id} {folder}). {kept}",
        )
    try:
        from huggingface_hub import HfApi
    except ImportError:
        return PushResult(
            False, f"not pushed: huggingface_hub is not installed (pip install huggingface_hub). {kept}"
        )
    api = HfApi(endpoint=endpoint(), token=token)
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type="model",
            commit_message="lora-cockpit export",
            ignore_patterns=["cockpit-export.json"],
        )
    except Exception as exc:
        reason = _reason(exc)
        return PushResult(False, f"push to {repo_id} at {endpoint()} refused: {reason}. {kept}")
    url = getattr(commit, "repo_url", None) or f"{endpoint()}/{repo_id}"
    return PushResult(True, f"pushed to {url}", str(url))


def _reason(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    hint = {
        401: " (the token is invalid or expired)",
        403: " (the token may not write to this org or repo)",
        404: " (no such org, or the endpoint is not a hub)",
    }.get(status or 0, "")
    return (f"HTTP {status}{hint}: " if status else f"{type(exc).__name__}: ") + text
