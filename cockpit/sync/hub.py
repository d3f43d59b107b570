"""The hub as a sync target: a private model repository, through huggingface_hub's `HfApi`.

The token is huggingface_hub's own: HF_TOKEN, or the one `hf auth login` saved (read again at
every request, so a login on the machine mends a running sync). It is never passed, written or
printed here. HF_ENDPOINT (a mirror) is huggingface_hub's too.

Tests put an offline stand-in in HfApi's place: COCKPIT_TEST_HF_API=module:Class names a class
built with no arguments that has the methods used here (tests/support/fake_hub.py); never a
user's setting.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from cockpit.config.sync_spec import SyncSpec
from cockpit.sync.manifest import MANIFEST_NAME, Manifest

TEST_API_ENV = "COCKPIT_TEST_HF_API"
REPO_TYPE = "model"
DEFAULT_ENDPOINT = "https://huggingface.co"


class PublicRepository(RuntimeError):
    """The repository exists and anyone may read it: no checkpoint or event goes there."""


def hub_api() -> Any:
    """huggingface_hub's HfApi (or a test's stand-in), with the token and endpoint it finds itself."""
    spec = os.environ.get(TEST_API_ENV)
    if spec:
        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)()
    from huggingface_hub import HfApi

    return HfApi()


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token_found() -> bool:
    """Whether huggingface_hub finds a token (HF_TOKEN, or a saved login); its value is not kept."""
    from huggingface_hub import get_token

    return get_token() is not None


class HubTarget:
    def __init__(self, spec: SyncSpec):
        assert spec.repo_id is not None
        self.spec, self.repo_id = spec, spec.repo_id
        self._api: Any = None

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = hub_api()
        return self._api

    def prepare(self) -> None:
        self.api.create_repo(self.repo_id, repo_type=REPO_TYPE, private=True, exist_ok=True)
        info = self.api.repo_info(self.repo_id, repo_type=REPO_TYPE)
        if getattr(info, "private", None) is False:
            raise PublicRepository(f"{self.spec.text} is a public repository")

    def _files(self) -> list[str]:
        files: list[str] = self.api.list_repo_files(self.repo_id, repo_type=REPO_TYPE)
        return files

    def _manifest(self, name: str) -> Manifest | None:
        with tempfile.TemporaryDirectory(prefix="cockpit-sync-") as folder:
            path = self.api.hf_hub_download(self.repo_id, name, repo_type=REPO_TYPE, local_dir=folder)
            return Manifest.from_json(Path(path).read_text(encoding="utf-8"))

    def read_manifest(self, run_id: str) -> Manifest | None:
        name = f"{run_id}/{MANIFEST_NAME}"
        return self._manifest(name) if name in self._files() else None

    def put_folder(self, local: Path, run_id: str, dest: str) -> None:
        self.api.upload_folder(
            repo_id=self.repo_id,
            repo_type=REPO_TYPE,
            folder_path=str(local),
            path_in_repo=f"{run_id}/{dest}",
            commit_message=f"{run_id}: {dest}",
        )

    def put_record(self, record: Path, run_id: str, delete: list[str]) -> None:
        """One commit: the record's files, the manifest among them, and the deletions."""
        self.api.upload_folder(
            repo_id=self.repo_id,
            repo_type=REPO_TYPE,
            folder_path=str(record),
            path_in_repo=run_id,
            commit_message=f"{run_id}: record" + (f", {', '.join(delete)} removed" if delete else ""),
            delete_patterns=[f"{relative}/*" for relative in delete] or None,
        )

    def list_manifests(self) -> list[Manifest]:
        found = []
        for name in self._files():
            run_id, _, rest = name.partition("/")
            if rest == MANIFEST_NAME:
                manifest = self._manifest(name)
                if manifest is not None and manifest.run_id == run_id:
                    found.append(manifest)
        return found

    def fetch(self, run_id: str, wanted: list[str], into: Path) -> None:
        patterns = [p for relative in wanted for p in (f"{run_id}/{relative}", f"{run_id}/{relative}/*")]
        download = into.parent / f".download-{run_id}"
        shutil.rmtree(download, ignore_errors=True)
        try:
            self.api.snapshot_download(
                repo_id=self.repo_id, repo_type=REPO_TYPE, allow_patterns=patterns, local_dir=str(download)
            )
            fetched = download / run_id
            if fetched.is_dir():
                into.mkdir(mode=0o700, parents=True, exist_ok=True)
                for child in fetched.iterdir():
                    os.replace(child, into / child.name)
        finally:
            shutil.rmtree(download, ignore_errors=True)
