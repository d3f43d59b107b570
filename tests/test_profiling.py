"""debug.profile_steps: a profile of a few optimizer steps, by kind of kernel (bench/vs_unsloth.py
--profile-steps uses it on both sides)."""

from __future__ import annotations

import json

from conftest import cockpit, events, only_run, write_config

from train_backend.profiling import KINDS, PROFILE_FILE, kind_of, summarize


def test_kernel_names_fall_in_their_kinds():
    assert kind_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64") == "matmul"
    assert kind_of("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn") == "matmul"
    assert kind_of("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>") == "attention"
    assert kind_of("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == "attention"  # before "cutlass": matmul
    assert kind_of("void kDequantizeBlockwise<__nv_bfloat16, 512, 64, 8, 2>") == "dequantisation"
    assert kind_of("_rms_norm_forward_kernel") == "triton"  # Triton names a kernel after its function
    assert kind_of("_forward_kernel") == "triton"  # TRL's chunked log-prob fold
    assert kind_of("nvjet_tst_192x192_64x3_2x1_v_bz_coopB_TNT") == "matmul"  # cuBLAS on Hopper
    assert kind_of("Memcpy HtoD (Pageable -> Device)") == "copy"
    assert (
        kind_of("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>")
        == "elementwise"
    )
    assert kind_of("something else entirely") == "other"


def test_the_summary_is_per_step_with_the_busy_share_by_hand():
    kernels = [("gemm_a", 0.6, 40), ("flash_fwd", 0.2, 8), ("kDequantize", 0.1, 20), ("mystery", 0.1, 2)]
    s = summarize(kernels, (140, 0.35), steps=2, wall_s=2.5, device="cuda")
    # 1.0 s of kernels over 2 steps in 2.5 s: 0.5 s a step, busy 40% of the wall time
    assert s["busy_s_per_step"] == 0.5 and s["busy_share"] == 0.4 and s["wall_s_per_step"] == 1.25
    assert s["s_per_step_by_kind"] == {"matmul": 0.3, "attention": 0.1, "dequantisation": 0.05, "other": 0.05}
    assert list(s["s_per_step_by_kind"]) == [
        "matmul",
        "attention",
        "dequantisation",
        "other",
    ]  # longest first
    assert s["count_per_step_by_kind"]["matmul"] == 20 and s["launches_per_step"] == 70
    assert s["top"][0] == {"name": "gemm_a", "kind": "matmul", "s_per_step": 0.3, "count_per_step": 20}


def test_a_run_writes_its_profile_of_the_steps_asked_for(tmp_path, env):
    config = write_config(
        tmp_path / "c.yaml",
        {"training.max_steps": 4, "debug.profile_steps": 2, "debug.profile_from_step": 2},
    )
    done = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = only_run(env)
    profile = json.loads((run / PROFILE_FILE).read_text())
    assert profile["device"] == "cpu" and profile["steps"] == 2 and profile["first_step"] == 2
    assert profile["busy_s_per_step"] > 0 and profile["s_per_step_by_kind"]
    assert set(profile["s_per_step_by_kind"]) <= {k for k, _ in KINDS} | {"other"}
    said = [e["message"] for e in events(run) if e["type"] == "warning"]
    assert any("steps 2-3 profiled" in m for m in said)


def test_user_annotations_are_not_counted_as_device_time():
    """A record_function range (the optimizer's `Optimizer.step#AdamW.step`) shows on the device as
    the span of the kernels under it: the H200 profile counted its 36 ms on top of those kernels."""
    from types import SimpleNamespace

    from train_backend.profiling import from_profiler

    def avg(key, device_us, annotation=False, count=1):
        return SimpleNamespace(
            key=key,
            count=count,
            self_cpu_time_total=0,
            self_device_time_total=device_us,
            device_type="DeviceType.CUDA",
            is_user_annotation=annotation,
        )

    events = [
        avg("Optimizer.step#AdamW.step", 36_000, annotation=True),
        avg("kOptimizerStatic8bit2StateBlockwise", 2_000, count=448),
        avg("nvjet_sm90_tst_192x192", 100_000, count=192),
    ]
    prof = SimpleNamespace(key_averages=lambda: events)
    s = from_profiler(prof, steps=1, wall_s=0.5, device="cuda")
    assert s["busy_s_per_step"] == 0.102 and s["s_per_step_by_kind"]["optimizer"] == 0.002
