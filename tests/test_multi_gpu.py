"""Several GPUs without GPUs: the config, the launch command, the strategy, folding rank errors,
the per-GPU memory model, the doctor's multi-GPU rules and preflight's checks for N GPUs."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from preflight_fakes import probe_as_h200s
from support.nvml_fake import FakeGpu, FakeNvml
from test_doctor import TRAINER_PID, gpu, host, rules, run_state, sample

from cockpit.config.load import config_from_dotted
from cockpit.config.schema import ConfigError
from cockpit.doctor.engine import Doctor
from cockpit.fmt import GIB
from cockpit.models import memory as est
from cockpit.models import memory_report as estimate_report
from cockpit.models import shape as modelshape
from cockpit.models.sharding import choose_strategy
from cockpit.preflight.checks import perf
from cockpit.run import ranks as dist
from cockpit.telemetry.nvml_state import read_nvml
from train_backend import test_aids

# ---------------------------------------------------------------- config and launch


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"distributed.nnodes": 2}, "rdzv_endpoint: required with nnodes 2"),
        ({"distributed.nnodes": 2, "distributed.node_rank": 2, "distributed.rdzv_endpoint": "h:1"}, "0 to 1"),
        ({"distributed.rdzv_endpoint": "no-port"}, "expected host:port"),
        (
            {
                "distributed.nnodes": 2,
                "distributed.rdzv_endpoint": "10.0.0.1:29500",
                "distributed.master_port": 1,
            },
            "only for one machine",
        ),
        ({"method": "qlora", "quantization.bits": 8, "distributed.strategy": "fsdp"}, "4-bit QLoRA"),
        ({"gpus": 0}, "it must be >= 1"),
    ],
)
def test_config_refuses_a_job_that_cannot_start(values, needle):
    with pytest.raises(ConfigError) as caught:
        config_from_dotted(values)
    assert needle in str(caught.value)


def test_a_fault_for_a_rank_the_job_lacks_is_refused():
    cfg = config_from_dotted({"gpus": 2})
    with pytest.raises(ConfigError) as caught:
        test_aids.read({test_aids.ENV: '{"fail_rank": 2}'}, cfg, first_attempt=True)
    assert "COCKPIT_TEST_AIDS: fail_rank 2, but the job has 2 ranks (0 to 1)" in str(caught.value)


def test_one_gpu_keeps_the_plain_trainer_command():
    cfg = config_from_dotted({})
    assert dist.trainer_command(cfg, "/r") == [sys.executable, "-m", "train_backend", "train", "/r"]
    # one process on a box of several GPUs sees one of them (else HF Trainer's nn.DataParallel)
    assert dist.launch_env(cfg, {}) == {"CUDA_VISIBLE_DEVICES": "0"}
    assert dist.launch_env(cfg, {"CUDA_VISIBLE_DEVICES": "2,3"}) == {"CUDA_VISIBLE_DEVICES": "2"}
    assert dist.launch_env(cfg, {"CUDA_VISIBLE_DEVICES": ""}) == {}  # no GPU stays no GPU


def test_several_gpus_go_through_the_launcher_and_torchrun():
    cfg = config_from_dotted({"gpus": 4})
    cmd = dist.trainer_command(cfg, "/r")
    assert cmd[:5] == [sys.executable, "-m", "train_backend.launcher", "/r", "torchrun"]
    args = cmd[5:]
    assert args[args.index("--nproc-per-node") + 1] == "4" and "--standalone" in args
    assert args[args.index("--max-restarts") + 1] == "0"  # a failed rank fails the run
    assert args[-4:] == ["-m", "train_backend", "train", "/r"]
    pinned = dist.torchrun_args(config_from_dotted({"gpus": 2, "distributed.master_port": 29511}), "/r")
    assert "--standalone" not in pinned and pinned[pinned.index("--rdzv-endpoint") + 1] == "127.0.0.1:29511"


def test_several_machines_rendezvous_at_node_0():
    cfg = config_from_dotted(
        {
            "gpus": 8,
            "distributed.nnodes": 2,
            "distributed.node_rank": 1,
            "distributed.rdzv_endpoint": "10.1.2.3:29400",
        }
    )
    args = dist.torchrun_args(cfg, "/r")
    for flag, value in (("--nnodes", "2"), ("--node-rank", "1"), ("--rdzv-backend", "static")):
        assert args[args.index(flag) + 1] == value
    assert args[args.index("--rdzv-endpoint") + 1] == "10.1.2.3:29400"
    acc = dist.accelerate_args(
        replace(cfg, distributed=replace(cfg.distributed, launcher="accelerate")), "/r"
    )
    assert acc[acc.index("--num_processes") + 1] == "16" and acc[acc.index("--machine_rank") + 1] == "1"
    assert acc[acc.index("--main_process_ip") + 1] == "10.1.2.3"
    assert dist.world_size(cfg) == 16


def test_nvlink_multicast_stays_off_unless_the_user_says(monkeypatch):
    cfg = config_from_dotted({"gpus": 2})
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    assert dist.launch_env(cfg)["NCCL_NVLS_ENABLE"] == "0"
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    assert "NCCL_NVLS_ENABLE" not in dist.launch_env(cfg)


def test_strategy_ddp_for_adapters_fsdp_for_a_full_fine_tune_that_does_not_fit():
    assert choose_strategy("auto", "qlora", None, None).strategy == "ddp"
    assert choose_strategy("auto", "full", 30 * GIB, 80 * GIB).strategy == "ddp"
    too_big = choose_strategy("auto", "full", 141 * GIB, 80 * GIB)
    assert too_big.strategy == "fsdp" and "141.0 GiB" in too_big.reason and "80.0 GiB" in too_big.reason
    assert choose_strategy("auto", "full", None, 80 * GIB).strategy == "fsdp"  # unknown: shard
    assert choose_strategy("fsdp", "lora", 1, 80 * GIB).strategy == "fsdp"  # asked for: done


# ---------------------------------------------------------------- rank errors

GLOO_LOSS = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:40672"


def test_the_rank_that_failed_first_on_its_own_is_blamed():
    errors = [
        {"rank": 0, "local_rank": 0, "kind": "other", "message": GLOO_LOSS, "ts": 10.0, "hint": "h"},
        {
            "rank": 1,
            "local_rank": 1,
            "kind": "oom",
            "message": "CUDA out of memory.",
            "ts": 10.5,
            "hint": "h",
        },
    ]
    folded = dist.fold_rank_errors(errors, {0: {"exitcode": 1}, 1: {"exitcode": 5}})
    assert (
        folded["rank"] == 1 and folded["kind"] == "oom" and folded["message"] == "rank 1: CUDA out of memory."
    )
    assert [r["rank"] for r in folded["failed_ranks"]] == [0]
    assert "backend.rank1.log" in folded["hint"] and "also failed: rank 0" in folded["hint"]


def test_a_rank_killed_without_a_word_is_named_over_its_peers_complaints():
    errors = [{"rank": 0, "local_rank": 0, "kind": "other", "message": GLOO_LOSS, "ts": 1.0}]
    failures = {
        0: {"exitcode": 1, "local_rank": 0},
        1: {"exitcode": -9, "signal": "SIGKILL", "local_rank": 1},
    }
    folded = dist.fold_rank_errors(errors, failures)
    assert folded["rank"] == 1 and folded["message"] == "rank 1 killed by SIGKILL without reporting an error"
    assert "OOM killer" in folded["hint"] and "backend.rank1.log" in folded["hint"]
    assert dist.fold_rank_errors([], {}) is None


def test_only_peer_losses_blame_the_earliest():
    errors = [
        {"rank": 2, "kind": "other", "message": GLOO_LOSS, "ts": 5.0},
        {"rank": 3, "kind": "other", "message": GLOO_LOSS, "ts": 4.0},
    ]
    assert dist.fold_rank_errors(errors)["rank"] == 3


# ---------------------------------------------------------------- memory per GPU

SHAPE = modelshape.load_shape("synthetic:llama-2-7b")


@pytest.mark.parametrize("method", ["qlora", "lora", "full"])
def test_one_gpu_numbers_do_not_move(method):
    w = est.Workload(SHAPE, method=method, optimizer="adamw_torch")
    base = est.estimate_memory(w)
    for sharding in ("ddp", "fsdp"):
        assert est.estimate_memory(replace(w, gpus=1, sharding=sharding)) == base
    assert "gpus" not in estimate_report.workload_inputs(w)


def test_ddp_replicates_and_adds_gradient_buckets_and_nccl():
    w = est.Workload(SHAPE, method="full", optimizer="adamw_torch")
    one, two = est.estimate_memory(w), est.estimate_memory(replace(w, gpus=2))
    assert two.part("ddp_buckets").bytes == SHAPE.params * 4  # fp32 gradients, copied for the all-reduce
    assert two.peak_bytes == one.peak_bytes + SHAPE.params * 4 + est.NCCL_BUFFERS_BYTES
    qlora = replace(w, method="qlora", optimizer="paged_adamw_32bit", gpus=2)
    assert (
        est.estimate_memory(qlora).part("ddp_buckets").bytes
        == SHAPE.lora_params(64, ["q_proj", "v_proj"]) * 2
    )


def test_fsdp_shards_states_and_gathers_layers_in_turn():
    w = est.Workload(SHAPE, method="full", optimizer="adamw_torch", gpus=2, sharding="fsdp")
    two = est.estimate_memory(w)
    assert two.part("optimizer").bytes == SHAPE.params * 8 // 2
    assert two.part("gradients").bytes == SHAPE.params * 4 // 2
    assert two.part("autocast_copies") is None and two.part("gathered").bytes > 0
    eight = est.estimate_memory(replace(w, gpus=8))
    single = est.estimate_memory(replace(w, gpus=1))
    # 7B full fine-tune: ~115 GiB on one GPU, ~55 GiB each on two, under 20 on eight
    assert single.peak_gib > 100 and 45 < two.peak_gib < 65 and eight.peak_gib < 20
    with pytest.raises(est.EstimateError, match="4-bit"):
        est.estimate_memory(replace(w, method="qlora", quant_bits=8))


def test_picker_rows_choose_the_strategy_auto_would_run():
    full = est.Workload(SHAPE, method="full", optimizer="adamw_torch")
    rows = estimate_report.multi_gpu_options(full, 80 * GIB)
    assert [r.gpus for r in rows] == [2, 4, 8]
    assert all(r.sharding == "fsdp" and r.verdict == "fits" for r in rows)
    assert rows[0].estimate.peak_bytes > rows[1].estimate.peak_bytes > rows[2].estimate.peak_bytes
    qlora = estimate_report.multi_gpu_options(est.Workload(SHAPE), 24 * GIB, counts=(2,))
    assert qlora[0].sharding == "ddp" and qlora[0].verdict == "fits"


def test_config_workload_counts_every_rank():
    cfg = config_from_dotted({"gpus": 4, "method": "full"})
    w = est.workload_from_config(cfg, SHAPE)
    assert w.gpus == 4 and w.sharding == "fsdp"
    assert estimate_report.workload_inputs(w)["gpus"] == 4


# ---------------------------------------------------------------- doctor

RANK_PIDS = [TRAINER_PID, TRAINER_PID + 1, TRAINER_PID + 2, TRAINER_PID + 3]


def four_gpus(utils, **fields) -> list:
    return [
        gpu(
            index=i,
            util_pct=u,
            processes=[{"pid": RANK_PIDS[i], "used_bytes": GIB, "name": "python"}],
            **fields,
        )
        for i, u in enumerate(utils)
    ]


def multi_state(**kw):
    state = run_state(**kw)
    state.distributed = {"world_size": 4, "strategy": "ddp", "pids": RANK_PIDS}
    return state


def run_doctor(seconds: int, gpus_at, state=None) -> list:
    doctor, state = Doctor(), state or multi_state()
    for ts in range(seconds):
        doctor.observe(sample(ts, gpus_at(ts), host()), state)
    return doctor.findings(seconds - 1)


def test_a_straggler_gpu_is_named_with_the_imbalance():
    findings = run_doctor(60, lambda ts: four_gpus([97, 96, 70 + ts % 3, 98], sm_clock_max_mhz=2520.0))
    (found,) = [f for f in findings if f.rule == "straggler"]
    assert "GPU 2" in found.title and "GPU 2 71%" in found.evidence and "GPU 0 97%" in found.evidence
    assert "foreign_process" not in rules(findings)  # the other ranks are the trainer, not strangers


def test_no_straggler_when_balanced_or_blinking_or_alone():
    assert "straggler" not in rules(run_doctor(60, lambda ts: four_gpus([97, 92, 95, 90])))
    # low for a few seconds only (a checkpoint on one rank): no finding
    blink = lambda ts: four_gpus([97, 97, 40 if ts % 10 == 0 else 96, 97])  # noqa: E731
    assert "straggler" not in rules(run_doctor(60, blink))
    # all idle together is not a straggler (that is the input-bound or all-reduce rule's matter)
    assert "straggler" not in rules(run_doctor(60, lambda ts: four_gpus([20, 25, 5, 22])))
    assert "straggler" not in rules(run_doctor(60, lambda ts: four_gpus([97])))
    assert "straggler" not in rules(
        run_doctor(60, lambda ts: four_gpus([97, 97, 60, 97]), multi_state(status="paused"))
    )


def test_slow_allreduce_fires_on_low_util_and_a_busy_bus():
    bus = dict(pcie_gen=4, pcie_width=16, pcie_tx_bytes_s=6e9, pcie_rx_bytes_s=6e9)
    findings = run_doctor(60, lambda ts: four_gpus([45, 48, 44, 46], **bus))
    (found,) = [f for f in findings if f.rule == "slow_allreduce"]
    assert "GPU 0 45% util, PCIe 12.0 GB/s" in found.evidence and "gradient_accumulation_steps" in found.fix


def test_slow_allreduce_over_pcie_between_nvlinked_gpus_points_at_nccl():
    bus = dict(pcie_gen=5, pcie_width=16, pcie_tx_bytes_s=12e9, pcie_rx_bytes_s=12e9)
    without = run_doctor(60, lambda ts: four_gpus([45, 48, 44, 46], **bus))
    linked = run_doctor(60, lambda ts: four_gpus([45, 48, 44, 46], nvlink_active=18, **bus))
    (plain,) = [f for f in without if f.rule == "slow_allreduce"]
    (found,) = [f for f in linked if f.rule == "slow_allreduce"]
    assert "rent cards joined by NVLink" in plain.fix and "NCCL is not using it" not in plain.fix
    assert "NCCL is not using it" in found.fix and "rent cards joined by NVLink" not in found.fix


def test_no_slow_allreduce_without_its_evidence():
    quiet_bus = dict(pcie_gen=4, pcie_width=16, pcie_tx_bytes_s=1e9, pcie_rx_bytes_s=1e9)
    busy_bus = dict(pcie_gen=4, pcie_width=16, pcie_tx_bytes_s=6e9, pcie_rx_bytes_s=6e9)
    assert "slow_allreduce" not in rules(run_doctor(60, lambda ts: four_gpus([45, 48, 44, 46], **quiet_bus)))
    assert "slow_allreduce" not in rules(run_doctor(60, lambda ts: four_gpus([95, 96, 94, 97], **busy_bus)))
    assert "slow_allreduce" not in rules(run_doctor(60, lambda ts: four_gpus([45], **busy_bus)))
    assert "slow_allreduce" not in rules(
        run_doctor(60, lambda ts: four_gpus([45, 48, 44, 46]))
    )  # no counters


# ---------------------------------------------------------------- preflight for N GPUs


def test_peer_access_for_eight_gpus():
    pairs = [[a, b, not (a == 3 or b == 3)] for a in range(8) for b in range(8) if a != b]
    result = perf.check_peer_access({"peer_access": {"pairs": pairs}})
    assert (
        result.status == "warn" and "14 of 56 pairs, 8 GPUs" in result.value and "and 8 more" in result.value
    )
    ok = perf.check_peer_access(
        {"peer_access": {"pairs": [[a, b, True] for a in range(4) for b in range(4) if a != b]}}
    )
    assert ok.status == "pass" and ok.value == "all 12 pairs of 4 GPUs"


@pytest.mark.parametrize(("bus", "status"), [(380.0, "pass"), (150.0, "warn")])
def test_allreduce_judged_for_eight_gpus(bus, status):
    state = read_nvml(FakeNvml([FakeGpu(name="NVIDIA H200", pcie_gen=5, pcie_gen_max=5)] * 8), {})
    result = perf.check_allreduce({"allreduce": {"world_size": 8, "bus_gb_per_s": bus}}, state)
    assert result.status == status and "over 8 GPUs" in result.value


def test_probe_measures_every_pair_and_all_gpus(monkeypatch):
    pytest.importorskip("torch")
    worlds = []
    found = probe_as_h200s(monkeypatch, 4, lambda world, quick: worlds.append(world) or {})
    assert len(found["peer_access"]["pairs"]) == 12 and worlds == [4]
