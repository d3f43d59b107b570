"""The whole preflight: GPU (NVML + the torch probe subprocess), host, disk and network.

Host, disk and network checks run concurrently with the probe; results reach `on_result`
as they finish, so a screen or `--no-ui` fills in live. No torch in this process: the
probe (`train_backend.probe`) measures what needs it and answers over the channel.
"""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Callable

from cockpit import __version__, checks_gpu, preflight
from cockpit.checks import CheckResult
from cockpit.probe_client import run_probe
from cockpit.telemetry import PynvmlSource

PROBE_TIMEOUT_S = {True: 90.0, False: 240.0}  # quick, full: the probe's torch import alone takes seconds


def run_preflight(
    quick: bool,
    on_result: Callable[[CheckResult], None] | None = None,
    model_bytes: int | None = None,
    multi: bool = False,
) -> tuple[list[CheckResult], dict]:
    started = time.time()
    lock = threading.Lock()

    def emit(result: CheckResult) -> None:
        if on_result is not None:
            with lock:
                on_result(result)

    state = checks_gpu.read_nvml(PynvmlSource())
    vram = [g.get("mem_total_bytes") for g in state.gpus if g.get("mem_total_bytes")]
    gpu_results: list[CheckResult] = []
    probe_meta: dict = {}

    def gpu_side() -> None:
        if state.error:
            answer = run_probe(
                quick=True, timeout_s=PROBE_TIMEOUT_S[True]
            )  # versions, and whether torch sees one
        else:
            answer = run_probe(
                quick=quick,
                timeout_s=PROBE_TIMEOUT_S[quick],
                multi=multi,
                sample=lambda: checks_gpu.sample_load(PynvmlSource()),
            )
        packages = (answer.findings.get("packages") or {}).get("packages") or {}
        probe_meta.update({name: info.get("version") for name, info in packages.items()})
        for result in checks_gpu.gpu_checks(
            state, answer.findings, load=answer.samples, answer_problem=answer.problem()
        ):
            gpu_results.append(result)
            emit(result)

    gpu_thread = threading.Thread(target=gpu_side, name="preflight-gpu", daemon=True)
    gpu_thread.start()
    plan = preflight.plan(
        quick,
        vram_bytes=max(vram) if vram else None,
        model_bytes=model_bytes,
        gpu_count=max(1, len(state.gpus)),
    )
    other = preflight.run_checks(plan, on_result=emit)
    gpu_thread.join(PROBE_TIMEOUT_S[quick] + 30)
    meta = {
        "cockpit": __version__,
        "python": platform.python_version(),
        "quick": quick,
        "driver": state.driver_version,
        "packages": probe_meta,
        "duration_s": round(time.time() - started, 2),
    }
    return gpu_results + other, meta


def result_line(result: CheckResult) -> str:
    mark = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "skip"}[result.status]
    text = f"[{mark}] {result.title}: {result.value}".rstrip(": ")
    if result.threshold:
        text += f"  (expected {result.threshold})"
    if result.fix and result.status in ("warn", "fail"):
        text += f"\n       fix: {result.fix}"
    return text
