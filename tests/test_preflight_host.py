"""Host checks against fake cgroup trees and fake memory readers."""

from __future__ import annotations

from pathlib import Path

from cockpit.fmt import GIB
from cockpit.preflight.checks import host as h


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    return root


def test_cgroup_v2_cpu_quota_limits_cores(tmp_path):
    root = _tree(tmp_path, {"cpu.max": "200000 100000"})
    result = h.check_cpu(gpu_count=1, cgroup_root=root, affinity_count=lambda: 64)
    assert result.status == "warn"
    assert result.evidence["usable_cores"] == 2.0
    assert "cgroup quota" in result.value
    assert "tokenisation" in result.fix


def test_cgroup_v1_quota_and_no_quota(tmp_path):
    v1 = _tree(tmp_path / "v1", {"cpu/cpu.cfs_quota_us": "800000", "cpu/cpu.cfs_period_us": "100000"})
    assert h.cgroup_cpu_limit(v1) == 8.0
    assert h.check_cpu(gpu_count=2, cgroup_root=v1, affinity_count=lambda: 32).status == "pass"
    assert h.check_cpu(gpu_count=3, cgroup_root=v1, affinity_count=lambda: 32).status == "warn"
    unlimited = _tree(tmp_path / "v1u", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"})
    assert h.cgroup_cpu_limit(unlimited) is None
    assert h.cgroup_cpu_limit(_tree(tmp_path / "v2", {"cpu.max": "max 100000"})) is None
    # affinity is the limit when there is no quota
    few = h.check_cpu(gpu_count=1, cgroup_root=tmp_path / "none", affinity_count=lambda: 3)
    assert few.status == "warn" and few.evidence["usable_cores"] == 3


def test_cgroup_memory_limits(tmp_path):
    assert h.cgroup_memory_limit(_tree(tmp_path / "a", {"memory.max": str(32 * GIB)})) == 32 * GIB
    assert h.cgroup_memory_limit(_tree(tmp_path / "b", {"memory.max": "max"})) is None
    v1 = _tree(tmp_path / "c", {"memory/memory.limit_in_bytes": "9223372036854771712"})
    assert h.cgroup_memory_limit(v1) is None
    facts = h.memory_facts(_tree(tmp_path / "d", {"memory.max": str(16 * GIB)}), lambda: (256 * GIB, 0))
    assert facts.usable_bytes == 16 * GIB


def _facts(ram_gib: float, swap_gib: float = 0, limit_gib: float | None = None) -> h.MemoryFacts:
    limit = None if limit_gib is None else int(limit_gib * GIB)
    return h.MemoryFacts(int(ram_gib * GIB), int(swap_gib * GIB), limit)


def test_ram_vs_vram_pass_warn_fail_skip():
    vram = 24 * GIB
    assert h.check_ram_vs_vram(vram, _facts(96)).status == "pass"
    warn = h.check_ram_vs_vram(vram, _facts(64))
    assert warn.status == "warn" and "96 GiB" in warn.fix
    assert h.check_ram_vs_vram(vram, _facts(512, limit_gib=16)).status == "fail"  # the cgroup wins
    assert h.check_ram_vs_vram(None, _facts(64)).status == "skip"


def test_ram_on_a_big_card_is_judged_by_a_floor_not_4x_its_memory():
    h200 = int(140.4 * GIB)
    fine = h.check_ram_vs_vram(h200, _facts(126))  # the H200 box of issue 16: 0.9x its VRAM
    assert fine.status == "pass" and "advice only" in fine.threshold and "24 GB cards" in fine.threshold
    assert fine.evidence["rule_applies"] is False
    small = h.check_ram_vs_vram(h200, _facts(32))
    assert small.status == "warn" and ">= 64 GiB" in small.fix
    assert h.check_ram_vs_vram(48 * GIB, _facts(96)).status == "warn"  # the rule still holds at 48 GB


def test_ram_for_7b_fp16_model():
    model = 13 * GIB
    fail = h.check_ram_for_model(model, _facts(16))
    assert fail.status == "fail" and "16 GB is not enough" in fail.fix
    assert h.check_ram_for_model(model, _facts(24)).status == "warn"
    assert h.check_ram_for_model(model, _facts(64)).status == "pass"
    assert h.check_ram_for_model(None, _facts(64)).status == "skip"


def test_swap_warns_only_when_ram_is_tight():
    assert h.check_swap(_facts(32), vram_bytes=24 * GIB).status == "warn"
    assert h.check_swap(_facts(32, swap_gib=16), vram_bytes=24 * GIB).status == "pass"
    roomy = h.check_swap(_facts(128), vram_bytes=24 * GIB, model_bytes=13 * GIB)
    assert roomy.status == "pass" and roomy.evidence["ram_tight"] is False


def test_swap_judges_a_big_card_by_the_ram_check_s_floor_not_4x_its_memory():
    """A healthy H200 box (126 GiB RAM, no swap) was told its RAM is tight by the 4x rule that
    host.ram_vram keeps as advice past 48 GB cards (2026-12-03, bench/results/
    2026-12-03-preflight-offline-model-h200.json)."""
    h200 = h.check_swap(_facts(126), vram_bytes=140 * GIB)
    assert h200.status == "pass" and h200.evidence["ram_tight"] is False
    assert h.check_ram_vs_vram(140 * GIB, _facts(126)).status == "pass"
    small = h.check_swap(_facts(h.BIG_CARD_RAM_BYTES // GIB - 8), vram_bytes=140 * GIB)
    assert (
        small.status == "warn"
        and h.check_ram_vs_vram(140 * GIB, _facts(h.BIG_CARD_RAM_BYTES // GIB - 8)).status == "warn"
    )
    assert h.check_swap(_facts(126), vram_bytes=140 * GIB, model_bytes=70 * GIB).status == "warn"
