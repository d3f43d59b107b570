"""speed.mlp_block: fused: a LLaMA-style MLP and its three LoRA adapters in one autograd function.

The MLP is `down(silu(gate(x)) * up(x))`. With the fused LoRA linears (train_backend/speed/fused_lora.py)
and Liger's SwiGLU, a layer saves for its backward x, gate's output a, up's output b (Liger's
SwiGLU) and the product c = silu(a) * b (down_proj's input, for its adapter's gradient); with
PyTorch's SiLU and multiply also silu(a). Here one function saves x, a and b and the adapters'
small [tokens x r] products, and recomputes c in the backward (one elementwise pass, as unsloth's
LoRA MLP does): 2 x intermediate_size bytes a token a layer fewer than with Liger, 4 x fewer than
without (tests/test_fused_mlp.py counts them), which the memory model gives back to the split
(cockpit.models.memory: `fused_mlp`). Our own code, the algebra written out:

    forward   a = x Wg^T + sg (x Ag^T) Bg^T       b = x Wu^T + su (x Au^T) Bu^T
              c = silu(a) * b                      y = c Wd^T + sd (c Ad^T) Bd^T
    backward  c again from a, b;  gd = sd dy Bd;  dAd = gd^T c;  dBd = sd dy^T (c Ad^T)
              dc = dy Wd + gd Ad;  da = dc * b * silu'(a);  db = dc * silu(a)
              gg = sg da Bg;  dAg = gg^T x;  dBg = sg da^T (x Ag^T)   (the same for up)
              dx = da Wg + db Wu + gg Ag + gu Au

The 4-bit weights are dequantised again in the backward, as bitsandbytes does. SiLU and its
gradient run Liger's Triton kernels on a GPU where liger-kernel imports, else PyTorch's ops.

Only where every part allows it: gate_proj, up_proj and down_proj each a peft LoRA layer that the
fused linear takes (fused_lora.why_not), no LoRA dropout (down_proj's would need its mask kept,
which this does not do), one active adapter, a SiLU MLP. Elsewhere, and per call with grad off,
adapters disabled or merged, the MLP's own forward runs (peft's layers, Liger's SwiGLU).
"""

from __future__ import annotations

import functools

import torch

from train_backend.speed.fused_lora import (
    _dense,
    base_linear,
    compute_dtype,
    patch,
    run_outside_autocast,
    unpatch,
    why_not,
)

ATTR = "_cockpit_mlp_forward"  # the module's own forward, kept on the instance
PARTS = ("gate_proj", "up_proj", "down_proj")


@functools.cache
def swiglu():
    """(forward(a, b) -> c, backward(a, b, dc) -> (da, db)): Liger's kernels where they import on a
    GPU, else PyTorch's ops. Liger's backward writes da, db over a, b (they are not needed after)."""
    try:
        from liger_kernel.ops.swiglu import swiglu_backward, swiglu_forward
    except Exception:  # not installed, or no Triton: PyTorch's ops
        swiglu_forward = swiglu_backward = None

    def forward(a, b):
        if swiglu_forward is not None and a.is_cuda:
            return swiglu_forward(a, b)[2]
        return torch.nn.functional.silu(a) * b

    def backward(a, b, dc):
        if swiglu_backward is not None and a.is_cuda:
            return swiglu_backward(a, b, dc)
        sig = torch.sigmoid(a.float())
        silu = a.float() * sig
        da = dc.float() * b.float() * (sig * (1 + a.float() * (1 - sig)))
        return da.to(a.dtype), (dc.float() * silu).to(b.dtype)

    return forward, backward


class FusedLoraMLP(torch.autograd.Function):
    """down(silu(gate(x)) * up(x)) with LoRA on all three, W frozen; see the module's docstring."""

    @staticmethod
    def forward(ctx, x, ag, bg, au, bu, ad, bd, gate, up, down, scalings, dtype):
        sg, su, sd = scalings
        h = x.shape[-1]
        x2 = x.reshape(-1, h)
        ag_, bg_, au_, bu_, ad_, bd_ = (t.to(dtype) for t in (ag, bg, au, bu, ad, bd))
        a = base_linear(x2, gate, dtype)
        ug = torch.mm(x2, ag_.t())
        a.addmm_(ug, bg_.t(), alpha=sg)
        b = base_linear(x2, up, dtype)
        uu = torch.mm(x2, au_.t())
        b.addmm_(uu, bu_.t(), alpha=su)
        forward, _ = swiglu()
        c = forward(a, b)
        y = base_linear(c, down, dtype)
        ud = torch.mm(c, ad_.t())
        y.addmm_(ud, bd_.t(), alpha=sd)
        del c  # recomputed in the backward: the memory this function exists to save
        ctx.parts, ctx.scalings, ctx.dtype, ctx.x_shape = (gate, up, down), scalings, dtype, x.shape
        ctx.param_dtypes = tuple(t.dtype for t in (ag, bg, au, bu, ad, bd))
        ctx.save_for_backward(x2, a, b, ug, uu, ud, ag_, bg_, au_, bu_, ad_, bd_)
        return y.view(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, dy):
        x2, a, b, ug, uu, ud, ag_, bg_, au_, bu_, ad_, bd_ = ctx.saved_tensors
        gate, up, down = ctx.parts
        sg, su, sd = ctx.scalings
        dtype = ctx.dtype
        dy2 = dy.reshape(-1, dy.shape[-1])
        if dy2.dtype != dtype:
            dy2 = dy2.to(dtype)
        forward, backward = swiglu()
        c = forward(a, b)
        # down_proj and its adapter
        gd = torch.mm(dy2, bd_)
        if sd != 1:
            gd.mul_(sd)
        grad_ad = torch.mm(gd.t(), c)
        del c
        grad_bd = torch.mm(dy2.t(), ud)
        if sd != 1:
            grad_bd.mul_(sd)
        dc = torch.mm(dy2, _dense(down, dtype))
        dc.addmm_(gd, ad_)
        da, db = backward(a, b, dc)  # Liger's writes them over a and b
        del dc
        # gate_proj and up_proj with their adapters
        gg = torch.mm(da, bg_)
        gu = torch.mm(db, bu_)
        if sg != 1:
            gg.mul_(sg)
        if su != 1:
            gu.mul_(su)
        grad_ag, grad_au = torch.mm(gg.t(), x2), torch.mm(gu.t(), x2)
        grad_bg, grad_bu = torch.mm(da.t(), ug), torch.mm(db.t(), uu)
        if sg != 1:
            grad_bg.mul_(sg)
        if su != 1:
            grad_bu.mul_(su)
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.mm(da, _dense(gate, dtype))
            grad_x.addmm_(db, _dense(up, dtype))
            grad_x.addmm_(gg, ag_)
            grad_x.addmm_(gu, au_)
            grad_x = grad_x.view(ctx.x_shape)
        grads = [grad_ag, grad_bg, grad_au, grad_bu, grad_ad, grad_bd]
        grads = [g if g.dtype == want else g.to(want) for g, want in zip(grads, ctx.param_dtypes)]
        return (grad_x, *grads, None, None, None, None, None)


def why_not_mlp(mlp) -> str | None:
    """Why an MLP keeps its own forward; None: it can be fused."""
    parts = [getattr(mlp, name, None) for name in PARTS]
    if any(p is None for p in parts):
        return "not a gate/up/down MLP"
    config = getattr(mlp, "config", None)
    act = getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", None)
    if act not in ("silu", "swish"):
        return f"activation {act}"
    act_fn = getattr(mlp, "act_fn", None)  # Liger's SwiGLU MLP has none: it checks hidden_act itself
    if act_fn is not None and not _is_silu(act_fn):
        return f"activation {type(act_fn).__name__}"
    from peft.tuners.lora import LoraLayer

    names = set()
    for name, part in zip(PARTS, parts):
        if not isinstance(part, LoraLayer) or not hasattr(part, "lora_A"):
            return f"{name} has no LoRA adapter"
        reason = why_not(part)
        if reason is not None:
            return f"{name}: {reason}"
        adapter = next(iter(part.lora_A))
        if not isinstance(part.lora_dropout[adapter], torch.nn.Identity):
            return "LoRA dropout (down_proj's mask would have to be kept)"
        names.add(adapter)
    if len(names) != 1:
        return "the three adapters differ"
    return None


def _is_silu(act_fn) -> bool:
    """The MLP's activation computes SiLU (torch's SiLU, transformers' SiLUActivation...)."""
    probe = torch.linspace(-4.0, 4.0, 17)
    try:
        with torch.no_grad():
            return bool(torch.allclose(act_fn(probe), torch.nn.functional.silu(probe)))
    except Exception:
        return False


def _forward(self, x, *args, **kwargs):
    parts = [getattr(self, name) for name in PARTS]
    if args or kwargs or not torch.is_grad_enabled():
        return getattr(self, ATTR)(x, *args, **kwargs)
    for part in parts:
        active = part.active_adapters
        if part.disable_adapters or part.merged or len(active) != 1 or active[0] not in part.lora_A:
            return getattr(self, ATTR)(x, *args, **kwargs)
    name = parts[0].active_adapters[0]
    if any(part.active_adapters[0] != name for part in parts):
        return getattr(self, ATTR)(x, *args, **kwargs)
    gate, up, down = (part.get_base_layer() for part in parts)
    autocast, dtype = compute_dtype(x, gate)
    out_dtype = x.dtype
    if x.dtype != dtype:
        x = x.to(dtype)
    factors = []
    for part in parts:
        factors += [part.lora_A[name].weight, part.lora_B[name].weight]
    scalings = tuple(part.scaling[name] for part in parts)
    operands = (x, *factors, gate, up, down, scalings, dtype)
    y = run_outside_autocast(FusedLoraMLP.apply, operands, x.device.type, autocast, dtype)
    return y if autocast or y.dtype == out_dtype else y.to(out_dtype)


def apply(model) -> dict:
    """Fuse every eligible MLP of `model`: {"fused": n, "kept": {reason: count}}."""
    return patch(model, lambda m: all(hasattr(m, name) for name in PARTS), why_not_mlp, _forward, ATTR)


def remove(model) -> int:
    """Give every fused MLP of `model` its own forward back; the number of MLPs."""
    return unpatch(model, ATTR)
