"""A double-quantised 4-bit model's scales, unpacked once into fp32 (quantization.unpack_scales).

bitsandbytes' double quantisation keeps each 4-bit weight's absmax (one scale per 64 weights) as
8-bit codes with their own fp32 absmax (one per 256 scales) and an offset. Every dequantisation of
the weight (the forward, the backward and a recomputed forward of each 4-bit linear, every
micro-batch) first turns them back into fp32: bitsandbytes.functional.dequantize_4bit runs
`dequantize_blockwise(absmax, state2)`, then `absmax += offset`, then the 4-bit kernel. Here that
is done once, after loading, in the same order and dtype, and the weight's quant state keeps the
result as a plain (not nested) fp32 absmax: each later dequantisation is the 4-bit kernel alone on
the same fp32 scales, so the weights and every result are bit for bit those of the packed model.
bitsandbytes does the same to a weight it repacks for its CPU kernels (`_convert_weight_packed_
for_cpu`). The price is memory: 4 bytes a scale instead of about one (speed_auto sets it only
where the split's peak leaves room; cockpit.models.memory counts it).
"""

from __future__ import annotations


def unpack(model) -> dict:
    """Unpack the scales of every double-quantised 4-bit weight of `model`, in place:
    {"weights": how many, "bytes": what the device memory grew by}."""
    import bitsandbytes.functional as bnb_f
    import torch

    count, grown = 0, 0
    for module in model.modules():  # peft's wrapper shows its base's weight too: unpacked by then
        weight = getattr(module, "weight", None)
        state = getattr(weight, "quant_state", None)
        if state is None or not getattr(state, "nested", False):
            continue
        before = _bytes(state.absmax) + _bytes(state.state2.absmax) + _bytes(state.state2.code)
        with torch.no_grad():
            # exactly what dequantize_4bit does with a nested state at every call
            absmax = bnb_f.dequantize_blockwise(state.absmax, state.state2)
            absmax += state.offset
            if absmax.dtype != torch.float32:
                absmax = absmax.float()
        state.absmax = absmax
        state.state2, state.offset, state.nested = None, None, False
        count += 1
        grown += _bytes(absmax) - before
    return {"weights": count, "bytes": grown}


def _bytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()
