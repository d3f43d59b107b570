"""GPU preflight without a GPU: checks from FakeNvml + recorded probe answers, the real probe on the CPU,
the client's timeout, and the import boundary (no torch, no textual in the UI process)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import FIXTURES, ROOT
from preflight_fakes import probe_as_h200s
from support.nvml_fake import FakeGpu, FakeNvml

from cockpit.fmt import GIB
from cockpit.gpus.catalog import find_card
from cockpit.preflight.checks import gpu as cg
from cockpit.preflight.checks import gpu_probe as gp
from cockpit.preflight.checks import perf
from cockpit.preflight.probe_client import ProbeAnswer, add_message, run_probe
from cockpit.telemetry import nvml_state

H200 = dict(name="NVIDIA H200", mem_total_bytes=141 * GIB, pcie_gen=5, pcie_gen_max=5)
EXTRAS_OK = {"driver_version": "580.82.07", "cuda_driver_version": 13000,
             "gpus": [{"persistence_mode": 1, "ecc_uncorrected": 0, "retired_pending": 0,
                       "remapped_rows_pending": False, "remapped_rows_failure": False}] * 2}  # fmt: skip


def probe(name: str) -> dict:
    return json.loads((FIXTURES / f"probe_{name}.json").read_text())


def state(gpus=None, extras=EXTRAS_OK, **kw) -> nvml_state.NvmlState:
    return nvml_state.read_nvml(FakeNvml(gpus if gpus is not None else [FakeGpu(**H200)], **kw), extras)


def by_id(results) -> dict:
    return {r.id: r for r in results}


def test_h200_all_pass():
    results = by_id(cg.gpu_checks(state(), probe("h200")))
    bad = {i: (r.status, r.value) for i, r in results.items() if r.status not in ("pass", "skip")}
    assert not bad
    assert results["performance.matmul.0"].evidence["card"] == "h200-sxm"
    assert results["performance.h2d.0"].status == "pass"
    assert results["gpu.visible"].value.startswith("1 x NVIDIA H200, 141 GiB")
    assert results["gpu.peer_access"].status == "skip" and results["performance.allreduce"].status == "skip"


def test_nvml_unavailable_fails_with_reason():
    result = by_id(cg.gpu_checks(state(init_error="driver_not_loaded"), {}))["gpu.visible"]
    assert result.status == "fail" and "NVML did not start" in result.value and "driver" in result.fix
    assert cg.check_visible(state(gpus=[])).status == "fail"


def test_t4_mismatch():
    t4 = state([FakeGpu(name="Tesla T4", pcie_gen_max=3, pcie_gen=3)],
               {**EXTRAS_OK, "driver_version": "535.104.05", "cuda_driver_version": 12020})  # fmt: skip
    results = by_id(cg.gpu_checks(t4, probe("t4_mismatch")))
    assert results["gpu.cuda_driver"].status == "fail" and "580.65.06" in results["gpu.cuda_driver"].threshold
    assert results["gpu.arch"].status == "fail" and "no kernel image" in results["gpu.arch"].fix
    assert results["gpu.bf16"].status == "warn" and "emulated: use fp16" in results["gpu.bf16"].value
    assert results["gpu.bnb_4bit"].status == "fail"
    assert results["performance.matmul.0"].status == "fail"
    assert (
        results["software.versions"].status == "fail"
        and "peft >= 0.18.0" in results["software.versions"].value
    )


def test_cuda_driver_minor_version_compat_and_cpu_torch():
    answer = {"torch": {"version": "2.9.0+cu128", "cuda": "12.8"}}
    st = state(extras={**EXTRAS_OK, "driver_version": "550.54.15"})
    assert gp.check_cuda_driver(st, answer).status == "warn"
    assert gp.check_cuda_driver(state(), answer).status == "pass"
    st.driver_version = "520.61.05"
    assert gp.check_cuda_driver(st, answer).status == "fail"
    assert gp.check_cuda_driver(st, {"torch": {"version": "2.9.0+cpu", "cuda": None}}).status == "fail"
    assert gp.check_cuda_driver(st, {}).status == "skip"


def test_arch_ptx_only_warns_and_cudnn():
    answer = {"torch": {"arch_list": ["sm_80", "compute_80"], "cudnn": None, "cuda_available": True},
              "devices": [{"capability": [9, 0]}]}  # fmt: skip
    assert gp.check_arch(answer).status == "warn"
    assert gp.check_arch({}).status == "skip"
    assert gp.check_cudnn(answer).status == "warn"
    assert gp.check_cudnn({}).status == "skip"
    assert gp.check_bf16({}).status == "skip"


def test_bnb_paths():
    assert gp.check_bnb({}).status == "skip"
    missing = {"bnb_4bit": {"ok": False, "error": "ModuleNotFoundError: No module named 'bitsandbytes'"}}
    assert gp.check_bnb(missing).status == "warn"


def test_degraded_h100_two_gpus():
    gpus = [FakeGpu(processes=[(4242, 3 * GIB)]), FakeGpu(pcie_width=8)]
    results = by_id(cg.gpu_checks(state(gpus), probe("degraded")))
    matmul = results["performance.matmul.0"]
    assert matmul.status == "fail" and matmul.evidence["card"] == "h100-sxm" and "degraded" in matmul.fix
    assert results["performance.matmul.1"].status == "warn"  # 560 of 794: 70%
    assert results["performance.h2d.0"].status == "warn" and results["performance.h2d.1"].status == "fail"
    assert results["gpu.peer_access"].status == "warn" and "1->0" in results["gpu.peer_access"].value
    assert results["performance.allreduce"].status == "warn"  # 150 GB/s on 900 GB/s NVLink
    assert (
        results["gpu.other_processes"].status == "warn" and "pid 4242" in results["gpu.other_processes"].value
    )
    assert results["gpu.pcie_link"].status == "warn" and "x8" in results["gpu.pcie_link"].value


def test_per_device_measurements_that_broke_or_are_missing():
    st = state([FakeGpu(name="NVIDIA Mystery X1")])
    answer = {"matmul": [{"device": 0, "error": "RuntimeError: CUDA error: an illegal memory access"}]}
    broke = perf.check_matmul(answer, st)
    assert [(r.id, r.title, r.status, r.threshold) for r in broke] == [
        ("performance.matmul.0", "GPU 0 matmul throughput", "fail", "matmul runs")
    ]
    assert "illegal memory access" in broke[0].value and "another node" in broke[0].fix
    unknown = perf.check_matmul({"matmul": [{"device": 0, "tflops": 700.0, "n": 8192}]}, st)[0]
    assert unknown.status == "skip" and "'NVIDIA Mystery X1' is not in the catalog" in unknown.value
    missing = perf.check_h2d({}, st)
    assert [(r.id, r.title, r.status, r.value) for r in missing] == [
        ("performance.h2d", "Host-to-device copy", "skip", "not measured")
    ]
    copy = perf.check_h2d({"h2d": [{"device": 0, "error": "cudaErrorLaunchFailure"}]}, st)[0]
    assert copy.status == "fail" and copy.threshold == "copy runs" and "dmesg" in copy.fix


def test_allreduce_pass_and_error():
    st = state([FakeGpu(), FakeGpu()])
    assert perf.check_allreduce({"allreduce": {"world_size": 2, "bus_gb_per_s": 380.0}}, st).status == "pass"
    assert (
        perf.check_allreduce({"allreduce": {"world_size": 2, "error": "NCCL timeout"}}, st).status == "fail"
    )


def test_nvml_health_checks():
    bad_extras = {"driver_version": "580.82.07", "gpus": [{"persistence_mode": 0, "ecc_uncorrected": 2}]}
    st = state([FakeGpu(power_limit_mw=500_000, clock_event_reasons=0x40)], bad_extras)
    assert cg.check_persistence(st).status == "warn"
    assert cg.check_memory_health(st).status == "fail"
    assert cg.check_power_limit(st).status == "warn"
    throttled = cg.check_throttle(st)
    assert throttled.status == "fail" and "idle" in throttled.value
    ok = state()
    assert cg.check_persistence(ok).status == "pass" and cg.check_memory_health(ok).status == "pass"
    assert cg.check_throttle(ok).status == "pass" and cg.check_power_limit(ok).status == "pass"
    assert cg.check_processes(ok).status == "pass"
    assert cg.check_throttle(ok, load=[[{"index": 0, "clock_event_reasons": 0x20}]]).status == "warn"


def test_not_supported_skips():
    unsupported = {"power_limit_mw", "clock_event_reasons", "pcie_gen_max", "processes"}
    st = state([FakeGpu(unsupported=unsupported)], extras={"gpus": [{}]})
    for check in (cg.check_persistence, cg.check_memory_health, cg.check_throttle, cg.check_power_limit,
                  cg.check_pcie_link, cg.check_processes):  # fmt: skip
        assert check(st).status == "skip", check.__name__
    assert perf.check_h2d(probe("h200"), st)[0].status == "skip"


def test_pcie_idle_downclock_is_not_a_fault_but_under_load_is():
    st = state([FakeGpu(pcie_gen=1)])
    idle = cg.check_pcie_link(st)
    assert idle.status == "pass" and "downclocks at idle" in idle.value
    loaded = cg.check_pcie_link(st, load=[[{"index": 0, "pcie_gen": 3, "pcie_width": 16}]])
    assert loaded.status == "warn" and "Gen3 of Gen5" in loaded.value
    assert cg.check_pcie_link(st, load=[[{"index": 0, "pcie_gen": 5, "pcie_width": 16}]]).status == "pass"


def test_card_lookup_and_unknown_card():
    assert find_card("NVIDIA GeForce RTX 4090").id == "rtx-4090"
    assert find_card("NVIDIA H100 PCIe").id == "h100-pcie"
    assert find_card("NVIDIA A100-SXM4-80GB").id == "a100-80gb-sxm"
    assert find_card("NVIDIA H100 NVL") is None and find_card("Tesla T4") is None
    answer = {"matmul": [{"device": 0, "tflops": 60.0, "n": 4096, "dtype": "float16"}]}
    assert perf.check_matmul(answer, state([FakeGpu(name="Tesla T4")]))[0].status == "skip"
    assert perf.check_matmul({}, state())[0].status == "skip"


def test_software_versions_from_metadata():
    answer = {"packages": {"packages": {"trl": {"version": "1.0.0", "requires": ["transformers>=4.56.2"]},
                                        "transformers": {"version": "4.50.0", "requires": []}}}}  # fmt: skip
    result = perf.check_software(answer)
    assert result.status == "fail" and "trl 1.0.0 requires transformers>=4.56.2" in result.value
    assert perf.check_software({}).status == "skip"
    assert perf.check_software(probe("h200")).status == "pass"


def test_probe_failure_is_reported():
    results = by_id(cg.gpu_checks(state(), {}, answer_problem="the GPU probe did not finish within 60 s"))
    assert results["gpu.probe"].status == "fail"
    no_gpu = {"torch": {"cuda": "13.0"}, "no_gpu": {"reason": "no CUDA GPU is visible to torch"}}
    assert by_id(cg.gpu_checks(state(), no_gpu))["gpu.probe"].status == "fail"
    broke = {"torch": {"cuda": "13.0"}, "probe_error": {"error": "RuntimeError: CUDA error: busy"}}
    probe_result = by_id(cg.gpu_checks(state(), broke))["gpu.probe"]
    assert probe_result.status == "fail" and "CUDA error: busy" in probe_result.value


def test_add_message_folds_per_device_findings():
    findings: dict = {}
    for i in range(2):
        add_message(findings, {"type": "probe", "finding": "matmul", "data": {"device": i, "tflops": 1.0}})
    add_message(findings, {"type": "probe", "finding": "torch", "data": {"cuda": None}})
    add_message(findings, {"type": "probe", "finding": "bad"})  # no data: ignored
    assert [m["device"] for m in findings["matmul"]] == [0, 1] and "bad" not in findings


def test_real_probe_on_cpu_reports_no_gpu():
    started = time.monotonic()
    samples = []
    answer = run_probe(quick=True, timeout_s=30, sample=lambda: samples.append(1) or len(samples))
    assert time.monotonic() - started < 30
    assert answer.complete, (answer.problem(), answer.stderr_tail)
    assert "no_gpu" in answer.findings and answer.returncode == 0 and not answer.faults
    assert answer.findings["packages"]["packages"]["torch"]["version"]
    assert answer.samples  # the sampler ran while the probe did
    # judged against a (fake) H200 and its driver, whichever torch build this venv has
    h200 = state()
    cuda = by_id(cg.gpu_checks(h200, answer.findings))["gpu.cuda_driver"]
    torch_cuda = answer.findings["torch"]["cuda"]
    if torch_cuda is None:  # a CPU build: on a box with a GPU that is a failure the user must see
        assert cuda.status == "fail" and "CPU-only" in cuda.value
    else:  # a CUDA build (what the README's plain `pip install` gives): the floors table decides
        assert f"torch CUDA {torch_cuda}, driver {h200.driver_version}" in cuda.value
        floor = gp.CUDA_DRIVER_FLOORS.get(torch_cuda)
        version = gp.parse_version
        expected = "pass" if floor and version(h200.driver_version) >= version(floor) else "warn"
        assert cuda.status == expected, (cuda.status, cuda.value)


def test_client_timeout_kills_the_probe():
    script = "import time, subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"  # noqa: E501
    started = time.monotonic()
    answer = run_probe(timeout_s=1.0, command=[sys.executable, "-c", script])
    assert time.monotonic() - started < 10
    assert answer.timed_out and not answer.complete and "killed" in answer.problem()


def test_client_reports_garbage_and_exit_code():
    script = "print('not json'); import sys; sys.stderr.write('boom\\n'); sys.exit(3)"
    answer = run_probe(timeout_s=10, command=[sys.executable, "-c", script])
    assert isinstance(answer, ProbeAnswer) and answer.returncode == 3 and answer.faults
    assert "code 3: boom" in answer.problem()


def test_imports_pull_in_no_torch_and_no_textual():
    code = ("import sys, json, cockpit.preflight.checks.gpu, cockpit.preflight.probe_client; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    mods = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert not mods & {"torch", "textual", "transformers", "bitsandbytes"}


@pytest.mark.parametrize("name", ["h200", "t4_mismatch", "degraded"])
def test_fixtures_are_complete_answers(name):
    answer = probe(name)
    assert {"torch", "devices", "matmul", "h2d", "done"} <= set(answer)


def test_probe_reports_every_device_of_a_cuda_torch(monkeypatch):
    """The probe's path past `torch.cuda.is_available()`, on this CPU box: torch's CUDA queries
    answer as two H200s would, the measurements are stubbed; every finding must arrive."""
    pytest.importorskip("torch")
    found = probe_as_h200s(monkeypatch, 2, lambda world, quick: {"bus_gb_per_s": 300.0})
    assert [d["name"] for d in found["devices"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert len(found["matmul"]) == 2 and len(found["h2d"]) == 2
    assert found["peer_access"]["pairs"] == [[0, 1, True], [1, 0, True]]
    assert "allreduce" in found and "probe_error" not in found
    assert found["host_launch"]["ms"] == 4.0


def test_host_launch_judged_against_the_speed_models_reference_host(monkeypatch):
    """performance.host_launch: the host probe's figure over the host the speed model was fitted on;
    a host more than HOST_SLOW_SCALE slower warns (host-bound runs go that much slower than the
    picker says), a failed probe warns, no probe skips."""
    from cockpit.speed import model as speed

    monkeypatch.setattr(speed, "HOST_PROBE_REFERENCE_MS", 4.0)
    ok = perf.check_host_launch({"host_launch": {"ms": 4.4}})
    assert ok.status == "pass" and "x1.10" in ok.value and ok.evidence["scale"] == 1.1
    slow = perf.check_host_launch({"host_launch": {"ms": 8.0}})
    assert slow.status == "warn" and "x2.00" in slow.fix and "slower than the card picker" in slow.fix
    assert perf.check_host_launch({"host_launch": {"error": "RuntimeError: boom"}}).status == "warn"
    assert perf.check_host_launch({}).status == "skip"
    assert "performance.host_launch" in by_id(cg.gpu_checks(state(), probe("h200")))
