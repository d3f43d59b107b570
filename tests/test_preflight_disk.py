"""Disk checks: device type from fake /proc + /sys trees, free space, and the read-speed probe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cockpit.fmt import GIB
from cockpit.preflight.checks import disk as d
from cockpit.preflight.checks import disk_speed as ds


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _fake_box(
    tmp_path: Path, mounts: list[tuple[str, str, str, str]], disks: dict[str, str]
) -> tuple[Path, Path]:
    """mounts: (mount_point, major:minor, fstype, source); disks: name -> rotational."""
    proc, sys = tmp_path / "proc_root", tmp_path / "sys"
    lines = [
        f"{20 + i} 1 {majmin} / {mp} rw,relatime - {fstype} {source} rw"
        for i, (mp, majmin, fstype, source) in enumerate(mounts)
    ]
    _write(proc / "proc/self/mountinfo", "\n".join(lines) + "\n")
    for name, rotational in disks.items():
        _write(sys / "block" / name / "queue/rotational", rotational + "\n")
    return proc, sys


def test_device_kinds_from_fake_trees(tmp_path):
    mounts = [
        ("/", "8:1", "ext4", "/dev/sda1"),
        ("/nvme", "259:1", "xfs", "/dev/nvme0n1p1"),
        ("/hdd", "8:17", "ext4", "/dev/sdb1"),
        ("/data", "253:0", "ext4", "/dev/mapper/vg-data"),
        ("/nfs", "0:50", "nfs4", "server:/export"),
        ("/fuse", "0:51", "fuse.s3fs", "s3fs"),
        ("/overlay", "0:52", "overlay", "overlay"),
    ]
    proc, sys = _fake_box(tmp_path, mounts, {"sda": "0", "sdb": "1", "nvme0n1": "0", "dm-0": "0"})
    # /sys/dev/block links resolve major:minor to the device name; dm-0 sits on two NVMe drives
    for majmin, name in [("259:1", "nvme0n1p1"), ("8:17", "sdb1"), ("253:0", "dm-0")]:
        target = sys / "devices" / name
        target.mkdir(parents=True, exist_ok=True)
        (sys / "dev/block").mkdir(parents=True, exist_ok=True)
        os.symlink(target, sys / "dev/block" / majmin)
    for slave in ("nvme1n1", "nvme2n1"):
        (sys / "block/dm-0/slaves" / slave).mkdir(parents=True)

    def kind(p: str) -> str:
        return d.classify_path(Path(p), proc, sys).kind

    assert kind("/home/me/.cache/huggingface") == "ssd"
    assert kind("/nvme/hf/hub") == "nvme"
    assert kind("/hdd/x") == "hdd"
    assert kind("/data/runs") == "nvme"
    assert d.classify_path(Path("/data/runs"), proc, sys).devices == ("nvme1n1", "nvme2n1")
    assert kind("/nfs/models") == "network"
    assert kind("/fuse/bucket") == "network"
    assert kind("/overlay/app") == "overlay"

    assert d.check_disk_type(Path("/nvme/hf"), "cache", proc, sys).status == "pass"
    assert d.check_disk_type(Path("/"), "cache", proc, sys).status == "warn"
    hdd = d.check_disk_type(Path("/hdd/hf"), "cache", proc, sys)
    assert hdd.status == "fail" and "HF_HOME" in hdd.fix
    nfs = d.check_disk_type(Path("/nfs/hf"), "cache", proc, sys)
    assert nfs.status == "warn" and "copy" in nfs.fix


def test_free_space_against_the_plan(tmp_path):
    def usage(free_gib: float):
        return lambda _path: (1000 * GIB, 0, int(free_gib * GIB))

    plan = {"model_bytes": 13 * GIB, "checkpoint_bytes": 7 * GIB}
    fail = d.check_free_space(tmp_path / "missing/dir", "cache", **plan, disk_usage=usage(10))
    assert fail.status == "fail" and fail.evidence["measured_at"] == str(tmp_path)
    assert d.check_free_space(tmp_path, "cache", **plan, disk_usage=usage(25)).status == "warn"
    assert d.check_free_space(tmp_path, "cache", **plan, disk_usage=usage(100)).status == "pass"
    assert d.check_free_space(tmp_path, "runs", disk_usage=usage(5)).status == "warn"


def _speed(seq: float, iops: float) -> ds.ReadSpeed:
    return ds.ReadSpeed(seq, iops, "O_DIRECT", 1 << 20, 1 << 20, 100, 0.1, False)


@pytest.mark.parametrize(
    ("seq", "iops", "status", "words"),
    [
        (3000, 400_000, "pass", ""),
        (3000, 10_000, "warn", "random 4 KiB IOPS"),
        (520, 60_000, "warn", "SATA"),
        (120, 500, "fail", "copy the dataset"),
    ],
)
def test_speed_verdicts(tmp_path, seq, iops, status, words):
    result = ds.check_disk_speed(tmp_path, "cache", 13 * GIB, probe=lambda *a, **k: _speed(seq, iops))
    assert result.status == status
    assert words in result.fix
    assert result.evidence["model_load_s"] == pytest.approx(13 * GIB / (seq * 1e6))


def _storage_io() -> tuple[int, int]:
    """(read_bytes, write_bytes): what this process has had fetched from and sent to storage
    (/proc/self/io). Page-cache hits add nothing to read_bytes, so it tells a read that went past the
    cache from one that did not."""
    fields: dict[str, int] = {}
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = int(value)
    except (OSError, ValueError):
        pass
    if "read_bytes" not in fields or "write_bytes" not in fields:
        pytest.skip("this kernel keeps no per-process I/O accounting (/proc/self/io)")
    return fields["read_bytes"], fields["write_bytes"]


def _storage_io_or_none() -> tuple[int, int] | None:
    return _storage_io() if Path("/proc/self/io").is_file() else None


def _storage_read_bytes() -> int:
    return _storage_io()[0]


def _on_tmpfs(path: Path) -> bool:
    """Whether path lies on a memory filesystem, where there is no page cache to read past."""
    best, fstype = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        mount = fields[1]
        inside = str(path).startswith(mount.rstrip("/") + "/") or str(path) == mount
        if inside and len(mount) > len(best):
            best, fstype = mount, fields[2]
    return fstype in ("tmpfs", "ramfs")


def test_probe_reads_past_the_page_cache(tmp_path):
    """A file the probe has just written sits in the page cache; every byte the probe reads must still
    come from storage. Checked by the kernel's own accounting, not by timing, since a virtual disk's
    host-side cache can make a second pass faster with no page-cache read at all."""
    if _on_tmpfs(tmp_path):
        pytest.skip(f"{tmp_path} is on a memory filesystem")
    for _ in range(2):  # the second pass reads a file name the first had cached
        read_before, written_before = _storage_io()
        speed = ds.measure_read_speed(tmp_path, file_bytes=64 << 20, time_budget_s=2.0)
        read_after, written_after = _storage_io()
        if written_after - written_before < speed.file_bytes:  # the probe's fsync'ed file not counted
            pytest.skip("this filesystem's I/O does not reach the process's block accounting")
        fetched = read_after - read_before
        assert speed.method in ("O_DIRECT", "fadvise(DONTNEED)")
        assert speed.seq_bytes_read > 0 and speed.random_reads > 0
        asked = speed.seq_bytes_read + speed.random_reads * 4096
        # readahead may fetch a little more than was asked (fadvise path); never less
        assert fetched >= 0.99 * asked, f"{asked - fetched} of {asked} bytes came from the page cache"
    assert not list(tmp_path.iterdir()), "the probe leaves no file behind"


def test_the_accounting_sees_a_page_cache_read(tmp_path):
    """The check above can fail: a plain read of a file just written fetches nothing from storage."""
    if _on_tmpfs(tmp_path):
        pytest.skip(f"{tmp_path} is on a memory filesystem")
    path = tmp_path / "cached.bin"
    path.write_bytes(os.urandom(8 << 20))
    before = _storage_read_bytes()
    assert len(path.read_bytes()) == 8 << 20
    assert _storage_read_bytes() - before < 1 << 20


def test_fadvise_fallback_when_o_direct_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(ds, "_open_direct", lambda path: None)
    before = _storage_io_or_none()
    speed = ds.measure_read_speed(tmp_path, file_bytes=8 << 20, time_budget_s=0.5)
    after = _storage_io_or_none()
    assert speed.method == "fadvise(DONTNEED)"
    assert speed.seq_bytes_read == 8 << 20
    if before and after and after[1] - before[1] >= speed.file_bytes and not _on_tmpfs(tmp_path):
        assert after[0] - before[0] >= speed.seq_bytes_read  # the dropped cache sends reads to storage


def test_probe_is_bounded_in_time(tmp_path):
    speed = ds.measure_read_speed(tmp_path, file_bytes=16 << 20, time_budget_s=0.3, block_bytes=4096)
    assert speed.seconds < 3


def test_unwritable_directory_is_a_skip(tmp_path):
    def refuse(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    result = ds.check_disk_speed(tmp_path, "cache", probe=refuse)
    assert result.status == "skip" and "writable" in result.fix
