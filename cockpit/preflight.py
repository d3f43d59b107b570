"""The preflight runner: plan the checks, run them side by side with timeouts, build the report.

The CLI and the screen share it: `plan(...)` picks the checks, `run_checks(...)` runs them
in daemon threads and hands each result to `on_result` (in the caller's thread) as it
finishes, `report(...)` makes the JSON-able record. A check that hangs becomes a
"timed out" result; the runner never waits on it.
"""

from __future__ import annotations

import datetime as dt
import os
import queue
import socket
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from cockpit import checks_disk, checks_host, checks_network, paths
from cockpit.checks import STATUSES, CheckResult, exit_code


@dataclass(frozen=True)
class Check:
    id: str
    run: Callable[[], CheckResult]
    group: str = ""
    title: str = ""
    timeout_s: float | None = None  # None: the runner's default


CheckLike = Check | tuple[str, Callable[[], CheckResult]] | Callable[[], CheckResult]


def _as_check(item: CheckLike, index: int) -> Check:
    if isinstance(item, Check):
        return item
    if isinstance(item, tuple):
        check_id, fn = item
        return Check(check_id, fn, group=check_id.split(".", 1)[0])
    name = getattr(item, "check_id", None) or getattr(item, "__name__", None) or f"check.{index}"
    return Check(name, item, group=name.split(".", 1)[0])


def _problem(check: Check, value: str, evidence: dict, seconds: float) -> CheckResult:
    return CheckResult(
        id=check.id,
        group=check.group or "host",
        title=check.title or check.id,
        status="warn",
        value=value,
        fix="Run this check again; if it repeats, report it with the evidence.",
        evidence=evidence,
        duration_s=seconds,
    )


def run_checks(
    checks: Sequence[CheckLike],
    concurrency: int = 4,
    timeout_s: float = 60.0,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Run checks at most `concurrency` at a time; results in plan order, on_result in finish order."""
    planned = [_as_check(item, i) for i, item in enumerate(checks)]
    finished: queue.Queue = queue.Queue()
    results: dict[int, CheckResult] = {}
    running: dict[int, float] = {}  # index -> start time
    pending = list(range(len(planned)))

    def work(index: int) -> None:
        started = time.monotonic()
        try:
            result = planned[index].run()
            if not isinstance(result, CheckResult):
                raise TypeError(f"returned {type(result).__name__}, not CheckResult")
        except Exception as exc:
            result = _problem(
                planned[index],
                f"check crashed: {type(exc).__name__}: {exc}",
                {"traceback": traceback.format_exc(limit=8)},
                time.monotonic() - started,
            )
        finished.put((index, result))

    def deliver(index: int, result: CheckResult) -> None:
        results[index] = result
        running.pop(index, None)
        if on_result is not None:
            on_result(result)

    while pending or running:
        while pending and len(running) < max(1, concurrency):
            index = pending.pop(0)
            running[index] = time.monotonic()
            threading.Thread(
                target=work, args=(index,), daemon=True, name=f"check-{planned[index].id}"
            ).start()
        now = time.monotonic()
        limits = {i: planned[i].timeout_s or timeout_s for i in running}
        next_deadline = min(running[i] + limits[i] for i in running)
        try:
            index, result = finished.get(timeout=max(0.0, next_deadline - now))
            if index in running:  # a late answer from a timed-out check is dropped
                deliver(index, result)
        except queue.Empty:
            pass
        now = time.monotonic()
        for index in [i for i in running if now >= running[i] + limits[i]]:
            limit = limits[index]
            deliver(
                index,
                _problem(
                    planned[index], f"timed out after {limit:g} s", {"timeout_s": limit}, now - running[index]
                ),
            )
    return [results[i] for i in range(len(planned))]


def report(results: Sequence[CheckResult], meta: Mapping | None = None) -> dict:
    """A JSON-able record of one preflight: when, where, with what versions, what was found."""
    return {
        "kind": "preflight",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "meta": dict(meta or {}),
        "exit_code": exit_code(list(results)),
        "summary": {status: sum(r.status == status for r in results) for status in STATUSES},
        "results": [r.to_dict() for r in results],
    }


def default_paths() -> dict[str, Path]:
    """The model cache (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub) and the runs root."""
    if os.environ.get("HF_HUB_CACHE"):
        cache = Path(os.environ["HF_HUB_CACHE"])
    else:
        cache = Path(os.environ.get("HF_HOME") or "~/.cache/huggingface") / "hub"
    return {"cache": cache.expanduser(), "runs": paths.runs_root()}


def _device_id(path: Path) -> int | None:
    try:
        return os.stat(checks_disk.existing_dir(path)).st_dev
    except OSError:
        return None


def plan(
    quick: bool,
    paths: Mapping[str, Path] | Sequence[Path] | None = None,
    vram_bytes: int | None = None,
    model_bytes: int | None = None,
    endpoint: str | None = None,
    gpu_count: int = 1,
    checkpoint_bytes: int | None = None,
    probe_file_bytes: int = 256 << 20,
    probe_time_s: float = 10.0,
    download_path: str = checks_network.DEFAULT_PROBE_PATH,
    download_bytes: int = 64 << 20,
    download_time_s: float = 10.0,
) -> list[Check]:
    """Host, disk and network checks; quick leaves out the disk speed probe and the download."""
    if paths is None:
        paths = default_paths()
    if not isinstance(paths, Mapping):
        paths = {Path(p).name or f"path{i}": Path(p) for i, p in enumerate(paths)}
    facts = partial(checks_host.memory_facts)
    out = [
        Check("host.cpu", partial(checks_host.check_cpu, gpu_count), "host", "CPU cores"),
        Check(
            "host.ram_vram", lambda: checks_host.check_ram_vs_vram(vram_bytes, facts()), "host", "RAM vs VRAM"
        ),
        Check("host.ram_model", lambda: checks_host.check_ram_for_model(model_bytes, facts()), "host", "RAM"),
        Check("host.swap", lambda: checks_host.check_swap(facts(), vram_bytes, model_bytes), "host", "Swap"),
    ]
    probed_devices: set[int] = set()
    for label, path in paths.items():
        path = Path(path)
        # the model lands in the cache; checkpoints in the runs directory
        is_cache = label == "cache"
        out.append(Check(f"disk.type.{label}", partial(checks_disk.check_disk_type, path, label), "disk"))
        out.append(
            Check(
                f"disk.free.{label}",
                partial(
                    checks_disk.check_free_space,
                    path,
                    label,
                    model_bytes if is_cache else None,
                    None if is_cache else checkpoint_bytes,
                ),
                "disk",
            )
        )
        device = _device_id(path)
        if not quick and (device is None or device not in probed_devices):
            probed_devices.add(device)
            out.append(
                Check(
                    f"disk.read_speed.{label}",
                    partial(
                        checks_disk.check_disk_speed,
                        path,
                        label,
                        model_bytes,
                        file_bytes=probe_file_bytes,
                        time_budget_s=probe_time_s,
                    ),
                    "disk",
                    timeout_s=probe_time_s * 3 + 30,
                )
            )
    out.append(Check("network.hub", partial(checks_network.check_hub_reach, endpoint), "network", "Hub"))
    if not quick:
        out.append(
            Check(
                "network.download",
                partial(
                    checks_network.check_download,
                    endpoint,
                    download_path,
                    model_bytes,
                    max_bytes=download_bytes,
                    time_budget_s=download_time_s,
                ),
                "network",
                timeout_s=download_time_s + 20,
            )
        )
    return out
