"""Preflight checks of the GPU judged from the probe's answer (`ProbeAnswer.findings`, see
train_backend/probe.py): torch's CUDA against the driver, kernels for the card, cuDNN, real bf16,
bitsandbytes 4-bit, and whether the probe ran at all. Also the result builder every GPU,
performance and software check uses. Tables cite shared/reference/gpus.md.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from cockpit.preflight.checks.base import CheckResult
from cockpit.telemetry.nvml_state import NvmlState

# torch's CUDA -> the oldest Linux driver that runs it fully (shared/reference/gpus.md)
CUDA_DRIVER_FLOORS = {
    "11.8": "520.61.05", "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03",
    "12.3": "545.23.06", "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03",
    "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06", "13.1": "590.44.01", "13.2": "595.45.04",
}  # fmt: skip
# minor-version compatibility: any 12.x (13.x) runs, with limits, on the major's base driver
MAJOR_BASE_FLOORS = {"12": "525.60.13", "13": "580.65.06"}


def parse_version(text: str | None) -> tuple[int, ...]:
    """'2.11.0+cu130' -> (2, 11, 0); '0.18.0rc1' -> (0, 18, 0)."""
    return tuple(int(p) for p in re.findall(r"\d+", (text or "").split("+")[0].split("rc")[0])[:4])


def make_result(
    cid: str,
    group: str,
    title: str,
    status: str,
    value: str = "",
    threshold: str = "",
    fix: str = "",
    **evidence: Any,
) -> CheckResult:
    """A check's verdict; a pass carries no fix."""
    return CheckResult(cid, group, title, status, value, threshold, "" if status == "pass" else fix, evidence)


def check_cuda_driver(state: NvmlState, probe: dict[str, Any]) -> CheckResult:
    result = partial(make_result, "gpu.cuda_driver", "gpu", "Driver runs torch's CUDA")
    torch_cuda = (probe.get("torch") or {}).get("cuda")
    if "torch" not in probe or not state.driver_version:
        return result("skip", "no probe answer or no driver version")
    if torch_cuda is None:
        return result(
            "fail",
            f"torch {probe['torch'].get('version')} is a CPU-only build",
            "a CUDA build of torch",
            "install a CUDA wheel of torch (pip install torch "
            "--index-url https://download.pytorch.org/whl/cu128, or the cu1XX the driver allows)",
        )
    driver = parse_version(state.driver_version)
    floor = CUDA_DRIVER_FLOORS.get(torch_cuda)
    base = MAJOR_BASE_FLOORS.get(torch_cuda.split(".")[0])
    value = f"torch CUDA {torch_cuda}, driver {state.driver_version}"
    evidence = {
        "torch_cuda": torch_cuda,
        "driver": state.driver_version,
        "floor": floor,
        "cuda_driver_version": state.cuda_driver_version,
    }
    fix = f"install driver >= {floor or base} or a torch wheel built for an older CUDA"
    if floor and driver >= parse_version(floor):
        return result("pass", value, f"driver >= {floor}", **evidence)
    if base and driver >= parse_version(base):
        return result(
            "warn",
            value + " (minor-version compatibility)",
            f"driver >= {floor or '?'} for full support",
            fix + "; until then PTX JIT can fail",
            **evidence,
        )
    return result(
        "fail",
        value,
        f"driver >= {floor or base}",
        f"torch needs a newer driver: {fix}",
        **evidence,
    )


def check_arch(probe: dict[str, Any]) -> CheckResult:
    result = partial(make_result, "gpu.arch", "gpu", "torch has kernels for this GPU")
    arch, devices = (probe.get("torch") or {}).get("arch_list") or [], probe.get("devices") or []
    if not devices:
        return result("skip", "the probe saw no device")
    missing: list[str] = []
    ptx_only: list[str] = []
    for dev in devices:
        major, minor = dev["capability"]
        if f"sm_{major}{minor}" in arch:
            continue
        ptx = [a for a in arch if a.startswith("compute_") and int(a[8:]) <= major * 10 + minor]
        (ptx_only if ptx else missing).append(f"sm_{major}{minor}")
    needed = sorted({"sm_{}{}".format(*d["capability"]) for d in devices})
    value = f"needs {', '.join(needed)}"
    ev: dict[str, Any] = {"arch_list": arch}
    if missing:
        return result(
            "fail",
            f"{value}; torch has {', '.join(arch) or 'none'}",
            "the device's sm_XY in torch.cuda.get_arch_list()",
            f'this torch has no {", ".join(missing)} kernels ("no kernel image is available"): '
            "install a torch wheel whose CUDA supports this GPU",
            **ev,
        )
    if ptx_only:
        return result(
            "warn",
            f"{value}; only PTX",
            "native sm_XY kernels",
            "kernels are JIT-compiled from PTX (slow first start); prefer a wheel with native "
            f"{', '.join(ptx_only)}",
            **ev,
        )
    return result("pass", value, "sm_XY in torch's arch list", **ev)


def check_cudnn(probe: dict[str, Any]) -> CheckResult:
    result = partial(make_result, "gpu.cudnn", "gpu", "cuDNN present")
    torch_info = probe.get("torch")
    if not torch_info or not torch_info.get("cuda_available"):
        return result("skip", "torch sees no GPU")
    version = torch_info.get("cudnn")
    status = "pass" if version else "warn"
    return result(
        status,
        f"cuDNN {version or 'missing'}",
        "cuDNN loads",
        "reinstall torch with its nvidia-cudnn wheel",
    )


def check_bf16(probe: dict[str, Any]) -> CheckResult:
    result = partial(make_result, "gpu.bf16", "gpu", "Real bf16")
    devices = probe.get("devices") or []
    if not devices:
        return result("skip", "the probe saw no device")
    low = min(tuple(d["capability"]) for d in devices)
    value = f"compute capability {low[0]}.{low[1]}"
    if low >= (8, 0):
        return result("pass", value, "capability >= 8.0")
    return result(
        "warn",
        value + ": bf16 is emulated: use fp16",
        "capability >= 8.0 (is_bf16_supported() says True here through emulation)",
        "train in fp16 (bf16: false, fp16: true)",
    )


def check_bnb(probe: dict[str, Any]) -> CheckResult:
    result = partial(make_result, "gpu.bnb_4bit", "gpu", "bitsandbytes 4-bit forward/backward")
    answer = probe.get("bnb_4bit")
    if not answer:
        return result("skip", "not probed (no GPU)")
    if answer.get("ok"):
        return result(
            "pass",
            f"nf4, {answer.get('compute_dtype')} compute: ok",
            "finite output and gradients",
            **answer,
        )
    error = answer.get("error") or "unknown error"
    if "No module named 'bitsandbytes'" in error:
        return result(
            "warn",
            "bitsandbytes is not installed",
            "imports",
            "pip install bitsandbytes (needed for QLoRA only)",
            **answer,
        )
    return result(
        "fail",
        error[:200],
        "finite output and gradients",
        "QLoRA will not work here: reinstall bitsandbytes for this torch/CUDA, or use LoRA",
        **answer,
    )


def check_probe_ran(answer_problem: str | None, probe: dict[str, Any]) -> CheckResult | None:
    result = partial(make_result, "gpu.probe", "gpu", "GPU probe")
    if answer_problem:
        return result(
            "fail",
            answer_problem,
            "the probe finishes",
            "run `python -m train_backend.probe --quick` to see its error",
        )
    if "probe_error" in probe:  # the probe itself broke part-way: what it did not reach is unknown
        return result(
            "fail",
            f"the GPU probe failed part-way: {probe['probe_error'].get('error', '?')}",
            "the probe finishes",
            "run `python -m train_backend.probe --quick` to see the whole traceback",
        )
    if "no_gpu" in probe and "torch" in probe and probe["torch"].get("cuda") is not None:
        return result(
            "fail",
            probe["no_gpu"]["reason"],
            "torch sees the GPU",
            "check CUDA_VISIBLE_DEVICES and that the driver matches torch",
        )
    return None
