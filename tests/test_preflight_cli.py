"""`cockpit preflight` here (no GPU, no network): it finishes, says why, and never hangs."""

from __future__ import annotations

import json
import time

from conftest import cockpit


def test_quick_preflight_without_gpu_or_network(env):
    started = time.monotonic()
    proc = cockpit(["preflight", "--quick", "--json"], env, timeout=120)
    assert time.monotonic() - started < 60
    report = json.loads(proc.stdout)
    assert proc.returncode == report["exit_code"] == 2
    by_id = {r["id"]: r for r in report["results"]}
    visible = by_id["gpu.visible"]
    assert visible["status"] == "fail" and "NVML" in visible["value"] and "driver" in visible["fix"]
    assert by_id["network.hub"]["status"] in ("fail", "warn") and "offline" in by_id["network.hub"]["value"]
    assert by_id["software.versions"]["status"] == "pass"
    assert report["meta"]["packages"]["torch"]
    for result in report["results"]:
        assert result["status"] in ("pass", "warn", "fail", "skip")
        if result["status"] in ("warn", "fail"):
            assert result["fix"], result["id"]


def test_plain_lines_as_checks_finish(env):
    proc = cockpit(["preflight", "--quick", "--no-ui"], env, timeout=120)
    lines = proc.stdout.splitlines()
    assert any(line.startswith("[FAIL] GPU visible to NVML") for line in lines)
    assert lines[-1].startswith("preflight: ") and " fail" in lines[-1]
    assert proc.returncode == 2
