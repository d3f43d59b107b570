"""The runner: concurrency, per-check timeouts, callback order, the report and the plans."""

from __future__ import annotations

import json
import threading
import time

from cockpit import preflight
from cockpit.checks import CheckResult


def _result(check_id: str, status: str = "pass") -> CheckResult:
    return CheckResult(id=check_id, group="host", title=check_id, status=status)


def _sleeper(check_id: str, seconds: float, status: str = "pass"):
    def run() -> CheckResult:
        time.sleep(seconds)
        return _result(check_id, status)

    return (check_id, run)


def test_runs_concurrently_and_reports_in_finish_order():
    seen: list[str] = []
    started = time.monotonic()
    results = preflight.run_checks(
        [_sleeper("a.slow", 0.8), _sleeper("b.mid", 0.4), _sleeper("c.fast", 0.05)],
        concurrency=4,
        on_result=lambda r: seen.append(r.id),
    )
    assert time.monotonic() - started < 1.15  # not 1.25 s of sleeps in a row
    assert seen == ["c.fast", "b.mid", "a.slow"]
    assert [r.id for r in results] == ["a.slow", "b.mid", "c.fast"]  # plan order


def test_concurrency_is_bounded():
    active, peak, lock = [0], [0], threading.Lock()

    def run() -> CheckResult:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return _result("x")

    preflight.run_checks([(f"c{i}", run) for i in range(8)], concurrency=2)
    assert peak[0] == 2


def test_a_hanging_check_times_out_and_the_rest_finish():
    forever = threading.Event()
    seen: list[str] = []
    started = time.monotonic()
    results = preflight.run_checks(
        [("disk.hangs", lambda: forever.wait(30) or _result("never")), _sleeper("host.ok", 0.05)],
        timeout_s=0.3,
        on_result=lambda r: seen.append(r.id),
    )
    assert time.monotonic() - started < 1.0
    assert seen == ["host.ok", "disk.hangs"]
    hung = results[0]
    assert hung.id == "disk.hangs" and hung.status == "warn" and hung.value == "timed out after 0.3 s"
    forever.set()


def test_per_check_timeout_overrides_the_default():
    check = preflight.Check("slow.one", lambda: time.sleep(0.5) or _result("slow.one"), timeout_s=0.1)
    [result] = preflight.run_checks([check], timeout_s=10)
    assert "timed out after 0.1 s" in result.value


def test_a_crashing_check_becomes_a_warning():
    def broken() -> CheckResult:
        raise RuntimeError("boom")

    [result] = preflight.run_checks([broken])
    assert result.id == "broken" and result.status == "warn" and "RuntimeError: boom" in result.value


def test_report_is_json_and_carries_the_exit_code():
    results = [_result("a"), _result("b", "warn"), _result("c", "skip")]
    data = preflight.report(results, {"cockpit": "0.1.0", "driver": "535.104.05"})
    assert json.loads(json.dumps(data)) == data
    assert data["exit_code"] == 1 and data["summary"] == {"pass": 1, "warn": 1, "fail": 0, "skip": 1}
    assert data["meta"]["driver"] == "535.104.05" and data["hostname"] and data["date"]
    assert preflight.report([_result("d", "fail")])["exit_code"] == 2


def test_quick_plan_has_no_speed_probe_or_download(tmp_path):
    paths = {"cache": tmp_path / "hf", "runs": tmp_path / "runs"}
    quick = [c.id for c in preflight.plan(True, paths, 24 << 30, 13 << 30, "http://127.0.0.1:9")]
    full = [c.id for c in preflight.plan(False, paths, 24 << 30, 13 << 30, "http://127.0.0.1:9")]
    assert not any(i.startswith("disk.read_speed") or i == "network.download" for i in quick)
    assert {"host.cpu", "host.ram_vram", "host.ram_model", "host.swap", "network.hub"} <= set(quick)
    assert "network.download" in full
    # both paths sit on one filesystem here: its speed is measured once
    assert [i for i in full if i.startswith("disk.read_speed")] == ["disk.read_speed.cache"]


def test_quick_plan_runs_for_real(tmp_path):
    paths = {"cache": tmp_path / "hf", "runs": tmp_path / "runs"}
    checks = preflight.plan(True, paths, None, None, "http://127.0.0.1:9")
    results = preflight.run_checks(checks, timeout_s=10)
    by_id = {r.id: r for r in results}
    assert by_id["host.ram_vram"].status == "skip"
    assert by_id["network.hub"].status == "fail"
    json.dumps(preflight.report(results))
