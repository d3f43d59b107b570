"""Disk preflight checks: what the model cache and run directories sit on, and their free space.

Device facts come from /proc and /sys under an injectable root. The read-speed probe is in
`cockpit.preflight.checks.disk_speed`.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from cockpit.fmt import gib
from cockpit.preflight.checks.base import CheckResult, UnsizedModel

NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "lustre", "glusterfs", "beegfs", "gpfs")
OVERLAY_FS = ("overlay", "aufs")
MEMORY_FS = ("tmpfs", "ramfs")


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
    disk_usage: Callable[[str], tuple[int, int, int]] = shutil.disk_usage,
    unsized: UnsizedModel | None = None,
) -> CheckResult:
    """`unsized`: the model this directory would hold has no known size; the floor is judged, and
    the threshold says the model's room is not."""
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
        threshold = ">= 10 GiB" + ("" if unsized else " (no planned size given)")
    unjudged = unsized if unsized is not None and not model_bytes else None
    if unjudged is not None:
        threshold += f"; room for {unjudged.name} not judged: its size is unknown"
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
        }
        | ({"model": unjudged.name, "model_unknown": unjudged.cause} if unjudged is not None else {}),
        duration_s=time.monotonic() - started,
    )
