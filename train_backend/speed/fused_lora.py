"""The fused LoRA backend of `speed: auto`: a frozen linear and its adapter in one autograd function.

peft's LoRA layer runs, for each adapted linear and forward pass, the base layer (for QLoRA
bitsandbytes' own autograd function: dequantise, matmul), a copy of its output (the 4-bit layer
clones it), dropout, lora_A, lora_B, the scaling and the sum: five more kernels over the output
and four autograd nodes, each with its Python. Here, one function (our own code, the LoRA
algebra written out):

    forward   W = dequant(base)            (QLoRA; the 16-bit weight as it is for LoRA)
              y = x W^T (+ bias);  u = x_d A^T;  y += s u B^T     (addmm into y: no extra pass)
    backward  g = s (dy B)                 [tokens x r]
              dx = dy W + g A              (W dequantised again; addmm into dx)
              dA = g^T x_d;  dB = s dy^T u

x_d is the dropped input (the same tensor as x without dropout). It saves x_d and u, as peft's
layer does, and neither x (W does not train) nor the 16-bit weight. The LoRA factors are
used in the compute dtype (autocast's, else the input's) and their gradients returned in their
own dtype, as autograd returns them through peft's casts.

A layer keeps peft's own forward where this does not apply: more than one adapter, a LoRA variant
(DoRA...), lora_bias, fan_in_fan_out, a base that is neither nn.Linear nor bitsandbytes'
Linear4bit, a base weight that trains; and, per call, with grad off (evaluation and generation:
bitsandbytes' 4-bit inference kernels are faster for a few tokens), adapters disabled or merged,
or any extra argument. The state dict, saving, merging and loading are peft's, unchanged.
"""

from __future__ import annotations

import types

import torch

ATTR = "_cockpit_peft_forward"  # the layer's own forward, kept on the instance


def _dense(base, dtype: torch.dtype) -> torch.Tensor:
    """The base layer's weight as a dense [out, in] matrix in `dtype`."""
    weight = base.weight
    state = getattr(weight, "quant_state", None)
    if state is not None:
        import bitsandbytes.functional as bnb_f

        dense = bnb_f.dequantize_4bit(weight.data, state)
        return dense if dense.dtype == dtype else dense.to(dtype)
    return weight if weight.dtype == dtype else weight.to(dtype)


def base_linear(x2, base, dtype: torch.dtype) -> torch.Tensor:
    """x2 W^T (+ bias) of the frozen base layer, W dense in `dtype` only for the matmul."""
    weight = _dense(base, dtype)
    bias = base.bias
    return torch.mm(x2, weight.t()) if bias is None else torch.addmm(bias.to(dtype), x2, weight.t())


class FusedLoraLinear(torch.autograd.Function):
    """y = x W^T + b + s (x_d A^T) B^T with W frozen; see the module's docstring."""

    @staticmethod
    def forward(ctx, x, x_d, lora_a, lora_b, base, scaling, dtype):
        in_f, out_f = x.shape[-1], lora_b.shape[0]
        same = x_d is x
        x2 = x.reshape(-1, in_f)
        xd2 = x2 if same else x_d.reshape(-1, in_f)
        a = lora_a.to(dtype)
        b = lora_b.to(dtype)
        y = base_linear(x2, base, dtype)
        u = torch.mm(xd2, a.t())
        y.addmm_(u, b.t(), alpha=scaling)
        ctx.base, ctx.scaling, ctx.dtype, ctx.same = base, scaling, dtype, same
        ctx.x_shape, ctx.xd_shape = x.shape, x_d.shape
        ctx.a_dtype, ctx.b_dtype = lora_a.dtype, lora_b.dtype
        # x itself is not needed (W does not train); the factors as cast (r x features: small, as
        # autocast's cast cache keeps them on peft's path), so the backward casts nothing again
        ctx.save_for_backward(xd2, u, a, b)
        return y.view(*x.shape[:-1], out_f)

    @staticmethod
    def backward(ctx, dy):
        xd2, u, a, b = ctx.saved_tensors
        dtype, scaling = ctx.dtype, ctx.scaling
        dy2 = dy.reshape(-1, dy.shape[-1])
        if dy2.dtype != dtype:
            dy2 = dy2.to(dtype)
        g = torch.mm(dy2, b)  # dL/du
        if scaling != 1:
            g.mul_(scaling)
        grad_a = torch.mm(g.t(), xd2) if ctx.needs_input_grad[2] else None
        grad_b = None
        if ctx.needs_input_grad[3]:
            grad_b = torch.mm(dy2.t(), u)
            if scaling != 1:
                grad_b.mul_(scaling)
        grad_x = grad_xd = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            weight = _dense(ctx.base, dtype)
            grad_x = torch.mm(dy2, weight)
            del weight
            if ctx.same:
                grad_x.addmm_(g, a)
            else:
                grad_xd = torch.mm(g, a).view(ctx.xd_shape)
            grad_x = grad_x.view(ctx.x_shape)
        if grad_a is not None and grad_a.dtype != ctx.a_dtype:
            grad_a = grad_a.to(ctx.a_dtype)
        if grad_b is not None and grad_b.dtype != ctx.b_dtype:
            grad_b = grad_b.to(ctx.b_dtype)
        return grad_x, grad_xd, grad_a, grad_b, None, None, None


def why_not(layer) -> str | None:
    """Why a peft LoRA layer keeps peft's forward; None: it can be fused."""
    base = layer.get_base_layer()
    if not isinstance(base, torch.nn.Linear):
        return "not a linear"
    if len(layer.lora_A) != 1:
        return "more than one adapter"
    name = next(iter(layer.lora_A))
    if getattr(layer, "lora_variant", {}).get(name) is not None:
        return "a LoRA variant (DoRA)"
    if getattr(layer, "lora_bias", {}).get(name):
        return "lora_bias"
    if getattr(layer, "fan_in_fan_out", False):
        return "fan_in_fan_out"
    if not isinstance(layer.lora_A[name], torch.nn.Linear) or not isinstance(
        layer.lora_B[name], torch.nn.Linear
    ):
        return "its adapter is not a pair of linears"
    dropout = layer.lora_dropout[name]
    if not isinstance(dropout, (torch.nn.Identity, torch.nn.Dropout)):
        return f"dropout {type(dropout).__name__}"
    kind = type(base).__name__
    if kind == "Linear4bit":
        if getattr(base.weight, "quant_state", None) is None:
            return "its 4-bit weight is not quantised yet"
    elif type(base) is not torch.nn.Linear:
        return f"base layer {kind}"
    if base.weight.requires_grad or (base.bias is not None and base.bias.requires_grad):
        return "its base weight trains"
    return None


def _forward(self, x, *args, **kwargs):
    active = self.active_adapters
    if (
        args
        or kwargs
        or not torch.is_grad_enabled()
        or self.disable_adapters
        or self.merged
        or len(active) != 1
        or active[0] not in self.lora_A
    ):
        return getattr(self, ATTR)(x, *args, **kwargs)
    name = active[0]
    base = self.get_base_layer()
    autocast, dtype = compute_dtype(x, base)
    out_dtype = x.dtype
    if x.dtype != dtype:
        x = x.to(dtype)
    x_d = self.lora_dropout[name](x)
    operands = (x, x_d, self.lora_A[name].weight, self.lora_B[name].weight, base, self.scaling[name], dtype)
    y = run_outside_autocast(FusedLoraLinear.apply, operands, x.device.type, autocast, dtype)
    return y if autocast or y.dtype == out_dtype else y.to(out_dtype)


def compute_dtype(x, base) -> tuple[bool, torch.dtype]:
    """(autocast on, the compute dtype): a 4-bit base's own compute_dtype where set (bitsandbytes runs
    its matmul in it whatever autocast says, so peft's layer does too: the fused one keeps to it), else
    autocast's, else the 16-bit weight's or the input's. The trainer sets the compute_dtype to its
    precision, autocast's dtype, so on its runs the two rules agree."""
    autocast = torch.is_autocast_enabled(x.device.type)
    quantized = getattr(base.weight, "quant_state", None) is not None
    if quantized and getattr(base, "compute_dtype", None) is not None:
        return autocast, base.compute_dtype
    if autocast:
        return True, torch.get_autocast_dtype(x.device.type)
    if getattr(base, "compute_dtype", None) is not None:
        return False, base.compute_dtype
    return False, base.weight.dtype if base.weight.is_floating_point() else x.dtype


def run_outside_autocast(apply, operands: tuple, device_type: str, autocast: bool, dtype: torch.dtype):
    """`apply(*operands)`, with autocast off around it where it would recast what the function computes in
    `dtype` (a 4-bit base's own compute_dtype, not autocast's). Where the two agree the call is direct:
    entering autocast's context costs ~9 us, a few hundred times a forward."""
    if autocast and dtype != torch.get_autocast_dtype(device_type):
        with torch.autocast(device_type, enabled=False):
            return apply(*operands)
    return apply(*operands)


def patch(model, candidate, why, forward, attr: str, refuse: str | None = None) -> dict:
    """Give every module of `model` that is a `candidate` and has no `why` (a reason to keep its own)
    the `forward`, its own kept on the instance as `attr`: {"fused": n, "kept": {reason: count}}.
    Modules already patched are left alone; `refuse`: none, each kept for that reason."""
    fused, kept = 0, {}
    for module in model.modules():
        if not candidate(module) or hasattr(module, attr):
            continue
        reason = refuse or why(module)
        if reason is not None:
            kept[reason] = kept.get(reason, 0) + 1
            continue
        setattr(module, attr, module.forward)
        module.forward = types.MethodType(forward, module)
        fused += 1
    return {"fused": fused, "kept": kept}


def unpatch(model, attr: str) -> int:
    """Give every module `patch` changed its own forward back; how many."""
    n = 0
    for module in model.modules():
        if attr in module.__dict__:
            del module.__dict__["forward"]
            del module.__dict__[attr]
            n += 1
    return n


def apply(model, refuse: str | None = None) -> dict:
    """Fuse every eligible peft LoRA linear of `model`: {"fused": n, "kept": {reason: count}}.
    `refuse`: fuse none, every layer kept for that reason (one the layers cannot tell, e.g. FSDP)."""
    from peft.tuners.lora import LoraLayer

    def lora_linear(module) -> bool:
        return isinstance(module, LoraLayer) and hasattr(module, "lora_A")

    return patch(model, lora_linear, why_not, _forward, ATTR, refuse)


def remove(model) -> int:
    """Give every fused layer of `model` its peft forward back; the number of layers."""
    return unpatch(model, ATTR)
