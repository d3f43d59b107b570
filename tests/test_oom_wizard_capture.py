"""Catching an OOM: the allocator's messages as PyTorch writes them, the kinds without figures,
bitsandbytes' C-level exit and the host's OOM killer (a fake cgroup), the injected test message,
and the token-length figures the wizard's max_length remedy needs."""

from __future__ import annotations

import json
import signal

import pytest

from cockpit.protocol.wire import encode
from cockpit.run.oom_messages import cgroup_memory, parse_oom_message, silent_oom
from cockpit.run.rundir import RunDir
from cockpit.run.status import record_exit
from train_backend.data import length_stats
from train_backend.errors import classify
from train_backend.oom_watch import format_size, injected_oom_message

GIB, MIB = 2**30, 2**20
# PyTorch's allocator when nothing at all is free (format_size writes "0 bytes"), and without the
# process line (no NVML in the process)
NOTHING_FREE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
    "of 8.00 GiB of which 0 bytes is free. Of the allocated memory 14.51 GiB is allocated by PyTorch, and "
    "15.90 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
# in a container the process is listed by its pid, not as "this process"
CONTAINER = (
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of "
    "47.53 GiB of which 16.88 MiB is free. Process 3652628 has 47.51 GiB memory in use. Of the allocated "
    "memory 47.14 GiB is allocated by PyTorch, and 57.79 MiB is reserved by PyTorch but unallocated."
)
ACCELERATOR = (
    "torch.AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in "
    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect."
)
CUBLAS = "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
# bitsandbytes' CUDA_CHECK_RETURN: fprintf(stderr, "Error %s at line %d in file %s\n", ...); exit(1)
BNB_EXIT = "Error out of memory at line 172 in file /src/csrc/pythonInterface.cpp\n"


def test_nothing_free_and_no_process_line():
    info = parse_oom_message(NOTHING_FREE)
    assert info.kind == "allocator" and info.format == "new"
    assert info.free_bytes == 0 and info.requested_bytes == 20 * MIB and info.total_bytes == 8 * GIB
    assert info.process_bytes is None
    assert info.reserved_bytes == int(14.51 * GIB) + int(15.90 * MIB)


def test_a_process_listed_by_pid_is_not_taken_for_this_one():
    info = parse_oom_message(CONTAINER)
    assert info.process_bytes is None and info.allocated_bytes == int(47.14 * GIB)
    assert info.free_bytes == int(16.88 * MIB)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (RuntimeError(ACCELERATOR), "accelerator"),
        (RuntimeError(CUBLAS), "cublas_alloc"),
        (RuntimeError(NOTHING_FREE), "allocator"),
    ],
)
def test_kinds_without_figures_are_ooms_not_gpu_failures(exc, kind, tmp_path):
    verdict = classify(exc, "training", str(tmp_path))
    assert verdict.kind == "oom" and verdict.oom["kind"] == kind
    assert verdict.oom["injected"] is False and "OOM wizard" in verdict.hint


def test_bitsandbytes_c_exit_becomes_an_oom_error():
    found = silent_oom(1, None, "loading...\n" + BNB_EXIT, None)
    assert found.info["kind"] == "bitsandbytes" and "pythonInterface.cpp" in found.message
    assert silent_oom(1, None, "Traceback: ValueError\n", None) is None
    assert silent_oom(0, None, BNB_EXIT, None) is None


def test_torch_sizes_and_the_injected_message_parse_back():
    assert [format_size(n) for n in (0, 1024, 1025, 20 * MIB, int(23.65 * GIB))] == [
        "0 bytes",
        "1024 bytes",
        "1.00 KiB",
        "20.00 MiB",
        "23.65 GiB",
    ]
    default = parse_oom_message(injected_oom_message())
    assert default.total_bytes == int(23.65 * GIB) and default.requested_bytes == 2 * GIB
    small = parse_oom_message(injected_oom_message(1.25))
    assert small.total_bytes == pytest.approx(1.25 * GIB, rel=1e-3)
    assert small.process_bytes + small.requested_bytes == pytest.approx(
        (22.61 + 2) / 23.65 * 1.25 * GIB, rel=1e-2
    )


# ---------------------------------------------------------------- the host's OOM killer


def fake_cgroup_v2(tmp_path, kills: int, inner: str = "/user.slice/trainer.scope"):
    root = tmp_path / "cgroup"
    folder = root / inner.lstrip("/")
    folder.mkdir(parents=True)
    (folder / "memory.events").write_text(
        f"low 0\nhigh 0\nmax 12\noom 1\noom_kill {kills}\noom_group_kill 0\n"
    )
    (folder / "memory.max").write_text(f"{64 * GIB}\n")
    (folder / "memory.peak").write_text(f"{63 * GIB}\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text(f"0::{inner}\n")
    return proc, root, folder


def test_cgroup_v2_and_v1_are_read(tmp_path):
    proc, root, folder = fake_cgroup_v2(tmp_path, 2)
    memory = cgroup_memory(proc, root)
    assert (memory.version, memory.oom_kills, memory.limit_bytes) == (2, 2, 64 * GIB)
    assert memory.path == str(folder)
    v1_root = tmp_path / "v1"
    v1 = v1_root / "memory" / "job"
    v1.mkdir(parents=True)
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # no limit
    v1_proc = tmp_path / "v1-cgroup"
    v1_proc.write_text("12:pids:/job\n4:memory:/job\n0::/\n")
    memory = cgroup_memory(v1_proc, v1_root)
    assert (memory.version, memory.oom_kills, memory.limit_bytes) == (1, 3, None)
    assert cgroup_memory(tmp_path / "missing", root) is None


def killed_run(tmp_path, kills_at_launch: int):
    path = tmp_path / "run"
    path.mkdir()
    run = RunDir(path)
    lines = [
        encode("hello", pid=1, run_id="run", device={"kind": "cuda"}),
        encode("phase", phase="quantising", message="loading weights"),
    ]
    run.events_path.write_bytes(b"".join(lines))
    run.log_path.write_text("Loading checkpoint shards: 40%\n")
    _, _, folder = fake_cgroup_v2(tmp_path, kills_at_launch)
    record = {"pid": 1, "memory_cgroup": {"path": str(folder), "version": 2, "oom_kills": kills_at_launch}}
    run.trainer_path.write_text(json.dumps(record))
    return run, folder


def last_event(run: RunDir) -> dict:
    return json.loads(run.events_path.read_text().splitlines()[-1])


def test_sigkill_with_a_new_oom_kill_is_a_host_oom(tmp_path):
    run, folder = killed_run(tmp_path, kills_at_launch=0)
    (folder / "memory.events").write_text("oom 1\noom_kill 1\n")  # the kernel killed the trainer
    record_exit(run, -signal.SIGKILL)
    event = last_event(run)
    assert event["type"] == "error" and event["kind"] == "oom" and event["source"] == "client"
    assert event["oom"]["kind"] == "host" and event["oom"]["host"] is True
    assert (event["oom"]["oom_kills_before"], event["oom"]["oom_kills_after"]) == (0, 1)
    assert event["phase"] == "quantising" and event["signal"] == signal.SIGKILL
    assert "OOM killer" in event["message"] and "RAM" in event["hint"]


def test_a_plain_kill_is_not_taken_for_an_oom(tmp_path):
    run, _ = killed_run(tmp_path, kills_at_launch=0)  # the count did not move: someone ran kill -9
    record_exit(run, -signal.SIGKILL)
    event = last_event(run)
    assert event["type"] == "exit" and event["reason"] == "trainer killed by SIGKILL"


def test_token_lengths_say_what_a_shorter_max_length_would_cut():
    stats = length_stats([10, 70, 130, 300, 600, 2000], 512)
    assert stats["tokens_over"] == {"64": 5, "128": 4, "256": 3, "512": 2, "1024": 1}
    assert stats["tokens_p99"] == 2000 and stats["truncated"] == 2
    assert length_stats([5, 9], 512)["tokens_over"] == {}


# ---------------------------------------------------------------- the trainer's side


def test_the_phase_tracker_follows_a_step(tmp_path):
    from types import SimpleNamespace

    from train_backend.oom_watch import PhaseTracker

    seen = []

    class Trainer:
        def __init__(self):
            self.callbacks = []

        def compute_loss(self, model, inputs, num_items_in_batch=None):
            seen.append(tracker.phase)
            return 1.0

        def _save_checkpoint(self, model, trial):
            seen.append(tracker.phase)

        def evaluate(self, *args, **kwargs):
            seen.append(tracker.phase)

        def add_callback(self, callback):
            self.callbacks.append(callback)

    tracker, trainer = PhaseTracker(), Trainer()
    tracker.enter("quantising")
    assert tracker.phase == "model_load"
    tracker.watch(trainer)
    (steps,) = trainer.callbacks
    state = SimpleNamespace(global_step=4)
    steps.on_train_begin(None, state, None)
    batch = {"input_ids": SimpleNamespace(shape=(4, 512))}
    trainer.compute_loss(SimpleNamespace(training=True), batch)
    assert seen[-1] == "first_forward" and tracker.phase == "backward" and tracker.step == 5
    assert (tracker.batch_rows, tracker.seq_len) == (4, 512)
    steps.on_pre_optimizer_step(None, state, None)
    assert tracker.phase == "optimizer_step"
    state.global_step = 5
    steps.on_step_end(None, state, None)
    assert tracker.step == 6 and tracker.phase == "forward" and tracker.seq_len is None
    trainer._save_checkpoint(None, None)
    trainer.evaluate()
    assert seen[-2:] == ["checkpoint_save", "evaluation"] and tracker.phase == "forward"
    details = tracker.details()
    assert details["phase"] == "forward" and details["step"] == 6 and "rss_bytes" in details["memory"]


def test_a_changed_optimizer_resumes_the_schedule_not_the_states(tmp_path):
    from types import SimpleNamespace

    import torch

    from cockpit.config.load import config_from_dotted
    from train_backend.oom_watch import checkpoint_optimizer, keep_optimizer_compatible

    checkpoint = tmp_path / "checkpoint-10"
    checkpoint.mkdir()
    torch.save(SimpleNamespace(optim="paged_adamw_32bit"), checkpoint / "training_args.bin")
    weights = [torch.nn.Parameter(torch.zeros(2))]
    old = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD(weights, lr=1.0), lambda step: 0.5**step)
    for _ in range(3):
        old.optimizer.step()
        old.step()
    torch.save(old.state_dict(), checkpoint / "scheduler.pt")
    assert checkpoint_optimizer(checkpoint) == "paged_adamw_32bit"

    emitted = []
    emitter = SimpleNamespace(emit=lambda kind, **fields: emitted.append((kind, fields)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD(weights, lr=1.0), lambda step: 0.5**step)
    trainer = SimpleNamespace(lr_scheduler=scheduler, _load_optimizer_and_scheduler=None)
    same = config_from_dotted({"training.optimizer": "paged_adamw_32bit"})
    keep_optimizer_compatible(trainer, checkpoint, same, emitter)
    assert trainer._load_optimizer_and_scheduler is None and not emitted  # same optimizer: HF resumes all
    changed = config_from_dotted({"training.optimizer": "paged_adamw_8bit"})
    keep_optimizer_compatible(trainer, checkpoint, changed, emitter)
    trainer._load_optimizer_and_scheduler(str(checkpoint))
    assert scheduler.last_epoch == 3  # the schedule goes on
    assert emitted[0][0] == "warning" and "paged_adamw_32bit -> paged_adamw_8bit" in emitted[0][1]["message"]


def test_emulate_vram_needs_a_gpu_to_apply(tmp_path):
    from cockpit.config.load import config_from_dotted
    from train_backend.oom_watch import emulate_vram

    assert emulate_vram(config_from_dotted({}), "cpu") is None
    done = emulate_vram(config_from_dotted({"emulate_vram_gib": 24}), "cpu")
    assert done == {"limit_bytes": 24 * GIB, "applied": False}


@pytest.mark.parametrize(
    ("text", "gib"), [("24GiB", 24.0), ("24", 24.0), ("12.5G", 12.5), ("24576MiB", 24.0), (" 16 GiB", 16.0)]
)
def test_emulate_vram_flag_reads_gib(text, gib):
    from cockpit.cli.args import vram_gib

    assert vram_gib(text) == gib


def test_emulate_vram_flag_refuses_gb():
    import argparse

    from cockpit.cli.args import vram_gib

    with pytest.raises(argparse.ArgumentTypeError, match="GiB"):
        vram_gib("24GB")


class FakeCuda:
    """torch.cuda's memory calls on a 140 GiB card: `outside` bytes in use outside the allocator;
    every call is logged in order (to check what happens before what)."""

    def __init__(self, outside_gib: float) -> None:
        self.total, self.reserved, self.outside = 140 * GIB, 0, int(outside_gib * GIB)
        self.log: list[str] = []
        self.fractions: list[float] = []

    def install(self, monkeypatch, torch) -> None:
        monkeypatch.setattr(torch.cuda, "init", lambda: self.log.append("init"))
        monkeypatch.setattr(torch.cuda, "mem_get_info", self.mem_get_info)
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: self.reserved)
        monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", self.fractions.append)

    def mem_get_info(self) -> tuple[int, int]:
        self.log.append(f"measure {self.outside / GIB:.2f}")
        return self.total - self.outside - self.reserved, self.total

    def warm_up(self, grows_gib: float):
        def warm_up(precision: str) -> None:
            self.log.append(f"warm-up {precision}")
            self.outside += int(grows_gib * GIB)  # cuBLAS handles, kernels of the first matmuls

        return warm_up


@pytest.fixture
def emulation(monkeypatch):
    torch = pytest.importorskip("torch")
    from cockpit.config.load import config_from_dotted
    from train_backend import oom_watch

    monkeypatch.setattr(oom_watch, "_EMULATION", {})  # module state: gone after this test
    cuda = FakeCuda(0.5)
    cuda.install(monkeypatch, torch)
    return cuda, oom_watch, config_from_dotted({"emulate_vram_gib": 24})


def test_card_emulation_warms_the_libraries_up_before_it_measures_and_holds_back_for_later_kernels(emulation):
    cuda, oom_watch, cfg = emulation
    done = oom_watch.emulate_vram(cfg, "cuda", "bf16", warm_up=cuda.warm_up(0.1))
    assert cuda.log[:4] == [
        "init",
        "measure 0.50",
        "warm-up bf16",
        "measure 0.60",
    ]  # bare context, then warmed
    assert done["outside_bytes_at_start"] == int(0.5 * GIB) and done["outside_bytes_after_warm_up"] == int(
        0.6 * GIB
    )
    # 256 MiB above the bare context for kernels loaded later (the warm-up's 0.1 GiB among them)
    held = int(0.5 * GIB) + oom_watch.LAZY_CODE_BYTES
    assert oom_watch.LAZY_CODE_BYTES == 256 * 2**20
    assert done["held_back_bytes"] == held and done["allowed_bytes"] == 24 * GIB - held
    assert cuda.fractions == [pytest.approx((24 * GIB - held) / cuda.total, rel=1e-12)]
    # the measured peaks of the H200 scenarios (outside grew by 161-229 MiB from the bare context)
    # stay inside the card: reserved at its cap plus what lives outside
    for grown_mib in (161, 172, 229):
        assert done["allowed_bytes"] + int(0.5 * GIB) + grown_mib * 2**20 <= 24 * GIB


def test_card_emulation_holds_back_what_the_warm_up_measured_when_it_is_more(emulation):
    cuda, oom_watch, cfg = emulation
    done = oom_watch.emulate_vram(cfg, "cuda", "fp16", warm_up=cuda.warm_up(0.4))
    assert done["held_back_bytes"] == int(0.9 * GIB) and done["allowed_bytes"] == 24 * GIB - int(0.9 * GIB)


def test_card_emulation_refuses_a_card_smaller_than_what_it_holds_back(emulation):
    from cockpit.config.schema import ConfigError

    cuda, oom_watch, _ = emulation
    from cockpit.config.load import config_from_dotted

    with pytest.raises(ConfigError, match="held back for kernels loaded later"):
        oom_watch.emulate_vram(
            config_from_dotted({"emulate_vram_gib": 0.7}), "cuda", warm_up=cuda.warm_up(0.1)
        )


def test_card_emulation_lowers_its_cap_when_more_grows_outside_than_it_held_back(emulation):
    """bitsandbytes' paged optimizer states (after the first optimizer step), or kernels past the
    held-back 256 MiB, grow the memory outside the allocator: the cap follows at the next step."""
    cuda, oom_watch, cfg = emulation
    emulation = oom_watch.emulate_vram(cfg, "cuda", "bf16", warm_up=cuda.warm_up(0.1))
    held = emulation["held_back_bytes"]
    oom_watch.recap_vram()
    assert len(cuda.fractions) == 1  # nothing grew: no new cap
    cuda.outside = held - 2**20  # kernels loaded by the first forward, within what is held back
    oom_watch.recap_vram()
    assert len(cuda.fractions) == 1 and emulation["outside_bytes_max"] == held - 2**20
    cuda.outside = int(1.4 * GIB)  # paged optimizer states
    oom_watch.recap_vram()
    assert cuda.fractions[-1] * cuda.total == pytest.approx(24 * GIB - 1.4 * GIB, rel=1e-9)
    assert emulation["allowed_bytes"] == 24 * GIB - int(1.4 * GIB)
    assert emulation["held_back_bytes"] == emulation["outside_bytes_max"] == int(1.4 * GIB)


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_the_warm_up_runs_a_linear_layers_forward_backward_and_loss_without_touching_the_seed(precision):
    torch = pytest.importorskip("torch")
    from train_backend.oom_watch import warm_up_libraries

    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    warm_up_libraries(precision, device="cpu")  # the same operations as on the GPU, on the CPU here
    assert torch.equal(torch.rand(3), expected)


def test_card_emulation_holds_back_a_paged_optimizers_states_before_the_first_step(emulation):
    """bitsandbytes' paged states live in unified memory, outside the allocator: held back before
    step 1, so the cache step 1 filled never sits beside them above the size (24.40 GiB on 24)."""
    cuda, oom_watch, cfg = emulation
    done = oom_watch.emulate_vram(cfg, "cuda", "bf16", warm_up=cuda.warm_up(0.1))
    code = done["held_back_bytes"]
    lora_13b = 52_428_800  # r=64 on q_proj and v_proj of a 13B Llama: 40 x 2 x 2 x 5120 x 64
    assert oom_watch.hold_back_paged_states(lora_13b, "adamw_torch") == 0 and len(cuda.fractions) == 1
    states = oom_watch.hold_back_paged_states(lora_13b, "paged_adamw_32bit")
    assert states == 8 * lora_13b  # two fp32 states a parameter
    assert done["held_back_bytes"] == code + states and done["allowed_bytes"] == 24 * GIB - code - states
    assert cuda.fractions[-1] * cuda.total == pytest.approx(done["allowed_bytes"], rel=1e-9)
    cuda.outside = code + states  # after the first optimizer step: no further cut
    oom_watch.recap_vram()
    assert len(cuda.fractions) == 2
