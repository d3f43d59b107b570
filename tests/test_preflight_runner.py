"""The runner: concurrency, per-check timeouts, callback order, the report and the plans."""

from __future__ import annotations

import json
import threading
import time

from cockpit.preflight import runner as preflight
from cockpit.preflight.checks.base import CheckResult


def _result(check_id: str, status: str = "pass") -> CheckResult:
    return CheckResult(id=check_id, group="host", title=check_id, status=status)


def _sleeper(check_id: str, seconds: float, status: str = "pass"):
    def run() -> CheckResult:
        time.sleep(seconds)
        return _result(check_id, status)

    return (check_id, run)


def test_runs_concurrently_and_reports_in_finish_order():
    seen: list[str] = []
    active, peak, lock = [0], [0], threading.Lock()

    def overlapping(check_id: str, seconds: float):
        def run() -> CheckResult:
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(seconds)
            with lock:
                active[0] -= 1
            return _result(check_id)

        return (check_id, run)

    results = preflight.run_checks(
        [overlapping("a.slow", 0.8), overlapping("b.mid", 0.4), overlapping("c.fast", 0.05)],
        concurrency=4,
        on_result=lambda r: seen.append(r.id),
    )
    assert peak[0] == 3  # all three ran at once, not one after another (counted, not timed)
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


def test_a_check_may_answer_several_results_and_on_check_gets_them_together():
    def probe() -> list[CheckResult]:
        time.sleep(0.1)
        return [_result("gpu.visible"), _result("gpu.bf16", "warn")]

    finished: list[tuple[str, list[str]]] = []
    seen: list[str] = []
    results = preflight.run_checks(
        [preflight.Check("gpu", probe, "gpu"), _sleeper("host.cpu", 0.0)],
        on_result=lambda r: seen.append(r.id),
        on_check=lambda c, rs: finished.append((c.id, [r.id for r in rs])),
    )
    assert [r.id for r in results] == ["gpu.visible", "gpu.bf16", "host.cpu"]  # plan order, flattened
    assert finished == [("host.cpu", ["host.cpu"]), ("gpu", ["gpu.visible", "gpu.bf16"])]
    assert seen == ["host.cpu", "gpu.visible", "gpu.bf16"]
    assert all(r.duration_s >= 0.1 for r in results[:2])  # untimed results take their check's time


def test_a_check_answering_something_else_becomes_a_warning():
    [empty] = preflight.run_checks([("gpu", lambda: [])])
    [wrong] = preflight.run_checks([("host.x", lambda: "ok")])
    assert empty.status == wrong.status == "warn" and "not a CheckResult" in wrong.value


def _counting(runs: dict, check_id: str, answers: list[str], status: str = "pass") -> preflight.Check:
    def run():
        runs[check_id] = runs.get(check_id, 0) + 1
        return [_result(a, status) for a in answers]

    return preflight.Check(check_id, run, check_id.split(".")[0])


def test_preflight_reruns_only_the_check_that_answered():
    runs: dict[str, int] = {}
    builds = []

    def build():
        builds.append(1)
        return [
            _counting(runs, "gpu", ["gpu.visible", "gpu.bf16"]),
            _counting(runs, "host.cpu", ["host.cpu"]),
        ]

    session = preflight.Preflight(build, meta=lambda: {"driver": "580.82.07"})
    assert session.check_of("host.cpu") is None
    assert [r.id for r in session.run()] == ["gpu.visible", "gpu.bf16", "host.cpu"]
    assert session.check_of("gpu.bf16").id == "gpu"
    finished = []
    again = session.rerun("host.cpu", on_check=lambda c, rs: finished.append(c.id))
    assert [r.id for r in again] == ["host.cpu"] and finished == ["host.cpu"]
    assert runs == {"gpu": 1, "host.cpu": 2}
    # a check with several answers runs whole and answers them all again
    assert [r.id for r in session.rerun("gpu.bf16")] == ["gpu.visible", "gpu.bf16"]
    assert runs == {"gpu": 2, "host.cpu": 2} and len(builds) == 1
    session.run()
    assert len(builds) == 2 and session.meta() == {"driver": "580.82.07"}


def test_rerun_of_an_unknown_result_says_so():
    session = preflight.Preflight([_sleeper("host.ok", 0.0)])
    try:
        session.rerun("host.ok")
    except KeyError as exc:
        assert "run the whole plan first" in str(exc)
    else:
        raise AssertionError("rerun before any run must raise")
    session.run()
    assert session.rerun("host.ok")[0].id == "host.ok"


def test_rerun_of_a_hung_check_times_out():
    forever = threading.Event()
    calls = []

    def hangs_the_second_time():
        calls.append(1)
        if len(calls) > 1:
            forever.wait(30)
        return _result("net.hub")

    session = preflight.Preflight([("net.hub", hangs_the_second_time)], timeout_s=0.3)
    session.run()
    started = time.monotonic()
    [again] = session.rerun("net.hub")
    assert time.monotonic() - started < 1.0 and "timed out" in again.value
    forever.set()


def test_hub_check_timeouts_come_from_the_plan(tmp_path):
    paths = {"cache": tmp_path}
    [hub] = [c for c in preflight.plan(True, paths, hub_timeout_s=1.5) if c.id == "network.hub"]
    assert hub.run.keywords == {"connect_timeout_s": 1.5, "total_timeout_s": 1.5}


def test_report_date_can_be_given():
    import datetime as dt

    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert preflight.report([_result("a")], now=when)["date"] == "2026-01-02T03:04:05+00:00"
