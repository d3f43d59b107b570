"""The preflight runner: plan the checks, run them side by side with timeouts, build the report.

The CLI and the screen share it: `plan(...)` picks the checks, `run_checks(...)` runs them
in daemon threads and hands each result to `on_result` (and each finished check to
`on_check`, in the caller's thread) as it finishes, `report(...)` makes the JSON-able
record. A check that hangs becomes a "timed out" result; the runner never waits on it.
A check may answer several results (the GPU probe answers every GPU check at once).
`Preflight` is a plan that runs whole and then check by check: what the screen drives.
"""

from __future__ import annotations

import dataclasses
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
from typing import Any

from cockpit import paths
from cockpit.preflight.checks import cloud as checks_cloud
from cockpit.preflight.checks import disk as checks_disk
from cockpit.preflight.checks import disk_speed as checks_disk_speed
from cockpit.preflight.checks import host as checks_host
from cockpit.preflight.checks import network as checks_network
from cockpit.preflight.checks.base import STATUSES, CheckResult, UnsizedModel, exit_code


@dataclass(frozen=True)
class Check:
    id: str
    run: Callable[[], CheckResult | list[CheckResult]]  # one result, or one per GPU (_answers)
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


def _problem(check: Check, value: str, evidence: dict[str, Any], seconds: float) -> CheckResult:
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


def _answers(value: object) -> list[CheckResult]:
    """A check's return value as a list of results: one CheckResult, or a non-empty list of them."""
    if isinstance(value, CheckResult):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, CheckResult) for v in value):
        return list(value)
    raise TypeError(f"returned {type(value).__name__}, not a CheckResult or a list of them")


def _answer(check: Check) -> list[CheckResult]:
    """Run one check: its results, each with how long it took; a crash answers as a warning."""
    started = time.monotonic()
    try:
        answered = _answers(check.run())
        # a result that did not time itself took what its check took (the GPU rows: the probe)
        took_s = time.monotonic() - started
        return [r if r.duration_s else dataclasses.replace(r, duration_s=took_s) for r in answered]
    except Exception as exc:
        return [
            _problem(
                check,
                f"check crashed: {type(exc).__name__}: {exc}",
                {"traceback": traceback.format_exc(limit=8)},
                time.monotonic() - started,
            )
        ]


def run_checks(
    checks: Sequence[CheckLike],
    concurrency: int = 4,
    timeout_s: float = 60.0,
    on_result: Callable[[CheckResult], None] | None = None,
    on_check: Callable[[Check, list[CheckResult]], None] | None = None,
) -> list[CheckResult]:
    """Run checks at most `concurrency` at a time; results in plan order, callbacks in finish order.

    `on_result` gets every result, `on_check` every finished check with all its results.
    """
    planned = [_as_check(item, i) for i, item in enumerate(checks)]
    finished: queue.Queue[tuple[int, list[CheckResult]]] = queue.Queue()
    results: dict[int, list[CheckResult]] = {}
    running: dict[int, float] = {}  # index -> start time
    pending = list(range(len(planned)))

    def work(index: int) -> None:
        finished.put((index, _answer(planned[index])))

    def deliver(index: int, answered: list[CheckResult]) -> None:
        results[index] = answered
        running.pop(index, None)
        if on_result is not None:
            for result in answered:
                on_result(result)
        if on_check is not None:
            on_check(planned[index], answered)

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
            index, answered = finished.get(timeout=max(0.0, next_deadline - now))
            if index in running:  # a late answer from a timed-out check is dropped
                deliver(index, answered)
        except queue.Empty:
            pass
        now = time.monotonic()
        for index in [i for i in running if now >= running[i] + limits[i]]:
            limit = limits[index]
            deliver(
                index,
                [
                    _problem(
                        planned[index],
                        f"timed out after {limit:g} s",
                        {"timeout_s": limit},
                        now - running[index],
                    )
                ],
            )
    return [result for i in range(len(planned)) for result in results[i]]


class Preflight:
    """A plan that runs whole, then check by check (the preflight screen's data source).

    `build` makes the plan afresh for every whole run (what it depends on, such as the GPUs NVML
    lists, may have changed); `meta` says what the report records beside the results (versions,
    driver). Which check answered which result is remembered, so `rerun(result_id)` runs that
    check alone. Thread-safe: the screen runs a whole plan and single checks on worker threads.
    """

    def __init__(
        self,
        build: Callable[[], Sequence[CheckLike]] | Sequence[CheckLike],
        *,
        concurrency: int = 4,
        timeout_s: float = 60.0,
        meta: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._build = build if callable(build) else (lambda: list(build))
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self._meta = meta
        self._lock = threading.Lock()
        self._origin: dict[str, Check] = {}  # result id -> the check that answered it

    def plan(self) -> list[Check]:
        """A fresh plan (call it off the UI thread: building may read NVML)."""
        return [_as_check(item, i) for i, item in enumerate(self._build())]

    def run(
        self,
        checks: Sequence[Check] | None = None,
        on_result: Callable[[CheckResult], None] | None = None,
        on_check: Callable[[Check, list[CheckResult]], None] | None = None,
    ) -> list[CheckResult]:
        """Every check of `checks` (default: a fresh plan), as `run_checks` does."""
        checks = self.plan() if checks is None else list(checks)
        with self._lock:
            self._origin = {}

        def remember(check: Check, answered: list[CheckResult]) -> None:
            with self._lock:
                self._origin.update({result.id: check for result in answered})
            if on_check is not None:
                on_check(check, answered)

        return run_checks(checks, self.concurrency, self.timeout_s, on_result, remember)

    def check_of(self, result_id: str) -> Check | None:
        """The check whose last run answered `result_id`, None before it has run."""
        with self._lock:
            return self._origin.get(result_id)

    def rerun(
        self, result_id: str, on_check: Callable[[Check, list[CheckResult]], None] | None = None
    ) -> list[CheckResult]:
        """Run again only the check that answered `result_id`; all its new results.

        A check that answers several results (the GPU probe) answers them all again.
        """
        check = self.check_of(result_id)
        if check is None:
            raise KeyError(f"no check has answered {result_id!r} yet; run the whole plan first")
        with self._lock:  # the old answers of this check are forgotten: it may answer other ids now
            self._origin = {rid: c for rid, c in self._origin.items() if c is not check}

        def remember(done: Check, answered: list[CheckResult]) -> None:
            with self._lock:
                self._origin.update({result.id: done for result in answered})
            if on_check is not None:
                on_check(done, answered)

        return run_checks([check], 1, self.timeout_s, on_check=remember)

    def meta(self) -> dict[str, Any]:
        return dict(self._meta()) if self._meta is not None else {}


def report(
    results: Sequence[CheckResult], meta: Mapping[str, Any] | None = None, now: dt.datetime | None = None
) -> dict[str, Any]:
    """A JSON-able record of one preflight: when, where, with what versions, what was found."""
    return {
        "kind": "preflight",
        "date": (now or dt.datetime.now(dt.timezone.utc)).isoformat(timespec="seconds"),
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
    hub_timeout_s: float = checks_network.HUB_TIMEOUT_S,
    model_in_cache: bool = True,
    unsized_model: UnsizedModel | None = None,
) -> list[Check]:
    """Host, disk and network checks; quick leaves out the disk speed probe and the download.

    `hub_timeout_s` bounds each step of the hub check (DNS, connect, the HTTP answer);
    `model_in_cache` False: the model is a local folder, the cache needs no room for it;
    `unsized_model`: a model was named but not sized (its hub is offline): the checks it would
    size say so.
    """
    if paths is None:
        paths = default_paths()
    if not isinstance(paths, Mapping):
        paths = {Path(p).name or f"path{i}": Path(p) for i, p in enumerate(paths)}
    sizes = _Sizes(vram_bytes, model_bytes, checkpoint_bytes, model_in_cache, unsized_model)
    return [
        *_host_checks(sizes, gpu_count),
        *_disk_checks(sizes, paths, quick, probe_file_bytes, probe_time_s),
        *_network_checks(
            quick, endpoint, model_bytes, hub_timeout_s, download_path, download_bytes, download_time_s
        ),
    ]


@dataclass(frozen=True)
class _Sizes:
    """What the plan's checks judge the box against: the card, the model, a checkpoint."""

    vram_bytes: int | None
    model_bytes: int | None
    checkpoint_bytes: int | None
    model_in_cache: bool
    unsized_model: UnsizedModel | None


def _host_checks(sizes: _Sizes, gpu_count: int) -> list[Check]:
    facts = partial(checks_host.memory_facts)
    vram, model = sizes.vram_bytes, sizes.model_bytes
    return [
        Check("host.cpu", partial(checks_host.check_cpu, gpu_count), "host", "CPU cores"),
        Check("host.ram_vram", lambda: checks_host.check_ram_vs_vram(vram, facts()), "host", "RAM vs VRAM"),
        Check(
            "host.ram_model",
            lambda: checks_host.check_ram_for_model(model, facts(), sizes.unsized_model),
            "host",
            "RAM",
        ),
        Check("host.swap", lambda: checks_host.check_swap(facts(), vram, model), "host", "Swap"),
        Check("host.provider", checks_cloud.check_provider, "host", checks_cloud.TITLE),
    ]


def _disk_checks(
    sizes: _Sizes, paths: Mapping[str, Path], quick: bool, probe_file_bytes: int, probe_time_s: float
) -> list[Check]:
    """Type and free space of every path; the read speed of each device once (not when quick)."""
    out = []
    probed_devices: set[int | None] = set()
    for label, path in paths.items():
        path = Path(path)
        # the model lands in the cache; checkpoints in the runs directory
        is_cache = label == "cache"
        model_here = is_cache and sizes.model_in_cache
        out.append(Check(f"disk.type.{label}", partial(checks_disk.check_disk_type, path, label), "disk"))
        out.append(
            Check(
                f"disk.free.{label}",
                partial(
                    checks_disk.check_free_space,
                    path,
                    label,
                    sizes.model_bytes if model_here else None,
                    None if is_cache else sizes.checkpoint_bytes,
                    unsized=sizes.unsized_model if model_here else None,
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
                        checks_disk_speed.check_disk_speed,
                        path,
                        label,
                        sizes.model_bytes,
                        file_bytes=probe_file_bytes,
                        time_budget_s=probe_time_s,
                    ),
                    "disk",
                    timeout_s=probe_time_s * 3 + 30,
                )
            )
    return out


def _network_checks(
    quick: bool,
    endpoint: str | None,
    model_bytes: int | None,
    hub_timeout_s: float,
    download_path: str,
    download_bytes: int,
    download_time_s: float,
) -> list[Check]:
    """The hub's reach; its download speed (not when quick)."""
    hub = partial(
        checks_network.check_hub_reach,
        endpoint,
        connect_timeout_s=min(3.0, hub_timeout_s),
        total_timeout_s=hub_timeout_s,
    )
    out = [Check("network.hub", hub, "network", "Hub")]
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


def result_line(result: CheckResult) -> str:
    mark = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "skip"}[result.status]
    text = f"[{mark}] {result.title}: {result.value}".rstrip(": ")
    if result.threshold:
        text += f"  (expected {result.threshold})"
    if result.fix and result.status != "pass":  # a skip may say how to have it judged
        text += f"\n       fix: {result.fix}"
    return text
