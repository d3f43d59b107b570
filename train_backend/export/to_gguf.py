"""A merged Hugging Face causal LM -> one GGUF file, through llama.cpp's own `gguf` package.

Written for the families the catalog ships: llama, mistral (which llama.cpp runs as `llama`)
and qwen2. Tensor names, the q/k row order llama.cpp's rotary code expects, and the metadata
keys follow the GGUF spec (ggml-org/ggml docs/gguf.md) and the `gguf` package's constants.
Weights are f16 or q8_0 (2-D weights whose rows are not a whole number of 32-value blocks
stay f16, as llama.cpp does); norms and biases stay f32. The file is streamed: tensor infos
first, then one tensor at a time, so the conversion never holds a second copy of the model.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# HF model_type -> GGUF general.architecture
ARCHITECTURES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}
OUT_TYPES = ("f16", "q8_0")
ROPE_TYPES = ("default", "linear", "llama3")
Q8_BLOCK = 32

LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


class CannotConvert(ValueError):
    """This model (architecture, rope scaling, tokenizer) has no GGUF conversion here; says why."""


@dataclass(frozen=True)
class Planned:
    hf_name: str
    gguf_name: str
    shape: tuple[int, ...]
    kind: str  # F32 | F16 | Q8_0
    permute_heads: int | None = None  # llama's q/k rows, reordered for llama.cpp's rotary layout


def gguf_architecture(model_type: str) -> str:
    if model_type not in ARCHITECTURES:
        raise CannotConvert(
            f"GGUF export: architecture {model_type!r} cannot be converted here; this converter writes "
            f"{', '.join(sorted(ARCHITECTURES))} (the families the catalog ships). Export the merged "
            "safetensors (--merge without --gguf) and convert it with a tool that knows this architecture."
        )
    return ARCHITECTURES[model_type]


def rope_settings(config: dict) -> dict:
    """rope_theta and scaling from a config of transformers 4 (rope_theta, rope_scaling) or 5
    (rope_parameters)."""
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    rope_type = params.get("rope_type") or params.get("type") or "default"
    theta = params.get("rope_theta", config.get("rope_theta", 10000.0))
    if rope_type not in ROPE_TYPES:
        raise CannotConvert(
            f"GGUF export: rope scaling {rope_type!r} is not converted here (only {', '.join(ROPE_TYPES)})"
        )
    return {**params, "rope_type": rope_type, "rope_theta": float(theta)}


def head_dim(config: dict) -> int:
    return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])


def llama3_rope_factors(config: dict) -> np.ndarray:
    """Per-frequency factors of Llama 3.1's rope scaling (Meta's published formula), which llama.cpp
    reads from the `rope_freqs.weight` tensor."""
    rope = rope_settings(config)
    dim = head_dim(config)
    factor = rope["factor"]
    low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old_context = rope.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old_context / low, old_context / high
    freqs = 1.0 / (rope["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


def plan_tensors(config: dict, shapes: dict[str, tuple[int, ...]], out_type: str) -> list[Planned]:
    """Every tensor of the model, renamed and typed; an unexpected tensor is refused, never dropped."""
    model_type = config["model_type"]
    gguf_architecture(model_type)
    permute = ARCHITECTURES[model_type] == "llama"
    heads, kv_heads = (
        config["num_attention_heads"],
        config.get("num_key_value_heads") or config["num_attention_heads"],
    )
    tied = bool(config.get("tie_word_embeddings"))
    planned = []
    for hf_name, shape in shapes.items():
        if hf_name == "lm_head.weight" and tied:
            continue  # llama.cpp uses token_embd for the output when output.weight is absent
        gguf_name = TOP_NAMES.get(hf_name)
        permute_heads = None
        if gguf_name is None:
            match = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", hf_name)
            leaf = LAYER_NAMES.get(match.group(2)) if match else None
            if leaf is None:
                raise CannotConvert(
                    f"GGUF export: tensor {hf_name!r} of this {model_type} model has no GGUF name here "
                    "(a variant this converter does not know); nothing was written"
                )
            gguf_name = f"blk.{match.group(1)}.{leaf}"
            if permute and leaf.startswith("attn_q."):
                permute_heads = heads
            elif permute and leaf.startswith("attn_k."):
                permute_heads = kv_heads
        if len(shape) == 1:
            kind = "F32"
        elif out_type == "q8_0" and shape[-1] % Q8_BLOCK == 0:
            kind = "Q8_0"
        else:
            kind = "F16"
        planned.append(Planned(hf_name, gguf_name, tuple(shape), kind, permute_heads))
    return planned


def permute_for_rotary(weights: np.ndarray, n_head: int) -> np.ndarray:
    """HF's llama q/k rows put each head's two rotary halves one after the other; llama.cpp's rotary
    kernel takes them interleaved in pairs. Reorder the rows of each head to that layout."""
    rows = weights.shape[0]
    half = rows // n_head // 2
    return weights.reshape(n_head, 2, half, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


# ---------------------------------------------------------------- tokenizer


@dataclass
class Vocab:
    model: str  # gpt2 (byte-level BPE)
    pre: str
    tokens: list[str]
    token_types: list[int]
    merges: list[str]


KNOWN_SPLITS = {  # pre-tokenizer regexes llama.cpp knows by name
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",  # noqa: E501
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",  # noqa: E501
}


def byte_level_vocab(tokenizer_json: dict, vocab_size: int) -> Vocab:
    """tokens, types and merges of a byte-level BPE tokenizer (tokenizer.json), padded to the
    model's vocab_size with unused tokens as llama.cpp expects one token per embedding row."""
    from gguf import TokenType

    model = tokenizer_json.get("model") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        kind = "SentencePiece-style BPE (byte_fallback)" if model.get("byte_fallback") else model.get("type")
        raise CannotConvert(
            f"GGUF export: the tokenizer is {kind}; this converter writes byte-level BPE tokenizers "
            "(GPT-2 style: Qwen2, Llama 3, SmolLM, the shipped one). Export the merged safetensors "
            "(--merge without --gguf) and convert it with llama.cpp's convert_hf_to_gguf.py."
        )
    by_id: dict[int, str] = {index: token for token, index in model["vocab"].items()}
    types: dict[int, int] = {}
    for added in tokenizer_json.get("added_tokens") or []:
        by_id[added["id"]] = added["content"]
        types[added["id"]] = TokenType.CONTROL if added.get("special") else TokenType.USER_DEFINED
    count = max(by_id) + 1
    if count > vocab_size:
        raise CannotConvert(
            f"GGUF export: the tokenizer has {count} tokens, the model only {vocab_size} rows"
        )
    tokens, token_types = [], []
    for index in range(vocab_size):
        if index in by_id:
            tokens.append(by_id[index])
            token_types.append(int(types.get(index, TokenType.NORMAL)))
        else:
            tokens.append(f"[PAD{index}]")
            token_types.append(int(TokenType.UNUSED))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    return Vocab("gpt2", pre_tokenizer_name(tokenizer_json.get("pre_tokenizer")), tokens, token_types, merges)


def pre_tokenizer_name(pre: dict | None) -> str:
    """llama.cpp's name for the way text is split before BPE; `default` (GPT-2's regex) otherwise."""
    if not pre:
        return "default"
    if pre.get("type") == "ByteLevel":
        return "gpt2" if pre.get("use_regex", True) else "default"
    parts = pre.get("pretokenizers") or []
    kinds = [p.get("type") for p in parts]
    if kinds == ["Digits", "ByteLevel"] and parts[0].get("individual_digits"):
        return "smollm"
    for part in parts:
        pattern = (part.get("pattern") or {}).get("Regex")
        if part.get("type") == "Split" and pattern in KNOWN_SPLITS:
            return KNOWN_SPLITS[pattern]
    return "default"


# ---------------------------------------------------------------- writing


@dataclass
class GgufResult:
    path: str
    tensors: int
    bytes: int
    out_type: str
    architecture: str
    types: dict[str, int]  # F16/Q8_0/F32 -> tensor count

    def to_event(self) -> dict:
        return {
            "file": Path(self.path).name,
            "tensors": self.tensors,
            "bytes": self.bytes,
            "type": self.out_type,
            "architecture": self.architecture,
            "types": self.types,
        }


def write_gguf(
    path: Path,
    config: dict,
    tensors: Callable[[str], np.ndarray],
    shapes: dict[str, tuple[int, ...]],
    tokenizer_dir: Path,
    special: dict,
    out_type: str,
    name: str,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> GgufResult:
    """`tensors(hf_name)` gives one weight as a float32 array; `special`: bos/eos/unk/pad ids,
    add_bos, chat_template (train_backend.export.tokens.special_tokens)."""
    import gguf

    if out_type not in OUT_TYPES:
        raise CannotConvert(f"GGUF export: type {out_type!r}; this converter writes {', '.join(OUT_TYPES)}")
    arch = gguf_architecture(config["model_type"])
    rope = rope_settings(config)
    planned = plan_tensors(config, shapes, out_type)
    tokenizer_json = json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = byte_level_vocab(tokenizer_json, int(config["vocab_size"]))

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_context_length(int(config.get("max_position_embeddings") or 4096))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config.get("num_key_value_heads") or config["num_attention_heads"]))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_rope_dimension_count(head_dim(config))
    if head_dim(config) != config["hidden_size"] // config["num_attention_heads"]:
        writer.add_key_length(head_dim(config))
        writer.add_value_length(head_dim(config))
    if rope["rope_type"] == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    writer.add_vocab_size(int(config["vocab_size"]))
    file_type = gguf.LlamaFileType.MOSTLY_Q8_0 if out_type == "q8_0" else gguf.LlamaFileType.MOSTLY_F16
    writer.add_file_type(int(file_type))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    writer.add_tokenizer_model(vocab.model)
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    writer.add_token_merges(vocab.merges)
    for key, add in (
        ("bos", writer.add_bos_token_id),
        ("eos", writer.add_eos_token_id),
        ("unk", writer.add_unk_token_id),
        ("pad", writer.add_pad_token_id),
    ):
        if special.get(key) is not None:
            add(int(special[key]))
    writer.add_add_bos_token(bool(special.get("add_bos")))
    writer.add_add_eos_token(False)
    if special.get("chat_template"):
        writer.add_chat_template(special["chat_template"])

    extra: list[tuple[str, np.ndarray]] = []
    if rope["rope_type"] == "llama3":
        extra.append(("rope_freqs.weight", llama3_rope_factors(config)))
    qtype = gguf.GGMLQuantizationType
    for item in planned:
        if item.kind == "Q8_0":
            byte_shape = gguf.quant_shape_to_byte_shape(item.shape, qtype.Q8_0)
            writer.add_tensor_info(
                item.gguf_name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), qtype.Q8_0
            )
        else:
            dtype = np.dtype(np.float32 if item.kind == "F32" else np.float16)
            writer.add_tensor_info(
                item.gguf_name, item.shape, dtype, int(np.prod(item.shape)) * dtype.itemsize
            )
    for gguf_name, array in extra:
        writer.add_tensor_info(gguf_name, array.shape, array.dtype, array.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    total = len(planned) + len(extra)
    for done, data in enumerate(_converted(planned, tensors), start=1):
        writer.write_tensor_data(data)
        progress(done, total)
    for _, array in extra:
        writer.write_tensor_data(array)
    writer.close()
    kinds: dict[str, int] = {}
    for item in planned:
        kinds[item.kind] = kinds.get(item.kind, 0) + 1
    for _ in extra:
        kinds["F32"] = kinds.get("F32", 0) + 1
    progress(total, total)
    return GgufResult(str(path), total, path.stat().st_size, out_type, arch, kinds)


def _converted(planned: list[Planned], tensors: Callable[[str], np.ndarray]) -> Iterator[np.ndarray]:
    import gguf

    for item in planned:
        data = np.ascontiguousarray(tensors(item.hf_name), dtype=np.float32)
        if tuple(data.shape) != item.shape:
            raise CannotConvert(f"GGUF export: {item.hf_name} has shape {data.shape}, planned {item.shape}")
        if item.permute_heads:
            data = permute_for_rotary(data, item.permute_heads)
        if item.kind == "Q8_0":
            yield gguf.quantize(data, gguf.GGMLQuantizationType.Q8_0)
        elif item.kind == "F16":
            yield data.astype(np.float16)
        else:
            yield data
