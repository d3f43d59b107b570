"""bench/oom_scenarios.py's verdict on the emulated size: NVML's bytes above idle against the
size in bytes (GiB = 2^30, as `--emulate-vram NGiB` gives the trainer), never a rounded figure."""

from __future__ import annotations

import pytest
from conftest import ROOT

from cockpit.fmt import GIB


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import oom_scenarios

    return oom_scenarios


@pytest.mark.parametrize(
    ("used", "held"),
    [
        (24 * GIB, True),  # exactly the size: a real card holds it
        (24 * GIB + 1, False),
        (int(24.004 * GIB), False),  # prints as 24.00 at two decimals: the bytes decide
        (int(24.03 * GIB), False),  # the H200 run of 2026-12-02 (qwen2.5-1.5b 8 x 2048)
        (int(23.97 * GIB), True),
    ],
)
def test_the_verdict_compares_bytes_with_bytes(bench, used, held):
    verdict = bench.held_to_emulated_size(used, 24)
    assert verdict["held_to_emulated_size"] is held and verdict["limit_bytes"] == 24 * GIB
    assert verdict["nvml_max_bytes"] == used and verdict["nvml_max_gib"] == round(used / GIB, 3)


def test_the_table_says_over_where_the_bytes_are_over(bench):
    over = {"name": "x", "card_gib": 24, **bench.held_to_emulated_size(int(24.004 * GIB), 24)}
    held = {"name": "y", "card_gib": 20, **bench.held_to_emulated_size(int(19.8 * GIB), 20)}
    text = bench.markdown({"scenarios": [over, held]})
    assert "x 24.004 of 24 GiB (OVER)" in text and "y 19.800 of 20 GiB." in text
