"""Disk preflight: how fast the model cache and run directories read.

The probe reads a temporary file past the page cache (O_DIRECT with page-aligned mmap buffers,
else fsync + posix_fadvise(DONTNEED)), so a file it just wrote does not report memory speed:
sequential MB/s in 1 MiB reads and 4 KiB random-read IOPS, bounded by a time budget.
"""

from __future__ import annotations

import errno
import mmap
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from cockpit.fmt import duration, gib
from cockpit.preflight.checks.base import CheckResult
from cockpit.preflight.checks.disk import existing_dir

NVME_SEQ_MB_PER_S = 1500.0
NVME_IOPS = 50_000.0
SLOW_SEQ_MB_PER_S = 200.0  # below this: HDD or network storage
ALIGN = 4096


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
        direct = _direct_reads(path)
        # the sequential pass takes at most ~60% of the budget left after writing
        if not direct:
            _drop_cache(path)
        seq_deadline = time.monotonic() + max(0.2, (deadline - time.monotonic()) * 0.6)
        seq_bytes, seq_s = _sequential_pass(path, direct, file_bytes, block_bytes, seq_deadline)
        # the random pass: readahead off and cache dropped, so 4 KiB reads go to the device
        if not direct:
            _drop_cache(path)
        rand_deadline = max(time.monotonic() + 0.2, deadline)
        random_reads, rand_s = _random_pass(path, direct, file_bytes, random_jobs, rand_deadline)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    return ReadSpeed(
        seq_mb_per_s=seq_bytes / seq_s / 1e6,
        iops=random_reads / rand_s,
        method="O_DIRECT" if direct else "fadvise(DONTNEED)",
        file_bytes=file_bytes,
        seq_bytes_read=seq_bytes,
        random_reads=random_reads,
        seconds=time.monotonic() - started,
        truncated=seq_bytes < file_bytes,
    )


def _direct_reads(path: str) -> bool:
    """Whether the file's filesystem takes O_DIRECT reads (else the page cache is dropped instead)."""
    probe_fd = _open_direct(path)
    if probe_fd is not None:
        os.close(probe_fd)
    return probe_fd is not None


def _sequential_pass(
    path: str, direct: bool, file_bytes: int, block_bytes: int, deadline: float
) -> tuple[int, float]:
    """The file read from the start in `block_bytes` reads until its end or `deadline`:
    (bytes read, seconds)."""
    fd = _open_reader(path, direct)
    buf = mmap.mmap(-1, block_bytes)
    seq_bytes, offset = 0, 0
    seq_started = time.monotonic()
    try:
        while offset < file_bytes and time.monotonic() < deadline:
            n = os.preadv(fd, [buf], offset)
            if n <= 0:
                break
            seq_bytes += n
            offset += n
    finally:
        buf.close()
        os.close(fd)
    return seq_bytes, max(time.monotonic() - seq_started, 1e-9)


def _random_pass(path: str, direct: bool, file_bytes: int, jobs: int, deadline: float) -> tuple[int, float]:
    """4 KiB reads at random offsets from `jobs` threads, each at queue depth 1, until `deadline`:
    (reads, seconds)."""
    counts = [0] * jobs
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
                if time.monotonic() >= deadline:
                    break
            counts[index] = n
        finally:
            jbuf.close()
            os.close(jfd)

    rand_started = time.monotonic()
    threads = [threading.Thread(target=job, args=(i,), daemon=True) for i in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), max(time.monotonic() - rand_started, 1e-9)


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
