"""Fake machines for the preflight screen's tests: real check functions fed with fakes (FakeNvml,
recorded probe answers, fixed memory facts, a fake hub probe), fixed durations, no clock.

Each machine is a list of `cockpit.preflight.runner.Check`: one GPU check answering every GPU,
performance and software row from one probe answer (as the real plan has it), then host, disk
and network checks. `Counted` wraps checks to count their runs and hold them until released.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import Counter
from pathlib import Path

from support.nvml_fake import FakeGpu, FakeNvml

from cockpit.fmt import GIB
from cockpit.preflight.checks import gpu as checks_gpu
from cockpit.preflight.checks import host as checks_host
from cockpit.preflight.checks import network as checks_network
from cockpit.preflight.checks.base import CheckResult
from cockpit.preflight.runner import Check
from cockpit.telemetry import nvml_state

FIXTURES = Path(__file__).resolve().parent / "fixtures"
H200 = dict(name="NVIDIA H200", mem_total_bytes=141 * GIB, pcie_gen=5, pcie_gen_max=5, processes=[])
T4 = dict(name="Tesla T4", mem_total_bytes=15 * GIB, pcie_gen=3, pcie_gen_max=3, processes=[])
EXTRAS = {"driver_version": "580.82.07", "cuda_driver_version": 13000,
          "gpus": [{"persistence_mode": 1, "ecc_uncorrected": 0, "retired_pending": 0,
                    "remapped_rows_pending": False, "remapped_rows_failure": False}]}  # fmt: skip
T4_EXTRAS = {**EXTRAS, "driver_version": "535.104.05", "cuda_driver_version": 12020}
ROOMY = checks_host.MemoryFacts(ram_total_bytes=1024 * GIB, swap_total_bytes=0, cgroup_limit_bytes=None)
TIGHT = checks_host.MemoryFacts(ram_total_bytes=32 * GIB, swap_total_bytes=0, cgroup_limit_bytes=None)


def probe(name: str) -> dict:
    return json.loads((FIXTURES / f"probe_{name}.json").read_text())


def fixed(result: CheckResult, seconds: float) -> CheckResult:
    return dataclasses.replace(result, duration_s=seconds)


def _reach(ms: float | None, error: str = ""):
    def fake(endpoint, connect_timeout_s, total_timeout_s):
        return checks_network.Reach(
            endpoint, "huggingface.co", 443, ["18.239.50.16"], ms, None if error else 200, ms, error
        )

    return fake


def _disk(label: str, kind: str, status: str, fix: str = "") -> CheckResult:
    devices = {"nvme": "nvme0n1", "network": "", "overlay": ""}[kind]
    fstype = {"nvme": "ext4", "network": "nfs4", "overlay": "overlay"}[kind]
    return CheckResult(
        f"disk.type.{label}",
        "disk",
        f"Storage under the {label} directory",
        status,
        f"{kind} ({fstype} on {devices or 'storage.internal:/export'})",
        "local NVMe",
        fix,
        {"kind": kind, "fstype": fstype, "devices": [devices] if devices else []},
    )


def _free(label: str, free_gib: float) -> CheckResult:
    return CheckResult(
        f"disk.free.{label}",
        "disk",
        f"Free space for the {label} directory",
        "pass",
        f"{free_gib:.1f} GiB free of 1863 GiB",
        ">= 10 GiB (no planned size given)",
        evidence={"free_bytes": int(free_gib * GIB)},
    )


def machine(kind: str) -> list[Check]:
    """'healthy' (an H200, all pass), 'mixed' (a T4 with a driver too old for torch, a network
    disk, two CPU cores) or 'no_gpu' (no driver: NVML does not start)."""
    if kind == "healthy":
        state = nvml_state.read_nvml(FakeNvml([FakeGpu(**H200)]), EXTRAS)
        answer, cores, facts, vram = probe("h200"), 32, ROOMY, 141 * GIB
        cache = _disk("cache", "nvme", "pass")
        hub = _reach(38.0)
    elif kind == "mixed":
        state = nvml_state.read_nvml(FakeNvml([FakeGpu(**T4)]), T4_EXTRAS)
        answer, cores, facts, vram = probe("t4_mismatch"), 2, TIGHT, 15 * GIB
        cache = _disk(
            "cache",
            "network",
            "warn",
            "cache is on network storage (nfs4): copy the model and dataset to local disk "
            "(export HF_HOME=/local/nvme/hf) before training.",
        )
        hub = _reach(412.0)
    elif kind == "no_gpu":
        state = nvml_state.read_nvml(FakeNvml(init_error="library_not_found"))
        answer, cores, facts, vram = {"packages": probe("h200")["packages"]}, 8, ROOMY, None
        cache = _disk("cache", "nvme", "pass")
        hub = _reach(None, "gaierror: [Errno -3] Temporary failure in name resolution")
    else:
        raise ValueError(kind)
    gpu = [fixed(r, 2.5) for r in checks_gpu.gpu_checks(state, answer)]
    no_cgroup = Path("/nonexistent-cgroup")
    return [
        Check("gpu", lambda: gpu, "gpu", "GPU probe (NVML + torch)"),
        Check(
            "host.cpu",
            lambda: fixed(checks_host.check_cpu(1, no_cgroup, lambda: cores), 0.0),
            "host",
            "CPU cores",
        ),
        Check("host.ram_vram", lambda: fixed(checks_host.check_ram_vs_vram(vram, facts), 0.0), "host", "RAM"),
        Check("host.swap", lambda: fixed(checks_host.check_swap(facts, vram), 0.0), "host", "Swap"),
        Check("disk.type.cache", lambda: cache, "disk", "Storage under the cache directory"),
        Check("disk.free.cache", lambda: _free("cache", 1412.5), "disk", "Free space for the cache"),
        Check(
            "network.hub",
            lambda: fixed(checks_network.check_hub_reach("https://huggingface.co", probe=hub), 0.3),
            "network",
            "Model hub reachable",
        ),
    ]


class Counted:
    """Wraps checks: counts each one's runs and, while `hold` is set, waits for `release(id)`."""

    def __init__(self, checks: list[Check], hold: bool = False):
        self.runs: Counter = Counter()
        self.gates = {c.id: threading.Event() for c in checks}
        if not hold:
            for gate in self.gates.values():
                gate.set()
        self.checks = [dataclasses.replace(c, run=self._wrap(c)) for c in checks]

    def _wrap(self, check: Check):
        def run():
            self.runs[check.id] += 1
            if not self.gates[check.id].wait(10):
                raise TimeoutError(f"{check.id} was never released")
            return check.run()

        return run

    def release(self, check_id: str | None = None) -> None:
        for cid, gate in self.gates.items():
            if check_id in (None, cid):
                gate.set()


def probe_as_h200s(monkeypatch, count: int, allreduce) -> dict:
    """Runs the probe's path past `torch.cuda.is_available()` on this CPU box (torch required):
    torch's CUDA queries answer as `count` H200s would and the measurements are stubbed,
    `allreduce(world, quick)` answering the all-reduce. Returns the probe's findings."""
    import torch

    from cockpit.preflight.probe_client import add_message
    from train_backend import probe

    class Props:
        name, major, minor, total_memory = "NVIDIA H200", 9, 0, 150 * 2**30

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_90"])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: Props())
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: True)
    monkeypatch.setattr(probe, "bnb_4bit", lambda device: {"ok": True})
    monkeypatch.setattr(probe, "matmul_tflops", lambda device, quick: {"tflops": 700.0})
    monkeypatch.setattr(probe, "h2d_bandwidth", lambda device, quick: {"gb_per_s": 50.0})
    monkeypatch.setattr(probe, "allreduce_bus_bandwidth", allreduce)
    monkeypatch.setattr(probe.host_speed, "measure", lambda device=None: {"ms": 4.0})

    class Collect:
        def __init__(self) -> None:
            self.findings: dict = {}

        def emit(self, kind, **fields):
            add_message(self.findings, {"type": kind, **fields})

    collect = Collect()
    probe.run(collect, quick=False, multi=True)
    return collect.findings
