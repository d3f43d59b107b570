"""Disk preflight checks: what the model cache and run directories sit on, free space, read speed.

The speed probe reads a temporary file past the page cache (O_DIRECT with page-aligned
mmap buffers, else fsync + posix_fadvise(DONTNEED)), so a file it just wrote does not
report memory speed. Device facts come from /proc and /sys under an injectable root.
"""

from __future__ import annotations

import errno
import mmap
import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from cockpit.checks import CheckResult
from cockpit.fmt import duration, gib

NVME_SEQ_MB_PER_S = 1500.0
NVME_IOPS = 50_000.0
SLOW_SEQ_MB_PER_S = 200.0  # below this: HDD or network storage
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "lustre", "glusterfs", "beegfs", "gpfs")
OVERLAY_FS = ("overlay", "aufs")
MEMORY_FS = ("tmpfs", "ramfs")
ALIGN = 4096


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # nvme | ssd | hdd | virtual | network | overlay | memory | unknown
    fstype: str
    mount_point: str
    source: str
    devices: tuple[str, ...]  # block devices under it (dm/md resolved to their slaves)


def existing_dir(path: Path) -> Path:
    """The path or its nearest existing ancestor (HF_HOME may not exist yet)."""
    path = Path(path).expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _mount_for(path: Path, root: Path) -> tuple[str, str, str, str] | None:
    """(mount_point, major:minor, fstype, source) of the longest mount containing path."""
    try:
        lines = (root / "proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    best = None
    target = str(path)
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        mount_point = fields[4].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and (best is None or len(mount_point) >= len(best[0])):
            best = (mount_point, fields[2], tail[0], tail[1])
    return best


def _disk_name(dev: str, sys_root: Path) -> str:
    """Partition -> its whole disk (nvme0n1p2 -> nvme0n1, sda1 -> sda)."""
    node = sys_root / "class/block" / dev
    if (node / "partition").exists():
        try:
            return node.resolve().parent.name
        except OSError:
            pass
    if (sys_root / "block" / dev).exists():
        return dev
    if dev.startswith(("nvme", "mmcblk")):
        return dev.rsplit("p", 1)[0] if "p" in dev[4:] else dev
    if dev.startswith(("sd", "vd", "xvd", "hd")):
        return dev.rstrip("0123456789") or dev
    return dev


def _leaf_disks(dev: str, sys_root: Path, depth: int = 0) -> list[str]:
    disk = _disk_name(dev, sys_root)
    slaves = sys_root / "block" / disk / "slaves"
    if depth < 8 and slaves.is_dir():
        found = [leaf for s in sorted(os.listdir(slaves)) for leaf in _leaf_disks(s, sys_root, depth + 1)]
        if found:
            return found
    return [disk]


def _kind_of_disk(disk: str, sys_root: Path) -> str:
    if disk.startswith("nvme"):
        return "nvme"
    rotational = None
    try:
        rotational = (sys_root / "block" / disk / "queue/rotational").read_text().strip()
    except OSError:
        pass
    if disk.startswith(("vd", "xvd")):
        # virtio/xen disks report rotational=1 whatever backs them: only a speed probe can tell
        return "virtual"
    if rotational == "1":
        return "hdd"
    if rotational == "0" or disk.startswith("sd"):
        return "ssd"
    return "unknown"


def classify_path(path: Path, proc_root: Path = Path("/"), sys_root: Path = Path("/sys")) -> DeviceInfo:
    # realpath follows symlinks and keeps parts that do not exist yet (mounts match by prefix)
    here = Path(os.path.realpath(Path(path).expanduser()))
    mount = _mount_for(here, proc_root)
    if mount is None:
        return DeviceInfo("unknown", "", "", "", ())
    mount_point, majmin, fstype, source = mount
    if fstype in NETWORK_FS or fstype.startswith("fuse"):
        return DeviceInfo("network", fstype, mount_point, source, ())
    if fstype in OVERLAY_FS:
        return DeviceInfo("overlay", fstype, mount_point, source, ())
    if fstype in MEMORY_FS:
        return DeviceInfo("memory", fstype, mount_point, source, ())
    dev = ""
    link = sys_root / "dev/block" / majmin
    if link.exists():
        try:
            dev = link.resolve().name
        except OSError:
            dev = ""
    if not dev and source.startswith("/dev/"):
        dev = Path(source).name
    if not dev:
        return DeviceInfo("unknown", fstype, mount_point, source, ())
    disks = tuple(_leaf_disks(dev, sys_root))
    kinds = {_kind_of_disk(d, sys_root) for d in disks}
    # a RAID/LVM volume is as slow as its slowest member
    order = ("hdd", "unknown", "virtual", "ssd", "nvme")
    kind = next(k for k in order if k in kinds)
    return DeviceInfo(kind, fstype, mount_point, source, disks)


def check_disk_type(
    path: Path, label: str, proc_root: Path = Path("/"), sys_root: Path = Path("/sys")
) -> CheckResult:
    started = time.monotonic()
    info = classify_path(path, proc_root, sys_root)
    status = {"nvme": "pass", "memory": "pass", "hdd": "fail"}.get(info.kind, "warn")
    fixes = {
        "hdd": f"{label} is on a spinning disk: point it at the local NVMe mount (for the model cache: "
        "export HF_HOME=/path/on/nvme).",
        "network": f"{label} is on network storage ({info.fstype}): copy the model and dataset to local "
        "disk (export HF_HOME=/local/nvme/hf) before training.",
        "overlay": f"{label} is on the container's overlay filesystem: use a mounted local volume "
        "(export HF_HOME=/mnt/...) for the cache; the full preflight measures its speed.",
    }
    fix = fixes.get(info.kind, "")
    if status == "warn" and not fix:
        fix = f"{label} is on a {info.kind} device, not NVMe: run the full preflight to measure its speed."
    return CheckResult(
        id=f"disk.type.{label}",
        group="disk",
        title=f"Storage under the {label} directory",
        status=status,
        value=f"{info.kind} ({info.fstype or '?'} on {', '.join(info.devices) or info.source or '?'})",
        threshold="local NVMe",
        fix=fix,
        evidence=asdict(info) | {"path": str(path), "devices": list(info.devices)},
        duration_s=time.monotonic() - started,
    )


def check_free_space(
    path: Path,
    label: str,
    model_bytes: int | None = None,
    checkpoint_bytes: int | None = None,
    disk_usage: Callable[[str], tuple] = shutil.disk_usage,
) -> CheckResult:
    started = time.monotonic()
    here = existing_dir(path)
    usage = disk_usage(str(here))
    free = usage[2]
    need = (model_bytes or 0) + (checkpoint_bytes or 0)
    if need:
        status = "fail" if free < need else ("warn" if free < 1.5 * need else "pass")
        threshold = f">= {gib(need, 1)} (model + checkpoints), 50% spare to pass"
    else:
        status = "warn" if free < 10 * 2**30 else "pass"
        threshold = ">= 10 GiB (no planned size given)"
    return CheckResult(
        id=f"disk.free.{label}",
        group="disk",
        title=f"Free space for the {label} directory",
        status=status,
        value=f"{gib(free, 1)} free of {gib(usage[0], 0)}",
        threshold=threshold,
        fix=""
        if status == "pass"
        else f"Free space under {here} or point {label} at a larger volume: a checkpoint save that hits "
        "a full disk loses the run.",
        evidence={
            "path": str(path),
            "measured_at": str(here),
            "free_bytes": free,
            "total_bytes": usage[0],
            "model_bytes": model_bytes,
            "checkpoint_bytes": checkpoint_bytes,
        },
        duration_s=time.monotonic() - started,
    )


# ---------------------------------------------------------------- read speed probe


@dataclass(frozen=True)
class ReadSpeed:
    seq_mb_per_s: float
    iops: float
    method: str  # "O_DIRECT" or "fadvise(DONTNEED)"
    file_bytes: int
    seq_bytes_read: int
    random_reads: int
    seconds: float
    truncated: bool  # stopped by the time budget before the whole file was read


def _write_test_file(fd: int, size: int) -> None:
    chunk = 4 << 20
    written = 0
    while written < size:
        n = min(chunk, size - written)
        os.write(fd, os.urandom(n))
        written += n
    os.fsync(fd)


def _open_direct(path: str) -> int | None:
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return None
        raise
    buf = mmap.mmap(-1, ALIGN)
    try:
        os.preadv(fd, [buf], 0)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return None
        raise
    finally:
        buf.close()
    return fd


def _drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _open_reader(path: str, direct: bool) -> int:
    return os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))


def measure_read_speed(
    directory: Path,
    file_bytes: int = 256 << 20,
    time_budget_s: float = 10.0,
    block_bytes: int = 1 << 20,
    random_jobs: int = 8,
) -> ReadSpeed:
    """Sequential MB/s (1 MiB reads) and 4 KiB random-read IOPS (random_jobs threads at queue depth 1,
    like fio's psync with numjobs) on a fresh file in directory, bounded by time_budget_s."""
    file_bytes = max(ALIGN, file_bytes // ALIGN * ALIGN)
    started = time.monotonic()
    deadline = started + time_budget_s
    fd_w, path = tempfile.mkstemp(prefix=".cockpit-readprobe-", dir=str(existing_dir(directory)))
    try:
        try:
            _write_test_file(fd_w, file_bytes)
        finally:
            os.close(fd_w)
        probe_fd = _open_direct(path)
        direct = probe_fd is not None
        if direct:
            os.close(probe_fd)
        method = "O_DIRECT" if direct else "fadvise(DONTNEED)"

        # sequential pass: at most ~60% of the budget left after writing
        if not direct:
            _drop_cache(path)
        seq_deadline = time.monotonic() + max(0.2, (deadline - time.monotonic()) * 0.6)
        fd = _open_reader(path, direct)
        buf = mmap.mmap(-1, block_bytes)
        seq_bytes, offset = 0, 0
        seq_started = time.monotonic()
        try:
            while offset < file_bytes and time.monotonic() < seq_deadline:
                n = os.preadv(fd, [buf], offset)
                if n <= 0:
                    break
                seq_bytes += n
                offset += n
        finally:
            buf.close()
            os.close(fd)
        seq_s = max(time.monotonic() - seq_started, 1e-9)
        truncated = offset < file_bytes

        # random pass: readahead off and cache dropped, so 4 KiB reads go to the device
        if not direct:
            _drop_cache(path)
        rand_deadline = max(time.monotonic() + 0.2, deadline)
        counts = [0] * random_jobs
        blocks = file_bytes // ALIGN

        def job(index: int) -> None:
            rng = random.Random(index)
            jfd = _open_reader(path, direct)
            jbuf = mmap.mmap(-1, ALIGN)
            try:
                if not direct:
                    os.posix_fadvise(jfd, 0, 0, os.POSIX_FADV_RANDOM)
                n = 0
                while True:
                    for _ in range(64):
                        os.preadv(jfd, [jbuf], rng.randrange(blocks) * ALIGN)
                    n += 64
                    if time.monotonic() >= rand_deadline:
                        break
                counts[index] = n
            finally:
                jbuf.close()
                os.close(jfd)

        rand_started = time.monotonic()
        threads = [threading.Thread(target=job, args=(i,), daemon=True) for i in range(random_jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rand_s = max(time.monotonic() - rand_started, 1e-9)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    return ReadSpeed(
        seq_mb_per_s=seq_bytes / seq_s / 1e6,
        iops=sum(counts) / rand_s,
        method=method,
        file_bytes=file_bytes,
        seq_bytes_read=seq_bytes,
        random_reads=sum(counts),
        seconds=time.monotonic() - started,
        truncated=truncated,
    )


def check_disk_speed(
    path: Path,
    label: str,
    model_bytes: int | None = None,
    file_bytes: int = 256 << 20,
    time_budget_s: float = 10.0,
    probe: Callable[..., ReadSpeed] = measure_read_speed,
) -> CheckResult:
    started = time.monotonic()
    common = {"id": f"disk.read_speed.{label}", "group": "disk", "title": f"Read speed of the {label} disk"}
    threshold = f"NVMe class: >= {NVME_SEQ_MB_PER_S:.0f} MB/s sequential and >= {NVME_IOPS / 1000:.0f}k IOPS"
    try:
        speed = probe(existing_dir(path), file_bytes=file_bytes, time_budget_s=time_budget_s)
    except OSError as exc:
        return CheckResult(
            **common,
            status="skip",
            value=f"could not write a test file: {exc.strerror or exc}",
            threshold=threshold,
            fix=f"Make {existing_dir(path)} writable, or check another directory.",
            evidence={"path": str(path), "error": str(exc)},
            duration_s=time.monotonic() - started,
        )
    seq, iops = speed.seq_mb_per_s, speed.iops
    load_s = model_bytes / (seq * 1e6) if model_bytes and seq > 0 else None
    load_text = f"; loading {gib(model_bytes, 0)} takes ~{duration(load_s)}" if load_s else ""
    if seq >= NVME_SEQ_MB_PER_S and iops >= NVME_IOPS:
        status, fix = "pass", ""
    elif seq >= NVME_SEQ_MB_PER_S:
        status = "warn"
        fix = (
            f"Fast sequential reads but only {iops / 1000:.1f}k random 4 KiB IOPS: shuffled reads of a large "
            "dataset may stall; pre-tokenise it or load it into RAM (few CPU cores also cap this figure)."
        )
    elif seq >= SLOW_SEQ_MB_PER_S:
        status = "warn"
        fix = (
            f"SATA-SSD-class reads ({seq:.0f} MB/s): loading a 13 GB model takes ~{13e3 / seq:.0f} s and "
            f"data loading may starve the GPU; use the local NVMe mount (export HF_HOME=/nvme/hf) and copy "
            "the dataset to local disk."
        )
    else:
        status = "fail"
        fix = (
            f"HDD/network-class reads ({seq:.0f} MB/s): loading a 13 GB model takes "
            f"~{duration(13e3 / max(seq, 1e-3))}; move the cache to local NVMe (export HF_HOME=/nvme/hf) "
            "and copy the dataset to local disk."
        )
    partial = " (partial: time budget reached)" if speed.truncated else ""
    return CheckResult(
        **common,
        status=status,
        value=f"{seq:.0f} MB/s sequential, {iops / 1000:.1f}k IOPS 4 KiB random{partial}{load_text}",
        threshold=threshold,
        fix=fix,
        evidence=asdict(speed) | {"path": str(path), "model_load_s": load_s},
        duration_s=time.monotonic() - started,
    )
