"""Checkpointed decoder layers whose inputs wait in host memory (`speed: auto`'s last memory tier).

Plain checkpointing keeps every layer's input on the GPU until the backward pass recomputes
the layer: layers x tokens x hidden values (fp32 for a QLoRA model's residual stream), which
at 5 GiB is most of what is left for activations. Here each checkpointed layer's input is copied to
pinned host memory on a side stream while the next layers compute, and copied back on that
stream while the layer after it recomputes (the first one just before its own recompute), so
the GPU holds no layer inputs between the passes and the copies back overlap the backward.

transformers calls a checkpointed layer as `layer._gradient_checkpointing_func(run, *args)`;
`install` replaces that function on every layer transformers checkpoints (after the trainer
has enabled checkpointing, from the callback's on_train_begin). The recompute runs under the
forward's RNG state and autocast, like torch.utils.checkpoint, so dropout draws the same mask.
"""

from __future__ import annotations

import weakref

import torch


class _Kept:
    """One checkpointed layer's tensor inputs in host memory, and their copies back when prefetched."""

    __slots__ = ("__weakref__", "back", "tensors")

    def __init__(self, tensors: list) -> None:
        self.tensors = tensors  # [(host copy, event the copy to the host is done at, device, needs grad)]
        self.back = None  # [(device tensor, event its copy back is done at)] once prefetched


class _Offloader:
    """The side stream the copies run on (one per device), and the layers waiting in host memory
    in the order of the forward pass: the backward recomputes them in reverse, so while one layer
    recomputes, the input of the one before it is copied back on the side stream (one layer's input
    more on the GPU at a time, as the memory model counts it)."""

    def __init__(self) -> None:
        self.streams: dict[int, torch.cuda.Stream] = {}
        self.copied_bytes = 0
        self.fallbacks = 0  # layer calls checkpointed on the device (no input needed a gradient)
        self.prefetched = 0  # layers whose inputs were copied back ahead of their recompute
        self.order: list = []  # weak references to _Kept, forward order

    def stream(self, device) -> torch.cuda.Stream:
        stream = self.streams.get(device.index)
        if stream is None:
            stream = self.streams[device.index] = torch.cuda.Stream(device)
        return stream

    def keep(self, tensors: list) -> _Kept:
        kept = _Kept(tensors)
        self.order = [r for r in self.order if r() is not None]  # a graph freed without a backward
        self.order.append(weakref.ref(kept))
        return kept

    def back(self, kept: _Kept) -> list:
        """kept's inputs on their devices, ready on the current stream; then the layer before it
        starts its copy back."""
        out = []
        for i, (host, done, device, _) in enumerate(kept.tensors):
            if device.type != "cuda":
                out.append(host)
            elif kept.back is not None:
                x, ready = kept.back[i]
                torch.cuda.current_stream(device).wait_event(ready)
                out.append(x)
            else:
                if done is not None:
                    torch.cuda.current_stream(device).wait_event(done)
                out.append(host.to(device, non_blocking=True))
        alive = [k for k in (r() for r in self.order) if k is not None]
        if kept in alive:
            at = alive.index(kept)
            del alive[at]
            self.order = [weakref.ref(k) for k in alive]
            if at and alive[at - 1].back is None:  # the layer before it, recomputed next
                self.prefetch(alive[at - 1])
        return out

    def prefetch(self, kept: _Kept) -> None:
        back = []
        for host, done, device, _ in kept.tensors:
            if device.type != "cuda":
                return
            main = torch.cuda.current_stream(device)
            x = torch.empty(host.shape, dtype=host.dtype, device=device)  # on the main stream's memory
            side = self.stream(device)
            side.wait_stream(main)  # x's memory may have been in use by the main stream until now
            with torch.cuda.stream(side):
                if done is not None:
                    side.wait_event(done)
                x.copy_(host, non_blocking=True)
                ready = torch.cuda.Event()
                ready.record(side)
            back.append((x, ready))
        kept.back = back
        self.prefetched += 1

    def to_host(self, t: torch.Tensor):
        """(host copy, event the copy is done at); the copy overlaps the next layers' compute."""
        self.copied_bytes += t.numel() * t.element_size()
        if t.device.type != "cuda":  # nothing to free on the CPU: a copy, so the path is the same
            return t.detach().clone(), None
        stream = self.stream(t.device)
        host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
        stream.wait_stream(torch.cuda.current_stream(t.device))
        with torch.cuda.stream(stream):
            host.copy_(t.detach(), non_blocking=True)
            done = torch.cuda.Event()
            done.record(stream)
        t.record_stream(stream)  # the allocator keeps t's memory until the copy has read it
        return host, done


class _HostCheckpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, offloader, *args):
        ctx.run = run
        ctx.offloader = offloader
        ctx.kinds = []  # per arg: "host" (a tensor kept in host memory) or "as_is"
        ctx.kept = []
        tensors = []
        device = None
        for a in args:
            if torch.is_tensor(a) and a.is_floating_point():
                host, done = offloader.to_host(a)
                ctx.kinds.append("host")
                ctx.kept.append(len(tensors))
                tensors.append((host, done, a.device, a.requires_grad))
                device = device or a.device
            else:
                ctx.kinds.append("as_is")
                ctx.kept.append(a)
        ctx.host = offloader.keep(tensors)
        ctx.device_type = device.type if device is not None else "cpu"
        ctx.autocast = (
            torch.is_autocast_enabled(ctx.device_type),
            torch.get_autocast_dtype(ctx.device_type),
        )
        ctx.cpu_rng = torch.get_rng_state()
        ctx.cuda_rng = None
        if device is not None and device.type == "cuda":
            ctx.cuda_device = device
            ctx.cuda_rng = torch.cuda.get_rng_state(device)
        with torch.no_grad():
            return run(*args)

    @staticmethod
    def backward(ctx, *grads):
        inputs = []
        back = ctx.offloader.back(ctx.host)
        for kind, kept in zip(ctx.kinds, ctx.kept):
            if kind == "as_is":
                inputs.append(kept)
                continue
            needs_grad = ctx.host.tensors[kept][3]
            inputs.append(back[kept].detach().requires_grad_(needs_grad))
        devices = [ctx.cuda_device] if ctx.cuda_rng is not None else []
        with torch.random.fork_rng(devices=devices, device_type="cuda" if devices else "cpu"):
            torch.set_rng_state(ctx.cpu_rng)
            if devices:
                torch.cuda.set_rng_state(ctx.cuda_rng, ctx.cuda_device)
            enabled, dtype = ctx.autocast
            with torch.enable_grad(), torch.autocast(ctx.device_type, dtype=dtype, enabled=enabled):
                outputs = ctx.run(*inputs)
        if not isinstance(outputs, tuple):
            outputs = (outputs,)
        pairs = [
            (o, g) for o, g in zip(outputs, grads) if torch.is_tensor(o) and o.requires_grad and g is not None
        ]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        ctx.kept = ctx.host = None
        return (None, None, *(x.grad if torch.is_tensor(x) and x.requires_grad else None for x in inputs))


def make_checkpoint_function(offloader: _Offloader | None = None):
    """A `_gradient_checkpointing_func` for transformers' layers: `fn(run, *args)`."""
    offloader = offloader or _Offloader()

    def host_checkpoint(run, *args, **kwargs):
        if kwargs:  # transformers binds keyword arguments into `run` (functools.partial)
            raise TypeError(f"host checkpointing takes positional tensors only, got {sorted(kwargs)}")
        if not any(torch.is_tensor(a) and a.requires_grad for a in args):
            # an autograd Function's backward runs only for inputs that need a gradient: with none
            # (the embeddings' output not marked, e.g. without enable_input_require_grads) the
            # adapters inside would get none either. torch's own checkpoint keeps them right.
            from torch.utils.checkpoint import checkpoint

            offloader.fallbacks += 1
            return checkpoint(run, *args, use_reentrant=False)
        return _HostCheckpoint.apply(run, offloader, *args)

    host_checkpoint.offloader = offloader
    return host_checkpoint


def install(model) -> int:
    """Swap the checkpoint function of every layer transformers checkpoints; the count swapped."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    fn = make_checkpoint_function()
    n = 0
    for module in model.modules():
        if isinstance(module, GradientCheckpointingLayer) and module.gradient_checkpointing:
            module._gradient_checkpointing_func = fn
            n += 1
    return n


def make_callback(emitter):
    """On train begin (after the trainer enabled checkpointing): install, and say how many layers."""
    from transformers import TrainerCallback

    class HostCheckpointing(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            n = install(model) if model is not None else 0
            if n == 0:
                emitter.emit(
                    "warning",
                    message="the speed plan keeps checkpointed layer inputs in host memory, but no layer "
                    "of this model is checkpointed by transformers: they stay on the GPU",
                    hint="expect the memory of plain checkpointing; set training.gradient_checkpointing "
                    "in your config to choose it yourself",
                )
            return control

    return HostCheckpointing()
