"""A merged Hugging Face causal LM -> one GGUF file, through llama.cpp's own `gguf` package.

Written for the families the catalog ships: llama, mistral (which llama.cpp runs as `llama`)
and qwen2. Tensor names, the q/k row order llama.cpp's rotary code expects, and the metadata
keys follow the GGUF spec (ggml-org/ggml docs/gguf.md) and the `gguf` package's constants.
Weights are f16, q8_0, q5_1, q5_0 or q4_0 (2-D weights whose rows are not a whole number of
32-value blocks stay f16, as llama.cpp does; below 8 bits the embeddings and the output layer stay
q8_0); norms and biases stay f32. The file is streamed: tensor infos
first, then one tensor at a time, so the conversion never holds a second copy of the model.
Tokenizers: byte-level BPE (`gpt2`, with merges) and SentencePiece-style ones (`llama`: tokens,
scores and types, as llama.cpp's SentencePiece tokenizer reads them; see `tokenizer_vocab`).
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
OUT_TYPES = ("f16", "q8_0", "q4_0", "q5_0", "q5_1")
# the types quantised in blocks of 32 values by the gguf package's own (numpy) quantizers
BLOCK_TYPES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q5_0": "Q5_0", "q5_1": "Q5_1"}
# below 8 bits the embeddings and the output layer stay q8_0: every token passes through them
# (llama.cpp's own quantize keeps them at higher precision too)
KEPT_Q8 = ("token_embd.weight", "output.weight")
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
    kind: str  # F32 | F16 | Q8_0 | Q5_1 | Q5_0 | Q4_0
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
        elif out_type in BLOCK_TYPES and shape[-1] % Q8_BLOCK == 0:
            kind = "Q8_0" if gguf_name in KEPT_Q8 else BLOCK_TYPES[out_type]
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
    model: str  # gpt2 (byte-level BPE) | llama (SentencePiece: BPE with byte fallback, or Unigram)
    pre: str | None
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    scores: list[float] | None = None  # SentencePiece only: llama.cpp merges the best-scored pair first
    add_space_prefix: bool | None = None  # SentencePiece only: "▁" put before the text
    source: str = "tokenizer.json"


KNOWN_SPLITS = {  # pre-tokenizer regexes llama.cpp knows by name
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",  # noqa: E501
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",  # noqa: E501
}
BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
ADDED_SCORE = -1000.0  # an added token beyond the SentencePiece vocabulary: never reached by merging
UNUSED_SCORE = -10000.0


def tokenizer_vocab(tokenizer_dir: Path, vocab_size: int, unk_id: int | None = None) -> Vocab:
    """The GGUF vocabulary of the tokenizer in `tokenizer_dir`, or CannotConvert saying why not.

    Byte-level BPE (tokenizer.json) is written as `gpt2` with its merges. SentencePiece-style
    tokenizers (Llama 2, Mistral, Gemma-like) are written as `llama`: tokens, scores and types, from
    `tokenizer.model` through the `sentencepiece` package when both are there, else from the fast
    tokenizer's tokenizer.json (BPE with byte fallback, or Unigram). `unk_id`: the tokenizer's unknown
    token, for a tokenizer.json whose model does not name it (transformers 5 writes none)."""
    json_path, spm_path = tokenizer_dir / "tokenizer.json", tokenizer_dir / "tokenizer.model"
    tokenizer_json = json.loads(json_path.read_text(encoding="utf-8")) if json_path.is_file() else None
    model = (tokenizer_json or {}).get("model") or {}
    if model.get("type") == "BPE" and not model.get("byte_fallback"):
        return byte_level_vocab(tokenizer_json, vocab_size)
    if spm_path.is_file() and _has_sentencepiece():
        return sentencepiece_vocab(spm_path, tokenizer_json, vocab_size)
    if tokenizer_json is not None:
        return sentencepiece_json_vocab(tokenizer_json, vocab_size, unk_id)
    why = (
        "it has only tokenizer.model and the `sentencepiece` package is not installed (pip install "
        "sentencepiece)"
        if spm_path.is_file()
        else "it has neither tokenizer.json nor tokenizer.model"
    )
    raise CannotConvert(f"GGUF export: the tokenizer in {tokenizer_dir} cannot be read: {why}")


def _has_sentencepiece() -> bool:
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        return False
    return True


def byte_level_vocab(tokenizer_json: dict, vocab_size: int) -> Vocab:
    """tokens, types and merges of a byte-level BPE tokenizer (tokenizer.json), padded to the
    model's vocab_size with unused tokens as llama.cpp expects one token per embedding row."""
    from gguf import TokenType

    model = tokenizer_json.get("model") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        raise CannotConvert(
            f"GGUF export: the tokenizer is {_kind(model)}, not byte-level BPE; read it with tokenizer_vocab"
        )
    by_id: dict[int, str] = {index: token for token, index in model["vocab"].items()}
    types: dict[int, int] = {}
    for added in tokenizer_json.get("added_tokens") or []:
        by_id[added["id"]] = added["content"]
        types[added["id"]] = TokenType.CONTROL if added.get("special") else TokenType.USER_DEFINED
    _check_count(max(by_id) + 1, vocab_size)
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


def _kind(model: dict) -> str:
    if model.get("type") == "BPE":
        return "SentencePiece-style BPE (byte_fallback)" if model.get("byte_fallback") else "byte-level BPE"
    return str(model.get("type") or "unknown")


def _check_count(count: int, vocab_size: int) -> None:
    if count > vocab_size:
        raise CannotConvert(
            f"GGUF export: the tokenizer has {count} tokens, the model only {vocab_size} rows"
        )


def sentencepiece_json_vocab(tokenizer_json: dict, vocab_size: int, unk_id: int | None = None) -> Vocab:
    """A SentencePiece-style vocabulary from a fast tokenizer's tokenizer.json.

    BPE with byte fallback (what transformers makes of Llama 2's and Mistral's tokenizer.model):
    SentencePiece merges the adjacent pair whose joined piece scores best, so each piece's score is
    minus the rank of the first merge that makes it; pieces no merge makes (single characters,
    bytes, specials) score below every merge. Unigram: the scores it holds. Types: the unknown token, `<0xNN>`
    bytes, special added tokens as control, other added tokens as user-defined."""
    from gguf import TokenType

    model = tokenizer_json.get("model") or {}
    kind = model.get("type")
    if kind == "BPE" and model.get("byte_fallback"):
        pieces = {token: index for token, index in model["vocab"].items()}
        merges = model.get("merges") or []
        made_by: dict[str, int] = {}
        for rank, merge in enumerate(merges):
            left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
            made_by.setdefault(left + right, rank)
        # a piece no merge makes scores below every merge, so no other split of it is ever preferred
        by_id = {index: (token, -float(made_by.get(token, len(merges)))) for token, index in pieces.items()}
        if model.get("unk_token") in pieces:
            unk_id = pieces[model["unk_token"]]
    elif kind == "Unigram":
        by_id = {index: (token, float(score)) for index, (token, score) in enumerate(model["vocab"])}
        unk_id = model["unk_id"] if model.get("unk_id") is not None else unk_id
    else:
        raise CannotConvert(
            f"GGUF export: the tokenizer is {_kind(model)}; this converter writes byte-level BPE (GPT-2 "
            "style: Qwen2, Llama 3, SmolLM) and SentencePiece-style tokenizers (BPE with byte fallback, or "
            "Unigram: Llama 2, Mistral). Export the merged safetensors (--merge without --gguf) and convert "
            "it with a tool that knows this tokenizer."
        )
    types: dict[int, int] = {}
    for index, (token, _) in by_id.items():
        if index == unk_id:
            types[index] = TokenType.UNKNOWN
        elif BYTE_TOKEN.fullmatch(token):
            types[index] = TokenType.BYTE
    for added in tokenizer_json.get("added_tokens") or []:
        index = added["id"]
        if index not in by_id:
            by_id[index] = (added["content"], ADDED_SCORE)
        if index != unk_id:
            types[index] = TokenType.CONTROL if added.get("special") else TokenType.USER_DEFINED
    _check_count(max(by_id) + 1, vocab_size)
    return _padded(by_id, types, vocab_size, add_space_prefix(tokenizer_json), "tokenizer.json")


def sentencepiece_vocab(model_path: Path, tokenizer_json: dict | None, vocab_size: int) -> Vocab:
    """tokens, scores and types read from tokenizer.model by the `sentencepiece` package, with the
    added tokens of tokenizer.json (when there is one) after them."""
    from gguf import TokenType
    from sentencepiece import SentencePieceProcessor

    processor = SentencePieceProcessor()
    processor.LoadFromFile(str(model_path))
    by_id: dict[int, tuple[str, float]] = {}
    types: dict[int, int] = {}
    for index in range(processor.vocab_size()):
        by_id[index] = (processor.IdToPiece(index), float(processor.GetScore(index)))
        if processor.IsUnknown(index):
            types[index] = TokenType.UNKNOWN
        elif processor.IsControl(index):
            types[index] = TokenType.CONTROL
        elif processor.IsByte(index):
            types[index] = TokenType.BYTE
        elif processor.IsUnused(index):
            types[index] = TokenType.UNUSED
    for added in (tokenizer_json or {}).get("added_tokens") or []:
        index = added["id"]
        if index in by_id and by_id[index][0] != added["content"]:
            raise CannotConvert(
                f"GGUF export: tokenizer.json's added token {added['content']!r} has id {index}, which "
                f"tokenizer.model gives to {by_id[index][0]!r}; the two files disagree"
            )
        if index not in by_id:
            by_id[index] = (added["content"], ADDED_SCORE)
            types[index] = TokenType.CONTROL if added.get("special") else TokenType.USER_DEFINED
        elif types.get(index, TokenType.NORMAL) == TokenType.NORMAL:
            types[index] = TokenType.CONTROL if added.get("special") else TokenType.USER_DEFINED
    _check_count(max(by_id) + 1, vocab_size)
    prefix = add_space_prefix(tokenizer_json) if tokenizer_json else None
    return _padded(by_id, types, vocab_size, prefix, "tokenizer.model")


def _padded(by_id, types, vocab_size: int, prefix: bool | None, source: str) -> Vocab:
    from gguf import TokenType

    tokens, scores, token_types = [], [], []
    for index in range(vocab_size):
        if index in by_id:
            token, score = by_id[index]
            kind = types.get(index, TokenType.NORMAL)
        else:
            token, score, kind = f"[PAD{index}]", UNUSED_SCORE, TokenType.UNUSED
        tokens.append(token)
        scores.append(score)
        token_types.append(int(kind))
    return Vocab("llama", None, tokens, token_types, [], scores, prefix, source)


def add_space_prefix(tokenizer_json: dict) -> bool | None:
    """Whether the tokenizer puts "▁" before the text (SentencePiece's add_dummy_prefix): a Prepend
    normalizer or a Metaspace pre-tokenizer that prepends; None when it cannot be told."""

    def steps_of(part: dict | None) -> list[dict]:
        if not part:
            return []
        inner = part.get("normalizers") or part.get("pretokenizers")
        return [s for p in inner for s in steps_of(p)] if inner else [part]

    found = steps_of(tokenizer_json.get("normalizer")) + steps_of(tokenizer_json.get("pre_tokenizer"))
    for step in found:
        if step.get("type") == "Prepend" and step.get("prepend") == "\u2581":
            return True
        if step.get("type") == "Metaspace":
            scheme = step.get("prepend_scheme", "always" if step.get("add_prefix_space", True) else "never")
            return scheme != "never"
    return False if found else None


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
    add_bos, add_eos, chat_template (train_backend.export.tokens.special_tokens)."""
    import gguf

    if out_type not in OUT_TYPES:
        raise CannotConvert(f"GGUF export: type {out_type!r}; this converter writes {', '.join(OUT_TYPES)}")
    arch = gguf_architecture(config["model_type"])
    rope = rope_settings(config)
    planned = plan_tensors(config, shapes, out_type)
    vocab = tokenizer_vocab(tokenizer_dir, int(config["vocab_size"]), special.get("unk"))

    writer = gguf.GGUFWriter(str(path), arch)
    _add_model_keys(writer, config, rope, name, out_type)
    _add_tokenizer_keys(writer, vocab, special)
    extra: list[tuple[str, np.ndarray]] = []
    if rope["rope_type"] == "llama3":
        extra.append(("rope_freqs.weight", llama3_rope_factors(config)))
    _add_tensor_infos(writer, planned, extra)
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


def _add_model_keys(writer, config: dict, rope: dict, name: str, out_type: str) -> None:
    """The architecture's shape, its rotary embedding, the file's type."""
    import gguf

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
    file_type = getattr(gguf.LlamaFileType, f"MOSTLY_{out_type.upper()}")
    writer.add_file_type(int(file_type))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _add_tokenizer_keys(writer, vocab: Vocab, special: dict) -> None:
    """The vocabulary, its merges or scores, the special tokens and the chat template."""
    writer.add_tokenizer_model(vocab.model)
    if vocab.pre is not None:
        writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    if vocab.scores is not None:
        writer.add_token_scores(vocab.scores)
    if vocab.merges:
        writer.add_token_merges(vocab.merges)
    if vocab.add_space_prefix is not None:
        writer.add_add_space_prefix(vocab.add_space_prefix)
    for key, add in (
        ("bos", writer.add_bos_token_id),
        ("eos", writer.add_eos_token_id),
        ("unk", writer.add_unk_token_id),
        ("pad", writer.add_pad_token_id),
    ):
        if special.get(key) is not None:
            add(int(special[key]))
    writer.add_add_bos_token(bool(special.get("add_bos")))
    writer.add_add_eos_token(bool(special.get("add_eos")))
    if special.get("chat_template"):
        writer.add_chat_template(special["chat_template"])


def _add_tensor_infos(writer, planned: list[Planned], extra: list[tuple[str, np.ndarray]]) -> None:
    """Each tensor's name, shape and type, in the order their data follows."""
    import gguf

    qtype = gguf.GGMLQuantizationType
    for item in planned:
        if item.kind not in ("F16", "F32"):
            kind = qtype[item.kind]
            byte_shape = gguf.quant_shape_to_byte_shape(item.shape, kind)
            writer.add_tensor_info(
                item.gguf_name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), kind
            )
        else:
            dtype = np.dtype(np.float32 if item.kind == "F32" else np.float16)
            writer.add_tensor_info(
                item.gguf_name, item.shape, dtype, int(np.prod(item.shape)) * dtype.itemsize
            )
    for gguf_name, array in extra:
        writer.add_tensor_info(gguf_name, array.shape, array.dtype, array.nbytes)


def _converted(planned: list[Planned], tensors: Callable[[str], np.ndarray]) -> Iterator[np.ndarray]:
    import gguf

    for item in planned:
        data = np.ascontiguousarray(tensors(item.hf_name), dtype=np.float32)
        if tuple(data.shape) != item.shape:
            raise CannotConvert(f"GGUF export: {item.hf_name} has shape {data.shape}, planned {item.shape}")
        if item.permute_heads:
            data = permute_for_rotary(data, item.permute_heads)
        if item.kind not in ("F16", "F32"):
            yield gguf.quantize(data, gguf.GGMLQuantizationType[item.kind])
        elif item.kind == "F16":
            yield data.astype(np.float16)
        else:
            yield data
