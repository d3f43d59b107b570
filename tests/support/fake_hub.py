"""An offline stand-in for huggingface_hub's HfApi, for output.sync's tests: repositories are folders.

Put in HfApi's place with COCKPIT_TEST_HF_API=fake_hub:FakeHfApi (tests/support is on the
subprocesses' PYTHONPATH); the hub lives in $FAKE_HUB_DIR:

    $FAKE_HUB_DIR/<org>/<name>/repo.json   {"private": ...}
    $FAKE_HUB_DIR/<org>/<name>/files/...   the repository's files
    $FAKE_HUB_DIR/<org>/<name>/commits.jsonl  one line a commit: its message, files added and deleted

Only the methods cockpit.sync.hub calls, with the real ones' keyword names (test_sync_units checks
them against HfApi's signatures); patterns are matched by huggingface_hub's own filter. Like the
hub, it refuses a caller without a token (HTTP 401). $FAKE_HUB_DELAY_S slows every upload (a slow
link); while the file $FAKE_HUB_DOWN exists every call fails with the HTTP status written in it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

from huggingface_hub import get_token
from huggingface_hub.utils import filter_repo_objects


class FakeHubError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.response = SimpleNamespace(status_code=status)


class FakeHfApi:
    def __init__(self) -> None:
        self.root = Path(os.environ["FAKE_HUB_DIR"])
        self.delay_s = float(os.environ.get("FAKE_HUB_DELAY_S") or 0)

    def _answer(self) -> None:
        down = os.environ.get("FAKE_HUB_DOWN")
        if down and Path(down).is_file():
            status = int(Path(down).read_text().strip() or 503)
            raise FakeHubError(status, f"{status} Server Error: the fake hub is down")
        if get_token() is None:
            raise FakeHubError(401, "401 Client Error: Unauthorized (no token)")

    def _repo(self, repo_id: str) -> Path:
        repo = self.root / repo_id
        if not (repo / "repo.json").is_file():
            raise FakeHubError(404, f"404 Client Error: Repository Not Found for url: {repo_id}")
        return repo

    def create_repo(
        self,
        repo_id: str,
        *,
        repo_type: str | None = None,
        private: bool | None = None,
        exist_ok: bool = False,
    ):
        self._answer()
        repo = self.root / repo_id
        if (repo / "repo.json").is_file():
            if not exist_ok:
                raise FakeHubError(409, f"409 Client Error: You already created this model repo: {repo_id}")
            return f"https://fake.hub/{repo_id}"
        (repo / "files").mkdir(parents=True)
        (repo / "repo.json").write_text(json.dumps({"private": bool(private), "repo_type": repo_type}))
        return f"https://fake.hub/{repo_id}"

    def repo_info(self, repo_id: str, *, repo_type: str | None = None, timeout: float | None = None):
        self._answer()
        return SimpleNamespace(private=json.loads((self._repo(repo_id) / "repo.json").read_text())["private"])

    def list_repo_files(self, repo_id: str, *, repo_type: str | None = None) -> list[str]:
        self._answer()
        files = self._repo(repo_id) / "files"
        return sorted(p.relative_to(files).as_posix() for p in files.rglob("*") if p.is_file())

    def upload_folder(
        self,
        *,
        repo_id: str,
        folder_path: str,
        path_in_repo: str | None = None,
        commit_message: str | None = None,
        repo_type: str | None = None,
        delete_patterns: list[str] | None = None,
    ):
        self._answer()
        time.sleep(self.delay_s)
        files = self._repo(repo_id) / "files"
        prefix = (path_in_repo or "").strip("/")
        base = files / prefix if prefix else files
        source = Path(folder_path)
        added = sorted(p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file())
        deleted = []
        if delete_patterns and base.is_dir():
            present = sorted(p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file())
            deleted = [
                p for p in filter_repo_objects(present, allow_patterns=delete_patterns) if p not in added
            ]
        for relative in deleted:
            (base / relative).unlink()
        for relative in added:  # one commit: all of it is there when this returns
            (base / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / relative, base / relative)
        with open(self._repo(repo_id) / "commits.jsonl", "a") as log:
            log.write(
                json.dumps({"message": commit_message, "prefix": prefix, "added": added, "deleted": deleted})
                + "\n"
            )
        return SimpleNamespace(repo_url=f"https://fake.hub/{repo_id}")

    def hf_hub_download(
        self, repo_id: str, filename: str, *, repo_type: str | None = None, local_dir: str | None = None
    ) -> str:
        self._answer()
        source = self._repo(repo_id) / "files" / filename
        if not source.is_file():
            raise FakeHubError(404, f"404 Client Error: Entry Not Found: {filename}")
        place = Path(local_dir or self.root / "downloads") / filename
        place.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, place)
        return str(place)

    def snapshot_download(
        self,
        repo_id: str,
        *,
        repo_type: str | None = None,
        allow_patterns: list[str] | None = None,
        local_dir: str | None = None,
    ) -> str:
        self._answer()
        files = self._repo(repo_id) / "files"
        present = sorted(p.relative_to(files).as_posix() for p in files.rglob("*") if p.is_file())
        out = Path(local_dir or self.root / "downloads")
        for relative in filter_repo_objects(present, allow_patterns=allow_patterns):
            (out / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(files / relative, out / relative)
        return str(out)
