"""The whole preflight: GPU (NVML + the torch probe subprocess), host, disk and network.

Host, disk and network checks run concurrently with the probe; results reach the callbacks
as they finish, so the screen or `--no-ui` fills in live. No torch in this process: the
probe (`train_backend.probe`) measures what needs it and answers over the channel.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from typing import Any

from cockpit import __version__
from cockpit.preflight import runner as preflight
from cockpit.preflight.checks import gpu as checks_gpu
from cockpit.preflight.checks.base import CheckResult, UnsizedModel
from cockpit.preflight.probe_client import run_probe
from cockpit.telemetry import nvml_state
from cockpit.telemetry.nvml import NvmlSource, PynvmlSource

PROBE_TIMEOUT_S = {True: 90.0, False: 240.0}  # quick, full: the probe's torch import alone takes seconds


def full_preflight(
    quick: bool,
    model_bytes: int | None = None,
    multi: bool = False,
    nvml_source: Callable[[], NvmlSource] = PynvmlSource,
    unsized_model: UnsizedModel | None = None,
    model_name: str | None = None,
) -> preflight.Preflight:
    """The whole preflight as a `Preflight`: each plan reads NVML afresh, then the GPU side (one
    check answering every GPU, performance and software result from the probe) runs beside the
    host, disk and network checks. `model_name`: the planned model (`--model`), whose weights
    need room in the hub's cache, in cockpit's (synthetic) or nowhere (a local folder);
    `unsized_model`: a model named whose size could not be read."""
    found: dict[str, Any] = {"driver": None, "packages": {}}

    def build() -> list[preflight.Check]:
        state = nvml_state.read_nvml(nvml_source())
        found["driver"] = state.driver_version
        vram = [g["memory"]["total_bytes"] for g in state.gpus if (g.get("memory") or {}).get("total_bytes")]

        def gpu_side() -> list[CheckResult]:
            if state.error:  # versions, and whether torch sees a GPU NVML does not
                answer = run_probe(quick=True, timeout_s=PROBE_TIMEOUT_S[True])
            else:
                answer = run_probe(
                    quick=quick,
                    timeout_s=PROBE_TIMEOUT_S[quick],
                    multi=multi,
                    sample=lambda: nvml_state.sample_load(nvml_source()),
                )
            packages = (answer.findings.get("packages") or {}).get("packages") or {}
            found["packages"] = {name: info.get("version") for name, info in packages.items()}
            return checks_gpu.gpu_checks(
                state, answer.findings, load=answer.samples, answer_problem=answer.problem()
            )

        gpu = preflight.Check(
            "gpu", gpu_side, "gpu", "GPU probe (NVML + torch)", timeout_s=PROBE_TIMEOUT_S[quick] + 30
        )
        dirs, in_cache = None, True
        if model_name:
            from cockpit.preflight.quick import model_storage

            cache, in_cache = model_storage(model_name)
            dirs = {**preflight.default_paths(), "cache": cache}
        rest = preflight.plan(
            quick,
            dirs,
            model_in_cache=in_cache,
            vram_bytes=max(vram) if vram else None,
            model_bytes=model_bytes,
            gpu_count=max(1, len(state.gpus)),
            unsized_model=unsized_model,
        )
        return [gpu, *rest]

    def meta() -> dict[str, Any]:
        return {
            "cockpit": __version__,
            "python": platform.python_version(),
            "quick": quick,
            "driver": found["driver"],
            "packages": dict(found["packages"]),
        }

    # the GPU probe holds one slot for its whole run: the other checks still get four
    return preflight.Preflight(build, concurrency=5, meta=meta)


def run_preflight(
    quick: bool,
    on_result: Callable[[CheckResult], None] | None = None,
    model_bytes: int | None = None,
    multi: bool = False,
    unsized_model: UnsizedModel | None = None,
    model_name: str | None = None,
) -> tuple[list[CheckResult], dict[str, Any]]:
    started = time.time()
    session = full_preflight(quick, model_bytes, multi, unsized_model=unsized_model, model_name=model_name)
    results = session.run(on_result=on_result)
    return results, {**session.meta(), "duration_s": round(time.time() - started, 2)}
