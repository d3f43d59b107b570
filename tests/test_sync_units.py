"""output.sync without a trainer: the target's format and check, the worker's copies, its failures
and its queue, the restore, the hub through its offline stand-in, and what the views say."""

from __future__ import annotations

import errno
import inspect
import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import SUPPORT, cockpit, unwritable_dir, write_config

from cockpit.config import load as config_load
from cockpit.config.schema import ConfigError
from cockpit.config.sync_spec import parse
from cockpit.live.event_text import describe
from cockpit.results import runs_list
from cockpit.run import rundir
from cockpit.run.state import RunState
from cockpit.sync import check, hub
from cockpit.sync import text as sync_text
from cockpit.sync.manifest import MANIFEST_NAME, Manifest
from cockpit.sync.restore import RestoreError, restore
from cockpit.sync.targets import FolderTarget, open_target
from cockpit.sync.worker import SyncWorker

SECRET = "hf_SYNCTESTSECRETabcdefghijklmn0123"


# ---------------------------------------------------------------- a run directory to copy


def make_run(root: Path, run_id: str = "20260101-000000-tiny") -> rundir.RunDir:
    run = rundir.RunDir(root / run_id)
    run.checkpoints_dir.mkdir(parents=True)
    run.config_path.write_text("model:\n  name: synthetic:tiny\n")
    run.events_path.write_text('{"v":1,"type":"hello","ts":1.0}\n{"v":1,"type":"log","ts":2')  # a line cut
    return run


def save_checkpoint(run: rundir.RunDir, step: int, size: int = 1000) -> Path:
    folder = run.checkpoints_dir / f"checkpoint-{step}"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(bytes([step % 256]) * size)
    (folder / "optimizer.pt").write_bytes(b"o" * (size // 2))
    (folder / rundir.COMPLETE_MARKER).write_text(json.dumps({"step": step, "saved_at": time.time()}))
    return folder


class Events:
    """The emitter's stand-in: every event the worker emits, in order."""

    def __init__(self) -> None:
        self.items: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, msg_type: str, /, **fields) -> None:
        with self.lock:
            self.items.append({"type": msg_type, **fields})

    def of(self, kind: str, **match) -> list[dict]:
        with self.lock:
            return [
                e for e in self.items if e["type"] == kind and all(e.get(k) == v for k, v in match.items())
            ]


def worker(target, run, events, **kw) -> SyncWorker:
    kw.setdefault("keep", 2)
    kw.setdefault("record_every_s", 3600.0)
    kw.setdefault("retry_s", (0.05,))
    return SyncWorker(target, run, events, **kw).start()


def folder_target(tmp_path: Path) -> FolderTarget:
    (tmp_path / "backup").mkdir(exist_ok=True)
    return FolderTarget(parse(str(tmp_path / "backup")))


# ---------------------------------------------------------------- the target, as written and checked


def test_a_target_is_a_private_hub_repository_or_a_folder(tmp_path):
    assert parse("hf://alice/llama-backup").repo_id == "alice/llama-backup"
    assert parse("/mnt/nfs/backup").path == Path("/mnt/nfs/backup")
    assert parse("backup", base=tmp_path).path == tmp_path / "backup"
    for bad, said in (
        ("hf://alice", "names no hub repository"),
        ("hf://a/b/c", "names no hub repository"),
        ("s3://bucket/x", "only hf://ORG/NAME"),
        ("  ", "empty"),
    ):
        with pytest.raises(ConfigError, match=said) as caught:
            config_load.config_from_dotted({"output.sync": bad})
        assert str(caught.value).startswith("output.sync: ")
    cfg = config_load.config_from_dotted({"output.sync": "backup"})
    assert config_load.with_absolute_paths(cfg, tmp_path).output.sync == str(tmp_path / "backup")


def test_the_check_wants_a_folder_that_exists_and_takes_a_file(tmp_path):
    with pytest.raises(ConfigError, match=r"does not exist .*not mounted"):
        check.check_target(str(tmp_path / "nowhere"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        check.check_target(str(tmp_path / "file"))
    locked = unwritable_dir(tmp_path).parent
    with pytest.raises(ConfigError, match="cannot be written"):
        check.check_target(str(locked))
    (tmp_path / "ok").mkdir()
    assert "(exists, writable, " in check.check_target(str(tmp_path / "ok"))
    assert os.listdir(tmp_path / "ok") == []  # the probe file is gone


def test_train_check_refuses_a_target_that_is_not_there_before_anything_starts(tmp_path, env):
    config = write_config(tmp_path / "c.yaml", {"output.sync": str(tmp_path / "unmounted")})
    proc = cockpit(["train", str(config), "--check"], env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "config error: output.sync: the folder" in proc.stderr and "not mounted" in proc.stderr
    assert not (Path(env["COCKPIT_HOME"]) / "runs").exists()


# ---------------------------------------------------------------- the worker


def test_a_checkpoint_and_the_record_are_copied_and_said(tmp_path):
    run, target, events = make_run(tmp_path), folder_target(tmp_path), Events()
    w = worker(target, run, events)
    w.checkpoint_saved(save_checkpoint(run, 4))
    assert w.drain(10) == []
    w.close(10)
    copy = tmp_path / "backup" / run.run_id
    assert (
        copy / "checkpoints" / "checkpoint-4" / "adapter_model.safetensors"
    ).read_bytes() == b"\x04" * 1000
    assert (copy / "config.yaml").read_text() == run.config_path.read_text()
    assert (copy / "events.jsonl").read_text() == '{"v":1,"type":"hello","ts":1.0}\n'  # whole lines only
    manifest = Manifest.from_json((copy / MANIFEST_NAME).read_text())
    assert manifest is not None and (manifest.checkpoint, manifest.step) == ("checkpoint-4", 4)
    assert manifest.files["adapter_model.safetensors"] == 1000 and rundir.COMPLETE_MARKER in manifest.files
    assert stat.S_IMODE(copy.stat().st_mode) == 0o700
    assert [e["status"] for e in events.of("sync")] == ["started", "synced"]
    synced = events.of("sync", status="synced")[0]
    assert synced["step"] == 4 and synced["bytes"] > 1500 and 0 <= synced["lag_s"] < 10
    assert not (run.path / ".sync").exists()  # the spool is gone after the last copy


def test_the_target_keeps_the_newest_checkpoints_as_the_run_does(tmp_path):
    run, target, events = make_run(tmp_path), folder_target(tmp_path), Events()
    w = worker(target, run, events, keep=2)
    for step in (4, 8, 12):
        w.checkpoint_saved(save_checkpoint(run, step))
        assert w.drain(10) == []
    w.close(10)
    copy = tmp_path / "backup" / run.run_id / "checkpoints"
    assert sorted(p.name for p in copy.iterdir()) == ["checkpoint-12", "checkpoint-8"]
    assert events.of("sync", status="synced")[-1]["removed"] == ["checkpoint-4"]


class GatedTarget(FolderTarget):
    """A folder target whose copies wait for a gate: a slow link."""

    def __init__(self, spec, gate: threading.Event):
        super().__init__(spec)
        self.gate, self.copied = gate, []

    def put_folder(self, local, run_id, dest):
        assert self.gate.wait(30)
        super().put_folder(local, run_id, dest)
        self.copied.append(dest)


def test_the_training_thread_never_waits_and_a_newer_checkpoint_replaces_a_waiting_one(tmp_path):
    run, gate, events = make_run(tmp_path), threading.Event(), Events()
    (tmp_path / "backup").mkdir()
    target = GatedTarget(parse(str(tmp_path / "backup")), gate)
    w = worker(target, run, events, keep=3)
    started = time.monotonic()
    first = save_checkpoint(run, 4, size=2_000_000)
    w.checkpoint_saved(first)  # taken by the worker, whose copy waits on the link
    deadline = time.monotonic() + 5
    while w._busy is None and time.monotonic() < deadline:  # the worker holds it
        time.sleep(0.01)
    for step in (8, 12):
        w.checkpoint_saved(save_checkpoint(run, step))
    handed_s = time.monotonic() - started
    rundir.remove_checkpoint(first)  # the run's rotation deletes it while it is copied
    gate.set()
    assert w.drain(20) == []
    w.close(10)
    assert handed_s < 1.0, f"handing three checkpoints over took {handed_s:.2f} s"
    assert target.copied == ["checkpoints/checkpoint-4", "checkpoints/checkpoint-12"]  # 8 was superseded
    copy = tmp_path / "backup" / run.run_id / "checkpoints" / "checkpoint-4" / "adapter_model.safetensors"
    assert copy.stat().st_size == 2_000_000  # the snapshot outlived the checkpoint


class FailingTarget(FolderTarget):
    """A folder target whose copies raise the errors given, in turn, then work."""

    def __init__(self, spec, errors: list[BaseException]):
        super().__init__(spec)
        self.errors = errors

    def put_folder(self, local, run_id, dest):
        if self.errors:
            raise self.errors.pop(0)
        super().put_folder(local, run_id, dest)


def test_a_failing_copy_is_said_once_per_kind_tried_again_and_never_raises(tmp_path):
    run, events = make_run(tmp_path), Events()
    (tmp_path / "backup").mkdir()
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "backup"))
    refused = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "backup"))
    target = FailingTarget(parse(str(tmp_path / "backup")), [full, full, refused])
    w = worker(target, run, events, retry_s=(0.05, 0.1))
    w.checkpoint_saved(save_checkpoint(run, 4))
    deadline = time.monotonic() + 10
    while not events.of("sync", status="synced") and time.monotonic() < deadline:
        time.sleep(0.02)
    w.close(10)
    failed = events.of("sync", status="failed")
    assert [(e["kind"], e["failures"], e["retry_s"]) for e in failed] == [
        ("space", 1, 0.05),
        ("space", 2, 0.1),
        ("permission", 3, 0.1),
    ]
    assert "No space left on device" in failed[0]["reason"]
    warnings = events.of("warning")
    assert len(warnings) == 2  # once per kind
    assert warnings[0]["message"].startswith("output.sync: checkpoint-4 could not be copied to ")
    assert "Training goes on; it tries again in" in warnings[0]["message"]
    assert "df -h" in warnings[0]["hint"] and "writable" in warnings[1]["hint"]
    assert events.of("sync", status="synced")[0]["failures"] == 3


def refuse_writes(folders: list[Path]) -> list[str]:
    """Make `folders` refuse new files, as a read-only remount would: `chattr +i` for root (whom
    modes do not stop), mode 0500 otherwise; the command that undoes it."""
    import shutil
    import subprocess

    if os.geteuid() != 0:
        for folder in folders:
            folder.chmod(0o500)
        return ["chmod", "700", *map(str, folders)]
    if shutil.which("chattr") is None:
        pytest.skip("root without chattr: nothing here refuses a write")
    made = subprocess.run(["chattr", "+i", *map(str, folders)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i refused here: {made.stderr.decode().strip()}")
    return ["chattr", "-i", *map(str, folders)]


def test_a_target_that_stops_taking_writes_mid_run_is_said_once_and_the_run_goes_on(tmp_path):
    import subprocess

    run, events = make_run(tmp_path), Events()
    w = worker(folder_target(tmp_path), run, events, retry_s=(0.2,))
    w.checkpoint_saved(save_checkpoint(run, 4))
    wait_for_event(events, status="synced", step=4)
    copy = tmp_path / "backup" / run.run_id
    undo = refuse_writes([tmp_path / "backup", copy, copy / "checkpoints"])
    try:
        for step in (8, 12):  # the training thread hands them over and goes on
            w.checkpoint_saved(save_checkpoint(run, step))
            wait_for_event(events, status="failed", step=step)
        assert not (copy / "checkpoints" / "checkpoint-12").exists()
    finally:
        subprocess.run(undo, check=True)
    wait_for_event(events, status="synced", step=12)  # tried again once the target takes writes
    assert w.drain(10) == []
    w.close(10)
    warnings = events.of("warning")
    assert len(warnings) == 1, warnings  # said once, however often it is tried
    assert warnings[0]["message"].startswith(
        f"output.sync: checkpoint-8 could not be copied to {copy.parent}"
    )
    assert "Training goes on; it tries again in" in warnings[0]["message"]
    failed = events.of("sync", status="failed")
    assert {e["kind"] for e in failed} == {"permission"} and failed[0]["retry_s"] == 0.2
    manifest = Manifest.from_json((copy / MANIFEST_NAME).read_text())
    assert manifest is not None and manifest.checkpoint == "checkpoint-12"
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == ["checkpoint-12", "checkpoint-4"]


def test_a_checkpoint_that_cannot_be_snapshotted_is_said_and_never_raised_into_training(tmp_path):
    run, events = make_run(tmp_path), Events()
    (run.path / ".sync").write_text("in the way")  # the spool cannot be made, nor take the links
    w = worker(folder_target(tmp_path), run, events)  # starts all the same
    w.checkpoint_saved(save_checkpoint(run, 4))  # returns: training goes on
    failed = events.of("sync", status="failed")
    assert [(e["checkpoint"], e["retry_s"]) for e in failed] == [("checkpoint-4", None)]
    assert len(events.of("warning")) == 1
    assert w.drain(2) == []
    w.close(5)
    assert not (tmp_path / "backup" / run.run_id / "checkpoints").exists()


def wait_for_event(events: Events, **match) -> dict:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = events.of("sync", **match)
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no sync event {match} within 10 s: {events.items}")


def test_the_end_waits_a_bounded_time_names_what_is_left_and_is_silent_after(tmp_path):
    run, events = make_run(tmp_path), Events()
    (tmp_path / "backup").mkdir()
    never = [OSError(errno.ENETUNREACH, "Network is unreachable")] * 100
    w = worker(FailingTarget(parse(str(tmp_path / "backup")), never), run, events, retry_s=(30.0,))
    w.checkpoint_saved(save_checkpoint(run, 4))
    started = time.monotonic()
    assert w.drain(5) == ["checkpoint-4"]  # tried once more at once, then given up
    assert time.monotonic() - started < 4
    said = len(events.items)
    assert w.close(5)
    assert len(events.items) == said  # nothing after the run's last event
    assert events.of("sync", status="failed")[-1]["retry_s"] is None


# ---------------------------------------------------------------- the restore


def synced_run(tmp_path: Path, steps=(4, 8)) -> rundir.RunDir:
    run, events = make_run(tmp_path / "box"), Events()
    w = worker(folder_target(tmp_path), run, events)
    for step in steps:
        w.checkpoint_saved(save_checkpoint(run, step))
        assert w.drain(10) == []
    w.close(10)
    return run


def test_a_run_is_rebuilt_from_a_folder_with_its_last_checkpoint(tmp_path):
    lost = synced_run(tmp_path)
    restored = restore(str(tmp_path / "backup"), root=tmp_path / "new-home" / "runs")
    run = restored.run
    assert run.path == tmp_path / "new-home" / "runs" / lost.run_id
    assert [p.name for p in run.complete_checkpoints()] == ["checkpoint-8"]
    assert stat.S_ISFIFO(run.control_path.stat().st_mode) and run.log_path.is_file()
    assert stat.S_IMODE(run.path.stat().st_mode) == 0o700
    assert stat.S_IMODE((run.checkpoints_dir / "checkpoint-8" / "optimizer.pt").stat().st_mode) == 0o600
    last = json.loads(run.events_path.read_text().splitlines()[-1])
    assert (last["type"], last["status"], last["checkpoint"], last["step"]) == (
        "sync",
        "restored",
        "checkpoint-8",
        8,
    )
    assert "restored run" in restored.line("X") and "checkpoint-8 (step 8)" in restored.line("X")

    with pytest.raises(RestoreError, match=r"already on this machine .*runs --rm"):
        restore(str(tmp_path / "backup"), root=tmp_path / "new-home" / "runs")


def test_a_checkpoint_cut_short_at_the_target_is_refused_and_nothing_is_left(tmp_path):
    lost = synced_run(tmp_path)
    weights = tmp_path / "backup" / lost.run_id / "checkpoints" / "checkpoint-8" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:300])
    with pytest.raises(
        RestoreError, match=r"not whole: adapter_model\.safetensors is 300 bytes, its manifest says 1,000"
    ):
        restore(str(tmp_path / "backup"), root=tmp_path / "runs")
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_share_mounted_elsewhere_on_the_new_machine_takes_the_copies_from_there_on(tmp_path, env, capsys):
    import argparse

    from cockpit.cli import sync_commands
    from cockpit.config.load import load_config

    run = make_run(tmp_path / "box")
    write_config(run.config_path, {"output.sync": "/mnt/old-box-share"})
    w = worker(folder_target(tmp_path), run, Events())
    w.checkpoint_saved(save_checkpoint(run, 4))
    assert w.drain(10) == []
    w.close(10)
    mounted_here = tmp_path / "share-here"
    (tmp_path / "backup").rename(mounted_here)

    rebuilt = sync_commands.restored_run(argparse.Namespace(from_target=str(mounted_here), run=None))
    assert isinstance(rebuilt, rundir.RunDir), capsys.readouterr().err
    assert load_config(rebuilt.config_path).output.sync == str(mounted_here)
    kept = yaml.safe_load((rebuilt.path / "history" / "config-1.yaml").read_text())
    assert kept["output"]["sync"] == "/mnt/old-box-share"
    said = capsys.readouterr().err
    assert f"output.sync: /mnt/old-box-share -> {mounted_here} (the old config is in history/)" in said
    change = [
        e
        for e in map(json.loads, rebuilt.events_path.read_text().splitlines())
        if e["type"] == "config_change"
    ]
    assert change and change[0]["changes"] == {"output.sync": str(mounted_here)}
    assert "config changed (restart --from" in describe(change[0])

    again = make_run(tmp_path / "box2", "20260303-000000-tiny")  # the same place: nothing changes
    write_config(again.config_path, {"output.sync": str(mounted_here)})
    sync_commands.repoint(again, str(mounted_here))
    assert not (again.path / "history").exists() and "output.sync:" not in capsys.readouterr().err


def test_the_newest_run_is_chosen_unless_one_is_named(tmp_path):
    older = synced_run(tmp_path)
    time.sleep(0.01)
    newer = make_run(tmp_path / "box2", "20260202-000000-tiny")
    w = worker(folder_target(tmp_path), newer, Events())
    w.checkpoint_saved(save_checkpoint(newer, 4))
    assert w.drain(10) == []
    w.close(10)
    chosen = restore(str(tmp_path / "backup"), root=tmp_path / "a")
    assert chosen.run.run_id == newer.run_id and chosen.others == [older.run_id]
    assert restore(str(tmp_path / "backup"), "20260101", root=tmp_path / "b").run.run_id == older.run_id
    with pytest.raises(RestoreError, match="matches no run"):
        restore(str(tmp_path / "backup"), "2027", root=tmp_path / "c")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RestoreError, match="holds no synced run"):
        restore(str(tmp_path / "empty"), root=tmp_path / "d")


# ---------------------------------------------------------------- the hub, through its stand-in


@pytest.fixture
def fake_hub(tmp_path, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(SUPPORT))
    monkeypatch.setenv(hub.TEST_API_ENV, "fake_hub:FakeHfApi")
    monkeypatch.setenv("FAKE_HUB_DIR", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_TOKEN", SECRET)
    return tmp_path / "hub"


def test_the_stand_in_takes_only_what_huggingface_hubs_api_takes(fake_hub):
    from fake_hub import FakeHfApi
    from huggingface_hub import HfApi

    for name, method in inspect.getmembers(FakeHfApi, inspect.isfunction):
        if name.startswith("_"):
            continue
        real = inspect.signature(getattr(HfApi, name)).parameters
        for param in inspect.signature(method).parameters.values():
            assert param.name in real, (name, param.name)
            assert param.kind == real[param.name].kind, (name, param.name)


def test_the_check_wants_a_hub_token_and_asks_the_repository_once(tmp_path, fake_hub, monkeypatch):
    from fake_hub import FakeHfApi

    said = check.check_target("hf://alice/run")
    assert said == (
        "output.sync: each checkpoint and the record go to hf://alice/run (not there yet: made private "
        "at the first copy), with the token of HF_TOKEN"
    )  # named, never shown
    FakeHfApi().create_repo("alice/run", private=True)
    assert "(exists, private)" in check.check_target("hf://alice/run")
    FakeHfApi().create_repo("alice/open", private=False)
    with pytest.raises(ConfigError, match=r"hf://alice/open is a public repository.*make it private"):
        check.check_target("hf://alice/open")

    down = tmp_path / "hub-down"
    monkeypatch.setenv("FAKE_HUB_DOWN", str(down))
    down.write_text("503")  # a hub that does not answer now: said, not refused
    assert "(not reached now (HTTP 503: 503 Server Error" in check.check_target("hf://alice/run")
    down.write_text("401")  # a token the hub refuses
    with pytest.raises(ConfigError, match=r"hf://alice/run: HTTP 401: .*hf auth login"):
        check.check_target("hf://alice/run")
    down.unlink()

    import huggingface_hub.constants

    monkeypatch.delenv(hub.TEST_API_ENV)  # huggingface_hub's own HfApi, offline (HF_HUB_OFFLINE=1)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at its import
    with pytest.raises(ConfigError, match=r"offline mode is enabled.*HF_HUB_OFFLINE is set"):
        check.check_target("hf://alice/run")
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved login either
    with pytest.raises(ConfigError, match=r"needs a hub token .*HF_TOKEN or run `hf auth login`"):
        check.check_target("hf://alice/run")


def test_a_run_goes_to_a_private_repository_and_comes_back(tmp_path, fake_hub):
    run, events = make_run(tmp_path / "box"), Events()
    target = open_target(parse("hf://alice/backup"))
    w = worker(target, run, events)
    for step in (4, 8, 12):
        w.checkpoint_saved(save_checkpoint(run, step))
        assert w.drain(10) == []
    w.close(10)
    repo = fake_hub / "alice" / "backup"
    assert json.loads((repo / "repo.json").read_text())["private"] is True
    files = sorted(
        p.relative_to(repo / "files").as_posix() for p in (repo / "files").rglob("*") if p.is_file()
    )
    assert f"{run.run_id}/checkpoints/checkpoint-12/optimizer.pt" in files
    assert not any("checkpoint-4" in f for f in files)  # deleted in the commit that named checkpoint-12
    commits = [json.loads(line) for line in (repo / "commits.jsonl").read_text().splitlines()]
    # checkpoint-12's files first, then one commit: the manifest naming it, checkpoint-4 deleted
    deleting = [i for i, c in enumerate(commits) if c["deleted"]]
    uploaded_12 = next(i for i, c in enumerate(commits) if c["prefix"].endswith("/checkpoint-12"))
    assert len(deleting) == 1 and deleting[0] > uploaded_12
    assert MANIFEST_NAME in commits[deleting[0]]["added"]
    assert all(d.startswith("checkpoints/checkpoint-4/") for d in commits[deleting[0]]["deleted"])
    for path in (repo / "files").rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path

    restored = restore("hf://alice/backup", root=tmp_path / "new" / "runs")
    assert [p.name for p in restored.run.complete_checkpoints()] == ["checkpoint-12"]
    assert not list(restored.run.path.parent.glob(".download-*"))


def test_a_public_repository_or_no_token_is_refused_and_said(tmp_path, fake_hub, monkeypatch):
    from fake_hub import FakeHfApi

    FakeHfApi().create_repo("alice/open", private=False)
    run, events = make_run(tmp_path / "box"), Events()
    w = worker(open_target(parse("hf://alice/open")), run, events)
    w.checkpoint_saved(save_checkpoint(run, 4))
    assert w.drain(2) == ["checkpoint-4"]
    w.close(5)
    assert events.of("sync", status="failed")[0]["kind"] == "public"
    assert "make it private" in events.of("warning")[0]["hint"]
    assert not (fake_hub / "alice" / "open" / "files" / run.run_id).exists()

    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    events = Events()
    w = worker(open_target(parse("hf://alice/other")), run, events)
    w.checkpoint_saved(save_checkpoint(run, 8))
    assert w.drain(2) == ["checkpoint-8"]
    w.close(5)
    failed = events.of("sync", status="failed")[0]
    assert failed["kind"] == "auth" and failed["reason"].startswith("HTTP 401")
    assert "hf auth login" in events.of("warning")[0]["hint"]
    with pytest.raises(RestoreError, match="cannot read hf://alice/other: HTTP 401"):
        restore("hf://alice/other", root=tmp_path / "runs")


# ---------------------------------------------------------------- what the views say


def folded(*items: dict) -> RunState:
    state = RunState()
    for ts, item in enumerate(items, start=1):
        state.apply({"v": 1, "ts": float(ts), **item})
    return state


def test_the_views_show_the_last_step_synced_the_lag_and_the_failures(tmp_path):
    target = "hf://alice/backup"
    started = {"type": "sync", "status": "started", "target": target}
    state = folded(started)
    assert sync_text.panel_text(state.sync, 10.0) == "nothing copied yet"
    state = folded(
        started,
        {"type": "checkpoint", "step": 4, "path": "/r/checkpoints/checkpoint-4", "bytes": 10},
        {
            "type": "sync",
            "status": "synced",
            "what": "checkpoint",
            "target": target,
            "checkpoint": "checkpoint-4",
            "step": 4,
            "bytes": 10,
            "lag_s": 3.0,
            "removed": [],
        },
        {"type": "checkpoint", "step": 8, "path": "/r/checkpoints/checkpoint-8", "bytes": 10},
        {
            "type": "sync",
            "status": "failed",
            "what": "checkpoint",
            "target": target,
            "checkpoint": "checkpoint-8",
            "step": 8,
            "kind": "network",
            "reason": "ConnectionError: down",
            "retry_s": 30.0,
            "failures": 1,
        },
    )
    assert (
        sync_text.panel_text(state.sync, 64.0) == "step 4, 3 s lag; step 8 waits 0:01:00; 1 failed: network"
    )
    line = sync_text.runs_line(state.sync)
    assert line.startswith("sync: checkpoint-4 (step 4) on hf://alice/backup, 3 s after its save")
    assert "checkpoint-8 not copied; 1 failed tries since, the last: network: ConnectionError: down" in line

    from screens.run.figures import stat_rows

    assert ("sync", sync_text.panel_text(state.sync, 64.0)) in stat_rows(state, 64.0)
    assert all(label != "sync" for label, _ in stat_rows(folded({"type": "log", "step": 1}), 2.0))

    said = [
        describe({"v": 1, "ts": 1.0, **e})
        for e in (
            started,
            {
                "type": "sync",
                "status": "synced",
                "what": "checkpoint",
                "target": target,
                "checkpoint": "checkpoint-8",
                "step": 8,
                "bytes": 2048,
                "lag_s": 4.2,
                "removed": ["checkpoint-4"],
            },
            {
                "type": "sync",
                "status": "failed",
                "what": "record",
                "target": target,
                "kind": "auth",
                "reason": "HTTP 401: no",
                "retry_s": None,
                "failures": 2,
            },
            {"type": "sync", "status": "restored", "target": target, "checkpoint": "checkpoint-8", "step": 8},
        )
    ]
    assert said == [
        "sync: each checkpoint and the record go to hf://alice/backup, in the background",
        "sync: checkpoint-8 (step 8, 2.0 KiB) is on hf://alice/backup, 4 s after its save; "
        "checkpoint-4 removed there",
        "sync: the record not on hf://alice/backup (failure 2, auth: HTTP 401: no); not tried again",
        "sync: this run directory was rebuilt from hf://alice/backup, at checkpoint-8 (step 8)",
    ]


def test_the_summary_says_the_sync_and_a_lost_run_directory_offers_its_copy(tmp_path):
    from cockpit.results.summary import summarize, summary_lines

    target = str(tmp_path / "nfs backup")
    state = folded(
        {"type": "sync", "status": "started", "target": target},
        {"type": "checkpoint", "step": 8, "path": "/r/checkpoints/checkpoint-8", "bytes": 10},
        {
            "type": "sync",
            "status": "synced",
            "what": "checkpoint",
            "target": target,
            "checkpoint": "checkpoint-8",
            "step": 8,
            "bytes": 10,
            "lag_s": 1.0,
        },
        {"type": "error", "kind": "other", "message": "the run directory was deleted", "step": 9},
    )
    gone = summary_lines(summarize(state, tmp_path / "deleted-run", []))
    assert f"sync: checkpoint-8 (step 8) on {target}, 1 s after its save" in gone
    assert any(
        line.endswith(f"restart --from '{target}' (its copy, at step 8)") and line.startswith("next: ")
        for line in gone
    ), gone
    plain = summary_lines(summarize(folded({"type": "error", "kind": "other", "message": "x"}), tmp_path, []))
    assert not any(line.startswith("sync:") for line in plain)
    assert any(
        "a new run: this one's directory and checkpoints are gone" in line
        for line in summary_lines(summarize(folded({"type": "log", "step": 1}), tmp_path / "gone", []))
    )


def test_cockpit_runs_has_a_sync_line_under_the_run(tmp_path):
    row = runs_list.RunRow(
        run="r1",
        status="running",
        step=8,
        total_steps=12,
        detail="",
        path="/r1",
        started=None,
        started_ts=None,
        duration_s=0.0,
        final_loss=None,
        cost_usd=None,
        config=None,
        disk_bytes=0,
        checkpoints_bytes=0,
        adapter=None,
        on_end=None,
        sync={"target": "/mnt/backup", "step": 8, "checkpoint": "checkpoint-8", "lag_s": 2.0, "final": True},
    )
    assert (
        "  sync: checkpoint-8 (step 8) on /mnt/backup, 2 s after its save; final/ too"
        in runs_list.table_lines([row])
    )


async def test_the_run_panel_shows_the_sync_row_at_80x24(tmp_path):
    from support.pilot import LAST_TS, ScriptedSession, events_until_step, make_app, screen_text, shown

    trained = events_until_step(30)
    ts = trained[-1]["ts"]
    synced = {
        "v": 1,
        "type": "sync",
        "ts": ts + 0.5,
        "status": "synced",
        "what": "checkpoint",
        "target": "/mnt/backup",
        "checkpoint": "checkpoint-30",
        "step": 30,
        "bytes": 100,
        "lag_s": 2.0,
    }
    started = {"v": 1, "type": "sync", "ts": trained[0]["ts"], "status": "started", "target": "/mnt/backup"}
    app = make_app(ScriptedSession(rundir.RunDir(tmp_path / "run"), [started, *trained, synced]), LAST_TS)
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(pilot, app)
        lines = screen_text(app).splitlines()

        def region_text(selector: str) -> str:
            region = app.run_view.query_one(selector).region
            return "\n".join(line[region.x : region.right] for line in lines[region.y : region.bottom])

        assert "│ sync          step 30, 2 s lag" in region_text("#stats-box")
        squeezed = "".join(ch for ch in region_text("#events") if ch not in " \n│╭╮╰╯─")
        assert "sync:checkpoint-30(step30,100B)ison/mnt/backup" in squeezed
