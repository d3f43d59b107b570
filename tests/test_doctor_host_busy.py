"""Issue 43, finding 10: `cockpit demo --real` took 13:51 on a 2-core box loaded by other work
(52-72 s on a quiet one) and nothing said the machine was the bottleneck. The doctor's host_busy
rule says so when other processes take the host's CPU, and stays quiet when the trainer itself
is what keeps the CPU busy."""

from __future__ import annotations

from test_doctor import feed, only, rules, run_state

from cockpit.doctor.engine import Doctor

LOADED_2_CORES = {
    "cpu_pct": 100.0,
    "cpu_per_core_pct": [100.0, 100.0],
    "cpu_count_usable": 2,
    "trainer_cpu_pct": 70.0,
}


def cpu_run():
    return run_state(precision="fp32", kind="cpu", capability=None, price=None)


def test_a_cpu_run_on_a_box_loaded_by_others_is_told_the_machine_is_the_bottleneck():
    findings = feed(Doctor(), 0, 90, state=cpu_run(), every=5, host=LOADED_2_CORES, nvml="no_gpu", gpus=[])
    finding = only(findings, "host_busy")
    assert finding.severity == "warn" and "busy with other work" in finding.title
    assert (
        "host CPU 100% of 2 cores" in finding.evidence
        and "other processes about 1.3 cores" in finding.evidence
    )


def test_a_trainer_that_keeps_the_cpu_busy_itself_is_not_host_busy():
    own = {
        "cpu_pct": 95.0,
        "cpu_per_core_pct": [95.0] * 16,
        "cpu_count_usable": 16,
        "trainer_cpu_pct": 1500.0,
    }
    assert "host_busy" not in rules(feed(Doctor(), 0, 90, every=5, host=own))
    quiet = {**LOADED_2_CORES, "cpu_pct": 60.0}
    assert "host_busy" not in rules(
        feed(Doctor(), 0, 90, state=cpu_run(), every=5, host=quiet, nvml="no_gpu", gpus=[])
    )


def test_a_paused_run_is_not_judged():
    state = run_state(status="paused")
    assert "host_busy" not in rules(feed(Doctor(), 0, 90, state=state, every=5, host=LOADED_2_CORES))


async def test_at_80x24_the_run_view_says_the_machine_is_busy(tmp_path):
    from support.pilot import ScriptedWatch, events_until_step, fake_samples, screen_text, wait_for
    from test_tui_snapshots import watched_run

    findings = feed(Doctor(), 0, 90, state=cpu_run(), every=5, host=LOADED_2_CORES, nvml="no_gpu", gpus=[])
    app = watched_run(tmp_path, ScriptedWatch(fake_samples(), findings), events_until_step(52), history=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "busy with other work" in screen_text(app), timeout_s=10)
