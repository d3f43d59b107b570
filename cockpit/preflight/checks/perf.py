"""Preflight's performance and software checks: matmul TFLOPS and host-to-device bandwidth
against what a healthy card of that model delivers, peer access and all-reduce between GPUs,
and the training libraries' versions against each other.

Judged in the UI process from the probe's answer (`train_backend.probe`) and NVML; no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any

from cockpit.gpus.card import Card
from cockpit.gpus.catalog import Catalog, find_card
from cockpit.preflight.checks.base import CheckResult
from cockpit.preflight.checks.gpu_probe import make_result, parse_version
from cockpit.speed import model as speed_model
from cockpit.telemetry.nvml_state import PCIE_X16_PRACTICAL_GBS, NvmlState

# Known-bad combinations beyond what each package's own metadata declares (those are checked too).
# (package, installed range, other package, minimum, why)
KNOWN_BAD = (
    # huggingface/transformers PR #41889: "starting with transformers v5 ... the minimum PEFT version
    # will be 0.18.0"
    ("transformers", ">=5", "peft", "0.18.0", "transformers 5 imports PEFT APIs first released in peft 0.18"),
)


def check_peer_access(probe: dict[str, Any]) -> CheckResult:
    result = partial(make_result, "gpu.peer_access", "gpu", "Peer access between GPUs")
    pairs = (probe.get("peer_access") or {}).get("pairs")
    if not pairs:
        return result("skip", "fewer than 2 GPUs")
    blocked = [f"{a}->{b}" for a, b, ok in pairs if not ok]
    status = "warn" if blocked else "pass"
    gpus = len({a for a, _, _ in pairs})
    shown = ", ".join(blocked[:6]) + (f" and {len(blocked) - 6} more" if len(blocked) > 6 else "")
    value = (
        f"blocked {shown} ({len(blocked)} of {len(pairs)} pairs, {gpus} GPUs)"
        if blocked
        else f"all {len(pairs)} pairs of {gpus} GPUs"
    )
    return result(
        status,
        value,
        "every pair",
        "multi-GPU traffic goes through host memory: check `nvidia-smi topo -m` and IOMMU/ACS",
    )


def check_allreduce(probe: dict[str, Any], state: NvmlState, catalog: Catalog | None = None) -> CheckResult:
    result = partial(make_result, "performance.allreduce", "performance", "NCCL all-reduce bus bandwidth")
    answer = probe.get("allreduce")
    if not answer:
        return result("skip", "not measured (one GPU, or probe without --multi)")
    if answer.get("error"):
        return result(
            "fail",
            answer["error"][:200],
            "NCCL all-reduce runs",
            "multi-GPU training will fail: check NCCL_DEBUG=INFO output",
            **answer,
        )
    card = find_card(state.gpus[0].get("name") if state.gpus else None, catalog)
    nvlink = re.match(r"\s*(\d+)", (card.nvlink or "") if card else "")
    if nvlink:  # nccl-tests reach ~40-50% of the NVLink aggregate as bus bandwidth at this size
        expected, link = 0.4 * float(nvlink.group(1)), f"NVLink {nvlink.group(1)} GB/s"
    else:
        gen, width = (
            (state.gpus[0].get("pcie_gen_max"), state.gpus[0].get("pcie_width_max"))
            if state.gpus
            else (None, None)
        )
        expected = 0.6 * PCIE_X16_PRACTICAL_GBS.get(gen or 4, 25.0) * (width or 16) / 16
        link = f"PCIe Gen{gen} x{width}"
    bus = answer["bus_gb_per_s"]
    status = "pass" if bus >= expected else "warn"
    return result(
        status,
        f"{bus:.0f} GB/s over {answer['world_size']} GPUs",
        f">= {expected:.0f} GB/s ({link})",
        "slower than the interconnect allows: check `nvidia-smi topo -m` and NCCL_P2P_DISABLE",
        **answer,
    )


def reference_tflops(card: Card) -> tuple[float, str]:
    """What a healthy card of this model reaches on random bf16 data, and where that figure comes from."""
    if card.measured_bf16_tflops:
        return card.measured_bf16_tflops, "measured on a healthy card"
    return 0.8 * card.bf16_dense_tflops, f"80% of the {card.bf16_dense_tflops:g} dense datasheet figure"


def _per_device(
    probe: dict[str, Any], key: str, title: str, runs: str, broken_fix: str, judge: Callable[..., CheckResult]
) -> list[CheckResult]:
    """One check per device the probe measured (`probe[key]`): a measurement that raised fails
    (`runs` is its threshold, `broken_fix` the fix); `judge(result, device, answer)` decides the
    others, `result` being `make_result` with the check's id, group and title filled in."""
    results = []
    for answer in probe.get(key) or []:
        i = answer.get("device", 0)
        result = partial(make_result, f"performance.{key}.{i}", "performance", f"GPU {i} {title}")
        if answer.get("error"):
            results.append(result("fail", answer["error"][:200], runs, broken_fix, **answer))
        else:
            results.append(judge(result, i, answer))
    return results or [
        make_result(f"performance.{key}", "performance", title.capitalize(), "skip", "not measured")
    ]


def check_matmul(
    probe: dict[str, Any], state: NvmlState, catalog: Catalog | None = None
) -> list[CheckResult]:
    def judge(result: Callable[..., CheckResult], i: int, answer: dict[str, Any]) -> CheckResult:
        name = next((g.get("name") for g in state.gpus if g["index"] == i), None)
        name = name or next((d["name"] for d in probe.get("devices") or [] if d.get("device") == i), None)
        card, tflops = find_card(name, catalog), answer["tflops"]
        value = f"{tflops:.0f} TFLOPS {answer.get('dtype', 'bf16')} ({answer.get('n')}^3, random data)"
        if card is None:
            return result("skip", value + f"; {name!r} is not in the catalog")
        ref, why = reference_tflops(card)
        ratio = tflops / ref
        threshold = f">= {0.85 * ref:.0f} TFLOPS (85% of {ref:.0f}, {why}, {card.name})"
        status = "pass" if ratio >= 0.85 else "warn" if ratio >= 0.6 else "fail"
        fix = f"delivers {ratio:.0%} of a healthy {card.name}: throttled, power-capped or shared"
        if status == "fail":
            catalog_cards = catalog.cards if catalog else [c for c in [card]]
            near = [
                c.name
                for c in catalog_cards
                if c.vendor != "amd" and abs(reference_tflops(c)[0] - tflops) <= 0.15 * tflops
            ]
            fix = (
                f"only {ratio:.0%} of a healthy {card.name}: a degraded card"
                + (f", or a mislabeled one (the rate fits {', '.join(near)})" if near else "")
                + "; ask the provider for another node"
            )
        return result(
            status, value, threshold, fix, card=card.id, reference_tflops=ref, ratio=round(ratio, 3), **answer
        )

    broken = "the GPU fails a plain matmul: ask the provider for another node"
    return _per_device(probe, "matmul", "matmul throughput", "matmul runs", broken, judge)


HOST_SLOW_SCALE = 1.5  # a host this much slower than the speed model's reference is worth a warning


def check_host_launch(probe: dict[str, Any]) -> CheckResult:
    """The host's speed at feeding the GPU (train_backend/speed/host_probe.py) against the host the speed
    model was fitted on: a slow or busy CPU slows every run bound by the host (QLoRA, small
    micro-batches) by as much, whatever the card."""
    result = partial(make_result, "performance.host_launch", "performance", "Host feeding the GPU")
    answer = probe.get("host_launch")
    if not answer:
        return result("skip", "not measured")
    if answer.get("error") or not answer.get("ms"):
        return result(
            "warn",
            (answer.get("error") or "no figure")[:200],
            "the probe runs",
            "the host probe failed: the speed figures assume the model's reference host",
            **answer,
        )
    reference = speed_model.HOST_PROBE_REFERENCE_MS
    scale = answer["ms"] / reference
    value = f"{answer['ms']:.2f} ms a probe step, x{scale:.2f} the reference host's time"
    threshold = f"<= x{HOST_SLOW_SCALE:g} ({HOST_SLOW_SCALE * reference:.2f} ms; reference {reference:.2f})"
    fix = (
        f"the host takes x{scale:.2f} as long to launch the same work: runs bound by the host (QLoRA, "
        "small micro-batches) go up to that much slower than the card picker says (the trainer's speed "
        "plan measures it again). Look for other processes on the CPU (`top`), CPU frequency scaling, "
        "or ask the provider for another node"
    )
    status = "pass" if scale <= HOST_SLOW_SCALE else "warn"
    return result(status, value, threshold, fix, scale=round(scale, 3), **answer)


def check_h2d(probe: dict[str, Any], state: NvmlState) -> list[CheckResult]:
    def judge(result: Callable[..., CheckResult], i: int, answer: dict[str, Any]) -> CheckResult:
        gpu = next((g for g in state.gpus if g["index"] == i), {})
        gen, width = gpu.get("pcie_gen_max"), gpu.get("pcie_width_max")
        value = f"{answer['gb_per_s']:.1f} GB/s (pinned)"
        if gen not in PCIE_X16_PRACTICAL_GBS or not width:
            return result("skip", value + "; PCIe link unknown", **answer)
        link_gbs = PCIE_X16_PRACTICAL_GBS[gen] * width / 16
        ratio = answer["gb_per_s"] / link_gbs
        return result(
            "pass" if ratio >= 0.6 else "warn" if ratio >= 0.3 else "fail",
            value,
            f">= {0.6 * link_gbs:.0f} GB/s (60% of ~{link_gbs:.0f} for Gen{gen} x{width})",
            "slow host->GPU copies: check the PCIe link under load, NUMA placement "
            "(numactl), and other traffic on the bus",
            link_gb_per_s=link_gbs,
            **answer,
        )

    broken = "pinned host-to-device copies fail: check `dmesg` and the driver"
    return _per_device(probe, "h2d", "host-to-device copy", "copy runs", broken, judge)


def _satisfies(version: tuple[int, ...], spec: str) -> bool:
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        parts = re.match(r"(~=|==|!=|>=|<=|>|<)?\s*(.*)", clause)
        assert parts is not None  # both groups may be empty: any clause matches
        op, bound = parts.groups()
        b = parse_version(bound)
        v = version[: len(b)] if op in ("==", "!=") else version
        ok = {
            "==": v == b,
            "!=": v != b,
            ">=": v >= b,
            "<=": v <= b,
            ">": v > b,
            "<": v < b,
            "~=": v >= b and v[: len(b) - 1] == b[: len(b) - 1],
            None: True,
        }[op]
        if not ok:
            return False
    return True


def check_software(probe: dict[str, Any]) -> CheckResult:
    result = partial(make_result, "software.versions", "software", "Training libraries")
    packages = (probe.get("packages") or {}).get("packages")
    if not packages:
        return result("skip", "the probe did not report versions")
    installed = {n: p["version"] for n, p in packages.items() if p.get("version")}
    value = ", ".join(f"{n} {v}" for n, v in installed.items())
    problems = []
    for name, info in packages.items():  # what each package's own metadata declares
        for req in info.get("requires", []):
            m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(.*?)\s*(;.*)?$", req)
            assert m is not None, req  # Requires-Dist starts with a project name (PEP 508)
            other, spec = m.group(1).lower().replace("_", "-"), m.group(2)
            if other in installed and spec and not _satisfies(parse_version(installed[other]), spec):
                problems.append(
                    f"{name} {installed.get(name)} requires {other}{spec}, found {installed[other]}"
                )
    for name, spec, other, minimum, why in KNOWN_BAD:
        applies = (
            name in installed and other in installed and _satisfies(parse_version(installed[name]), spec)
        )
        if applies and parse_version(installed[other]) < parse_version(minimum):
            problems.append(f"{name} {installed[name]} needs {other} >= {minimum} ({why})")
    if problems:
        return result(
            "fail",
            "; ".join(problems),
            "declared requirements met",
            "pip install -U the named package to the version shown",
            packages=packages,
        )
    return result("pass", value, "declared requirements met", packages=packages)
