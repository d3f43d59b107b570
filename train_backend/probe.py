"""The preflight probe: what torch sees of the GPUs, and what they deliver (`python -m train_backend.probe`).

Speaks the JSON-lines protocol on stdout: one `probe` message per finding, `{"finding": name,
"data": {...}}`, then a `probe` message with finding `done`. Findings named in
`cockpit.preflight.probe_client.LIST_FINDINGS` come once per device and carry `data["device"]`. Every
measurement is bounded (fixed sizes, a time budget on its repetitions); a failure becomes a finding
with an `error` text, never a crash. No GPU: a `no_gpu` finding and exit 0.

Options: `--quick` (smaller matmul and copy, fewer repetitions), `--multi` (NCCL all-reduce across
all GPUs, one spawned process per GPU; NVLink multicast stays off: NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import traceback

from cockpit.fmt import GIB
from train_backend.channel import Emitter, take_stdout
from train_backend.speed import host_probe as host_speed

PACKAGES = ("torch", "transformers", "peft", "trl", "bitsandbytes", "datasets", "accelerate")


def package_versions() -> dict:
    """Installed versions and the requirements each declares on the others (metadata only, no imports)."""
    from importlib import metadata

    found: dict = {}
    for name in PACKAGES:
        try:
            version = metadata.version(name)
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            found[name] = {"version": None, "requires": []}
            continue
        ours = [r for r in requires if "extra ==" not in r and _req_name(r) in PACKAGES]
        found[name] = {"version": version, "requires": ours}
    return found


def _req_name(requirement: str) -> str:
    name = requirement.split(";")[0].strip()
    for i, ch in enumerate(name):
        if not (ch.isalnum() or ch in "-_."):
            name = name[:i]
            break
    return name.lower().replace("_", "-")


def _timed(fn, reps: int, budget_s: float) -> list[float]:
    """Seconds per call, by CUDA events; stops early once the budget is spent."""
    import torch

    times: list[float] = []
    started = time.monotonic()
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
        if time.monotonic() - started > budget_s:
            break
    return times


def matmul_tflops(device: int, quick: bool) -> dict:
    import torch

    n = 4096 if quick else 8192
    capability = torch.cuda.get_device_capability(device)
    dtype = torch.bfloat16 if capability >= (8, 0) else torch.float16  # real bf16 needs sm_80+
    with torch.cuda.device(device):
        # random data: zeros make the tensor cores draw less power and report inflated rates
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize(device)
        times = _timed(lambda: a @ b, reps=5 if quick else 20, budget_s=5.0 if quick else 20.0)
    rates = [2 * n**3 / t / 1e12 for t in times]
    return {
        "device": device,
        "tflops": round(statistics.median(rates), 1),
        "tflops_samples": [round(r, 1) for r in rates],
        "n": n,
        "dtype": str(dtype).replace("torch.", ""),
    }


def h2d_bandwidth(device: int, quick: bool) -> dict:
    import torch

    size = (256 << 20) if quick else GIB
    with torch.cuda.device(device):
        host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        dest = torch.empty(size, dtype=torch.uint8, device=device)
        dest.copy_(host, non_blocking=True)
        torch.cuda.synchronize(device)
        times = _timed(lambda: dest.copy_(host, non_blocking=True), reps=5, budget_s=10.0)
    rates = [size / t / 1e9 for t in times]
    return {"device": device, "gb_per_s": round(statistics.median(rates), 2), "bytes": size, "pinned": True}


def bnb_4bit(device: int) -> dict:
    """A tiny QLoRA step: nf4 base layer (frozen) plus a trainable low-rank path, forward and backward."""
    import bitsandbytes as bnb
    import torch

    dtype = torch.bfloat16 if torch.cuda.get_device_capability(device) >= (8, 0) else torch.float16
    torch.manual_seed(0)
    layer = bnb.nn.Linear4bit(256, 256, bias=False, compute_dtype=dtype, quant_type="nf4")
    layer = layer.to(f"cuda:{device}")  # quantises the weight on the way
    lora_a = torch.randn(256, 8, device=device, dtype=dtype, requires_grad=True)
    lora_b = torch.zeros(8, 256, device=device, dtype=dtype, requires_grad=True)
    x = torch.randn(4, 256, device=device, dtype=dtype, requires_grad=True)
    out = layer(x) + (x @ lora_a) @ lora_b
    out.float().pow(2).mean().backward()
    torch.cuda.synchronize(device)
    finite = bool(torch.isfinite(out).all().item())
    grads = lora_b.grad is not None and x.grad is not None
    grads_finite = grads and bool(torch.isfinite(lora_b.grad).all().item())
    ok = finite and grads and grads_finite
    error = None if ok else f"output finite: {finite}, gradients present: {grads}, finite: {grads_finite}"
    return {"ok": ok, "device": device, "compute_dtype": str(dtype).replace("torch.", ""), "error": error}


def _allreduce_worker(rank: int, world: int, port: int, size: int, results) -> None:
    import torch
    import torch.distributed as dist

    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        tensor = torch.randn(size // 4, device=rank, dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        dist.destroy_process_group()
        results.put((rank, statistics.median(times), None))
    except Exception as exc:
        results.put((rank, None, f"{type(exc).__name__}: {exc}"))


def allreduce_bus_bandwidth(world: int, quick: bool, timeout_s: float = 120.0) -> dict:
    """NCCL all-reduce, one spawned process per GPU; bus bandwidth as nccl-tests defines it."""
    import socket

    import torch.multiprocessing as mp

    size = (64 << 20) if quick else (512 << 20)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_allreduce_worker, args=(r, world, port, size, results)) for r in range(world)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    answers = []
    try:
        while len(answers) < world and time.monotonic() < deadline:
            try:
                answers.append(results.get(timeout=1.0))
            except Exception:  # queue.Empty: keep waiting until the deadline
                if not any(p.is_alive() for p in procs):
                    break
    finally:
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()) if len(answers) == world else 0.1)
            if p.is_alive():
                p.kill()
    errors = [e for _, _, e in answers if e]
    if errors or len(answers) < world:
        return {"world_size": world, "error": errors[0] if errors else f"timed out after {timeout_s:.0f} s"}
    seconds = max(t for _, t, _ in answers)
    algbw = size / seconds / 1e9
    return {
        "world_size": world,
        "bytes": size,
        "alg_gb_per_s": round(algbw, 1),
        "bus_gb_per_s": round(algbw * 2 * (world - 1) / world, 1),
    }


def run(emitter: Emitter, quick: bool, multi: bool) -> None:
    def finding(finding_name: str, /, **data) -> None:  # data may hold a "name" (the device's)
        emitter.emit("probe", finding=finding_name, data=data)

    def attempt(name: str, fn, *args, device: int | None = None) -> dict | None:
        started = time.monotonic()
        try:
            data = fn(*args)
        except Exception as exc:
            traceback.print_exc()  # fd 2: the client keeps the tail
            data = {"error": f"{type(exc).__name__}: {exc}".strip()}
            if device is not None:
                data["device"] = device
        data["duration_s"] = round(time.monotonic() - started, 2)
        finding(name, **data)
        return data

    finding("packages", packages=package_versions())
    try:
        import torch
    except Exception as exc:
        finding("torch", error=f"torch does not import: {type(exc).__name__}: {exc}")
        return
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    finding(
        "torch",
        version=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=cudnn,
        cuda_available=available,
        device_count=count,
        arch_list=torch.cuda.get_arch_list() if available else [],
    )
    if not available or count == 0:
        reason = (
            "torch is a CPU-only build" if torch.version.cuda is None else "no CUDA GPU is visible to torch"
        )
        finding("no_gpu", reason=reason, cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
        return
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        major, minor = props.major, props.minor
        finding(
            "devices",
            device=index,
            name=props.name,
            capability=[major, minor],
            total_memory_bytes=props.total_memory,
            bf16_real=(major, minor) >= (8, 0),  # is_bf16_supported() says True on a T4 (emulated)
        )
    attempt("bnb_4bit", bnb_4bit, 0, device=0)
    attempt("host_launch", host_speed.measure, 0, device=0)
    for index in range(1 if quick else count):
        attempt("matmul", matmul_tflops, index, quick, device=index)
        attempt("h2d", h2d_bandwidth, index, quick, device=index)
    if count > 1:
        pairs = [
            [a, b, bool(torch.cuda.can_device_access_peer(a, b))]
            for a in range(count)
            for b in range(count)
            if a != b
        ]
        finding("peer_access", pairs=pairs)
        if multi:
            attempt("allreduce", allreduce_bus_bandwidth, count, quick)


def main(argv: list[str] | None = None) -> int:
    protocol_fd = take_stdout()
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # never NVLink SHARP / multicast (see shared/gpu notes)
    parser = argparse.ArgumentParser(prog="python -m train_backend.probe")
    parser.add_argument("--quick", action="store_true", help="smaller, faster measurements")
    parser.add_argument("--multi", action="store_true", help="also measure NCCL all-reduce across GPUs")
    args = parser.parse_args(argv)
    emitter = Emitter(protocol_fd)
    started = time.monotonic()
    try:
        run(emitter, args.quick, args.multi)
    except Exception as exc:  # a bug in the probe itself: still an answer
        traceback.print_exc()
        emitter.emit("probe", finding="probe_error", data={"error": f"{type(exc).__name__}: {exc}"})
    emitter.emit("probe", finding="done", data={"duration_s": round(time.monotonic() - started, 2)})
    return 0


if __name__ == "__main__":
    from train_backend.quick_exit import exit_now

    exit_now(main())
