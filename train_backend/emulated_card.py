"""An emulated card holds the whole process to its size, as nvidia-smi counts it.

`emulate_vram` (train_backend/oom_watch.py) caps PyTorch's caching allocator, but nvidia-smi
also counts what lives outside it: the CUDA context, cuBLAS/cuDNN workspaces, bitsandbytes'
paged (managed) optimizer states, NCCL buffers, kernels loaded by the first steps. A run can sit
above the emulated size on the real card and finish where a real card of that size runs out.
`EmulatedCard` reads the process's own device memory from NVML (the figure nvidia-smi prints
for the pid) after every micro-batch and at each step's begin, from the first step, and raises an
out-of-memory error shaped like CUDA's (cockpit.run.oom_messages parses it) as soon as it passes the
emulated size: the OOM wizard then sees the case a real card would have shown it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from cockpit.fmt import GIB

MARK = "(emulated card: emulate_vram_gib; nvidia-smi counts the whole process)"


def oom_message(limit_bytes: int, used_bytes: int, allocated_bytes: int, reserved_bytes: int) -> str:
    """A CUDA out-of-memory message (PyTorch's newer format) for the emulated card."""
    from train_backend.oom_watch import format_size

    over = max(0, used_bytes - limit_bytes)
    return (
        f"CUDA out of memory. Tried to allocate {format_size(max(over, 2 << 20))}. GPU 0 has a total "
        f"capacity of {format_size(limit_bytes)} of which 0 bytes is free. Including non-PyTorch memory, "
        f"this process has {format_size(used_bytes)} memory in use. Of the allocated memory "
        f"{format_size(allocated_bytes)} is allocated by PyTorch, and "
        f"{format_size(max(0, reserved_bytes - allocated_bytes))} is reserved by PyTorch but unallocated. "
        f"{MARK}"
    )


class EmulatedCard:
    """`read_used()`: this process's device memory as nvidia-smi shows it (None: unknown);
    `torch_figures()`: (allocated, reserved) bytes; `error`: the exception class to raise."""

    def __init__(
        self,
        limit_bytes: int,
        read_used: Callable[[], int | None],
        torch_figures: Callable[[], tuple[int, int]],
        error: type[BaseException],
    ) -> None:
        self.limit_bytes = limit_bytes
        self.read_used = read_used
        self.torch_figures = torch_figures
        self.error = error
        self.peak_used_bytes = 0
        self.checks = 0

    def check(self) -> None:
        used = self.read_used()
        self.checks += 1
        if used is None:
            return
        self.peak_used_bytes = max(self.peak_used_bytes, used)
        if used > self.limit_bytes:
            allocated, reserved = self.torch_figures()
            raise self.error(oom_message(self.limit_bytes, used, allocated, reserved))

    def watch(self, trainer) -> None:
        """Check after every micro-batch's forward and backward (the trainer's training_step)."""
        step = trainer.training_step

        def checked_step(*args, **kwargs):
            loss = step(*args, **kwargs)
            self.check()
            return loss

        trainer.training_step = checked_step


def pci_address(props) -> str:
    """The PCI address NVML looks a GPU up by ("00000000:1B:00.0") from torch's device
    properties, whose `pci_domain_id`, `pci_bus_id` and `pci_device_id` are integers (str() of
    the bus number alone is no address: NVML refused it, and the check never ran on an H200)."""
    return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


def nvml_process_reader(pid: int | None = None) -> Callable[[], int | None]:
    """This process's used device memory on the GPU torch uses, from NVML (what nvidia-smi shows)."""
    import pynvml
    import torch

    pynvml.nvmlInit()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    try:
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_address(props))
    except (AttributeError, pynvml.NVMLError):  # an older torch: the GPU's UUID, NVML's spelling
        handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{props.uuid}")
    pid = os.getpid() if pid is None else pid

    def read() -> int | None:
        try:
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == pid and proc.usedGpuMemory is not None:
                    return int(proc.usedGpuMemory)
        except pynvml.NVMLError:
            return None
        return None  # not listed (a container with its own pid namespace): the allocator cap alone

    return read


def start(limit_bytes: int, record: dict | None = None) -> EmulatedCard | None:
    """The emulated card for this CUDA process, or None when NVML cannot read this process's
    memory; then `record["whole_process_why"]` says why (the allocator cap alone holds the size)."""
    import torch

    why = None
    try:
        reader = nvml_process_reader()
        if reader() is None:
            why = f"NVML does not list this process (pid {os.getpid()}; a container's own pid namespace?)"
    except Exception as exc:
        why = f"NVML: {type(exc).__name__}: {exc}"[:200]
    if record is not None:
        record["whole_process"] = why is None
        if why is not None:
            record["whole_process_why"] = why
    if why is not None:
        return None
    return EmulatedCard(
        limit_bytes,
        reader,
        lambda: (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()),
        torch.OutOfMemoryError,
    )


def describe(card: EmulatedCard | None) -> str:
    if card is None:
        return "NVML cannot read this process's memory: the allocator cap alone holds the emulated size"
    return f"the whole process held to {card.limit_bytes / GIB:.2f} GiB as nvidia-smi counts it"
