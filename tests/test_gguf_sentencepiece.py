"""GGUF for SentencePiece-style tokenizers (Llama 2, Mistral): a Llama-2-style tokenizer built here
from the demo data (BPE with byte fallback, "▁" for spaces, <unk>/<s>/</s>, 256 byte tokens, merges
ordered by score as transformers converts a tokenizer.model), a tiny llama model, written by the
export's converter and read back: the vocabulary, scores, types and special ids in the file, and the
same token ids from the tokenizer transformers builds out of the GGUF alone (it uses the scores,
as llama.cpp does: the file carries no merges)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from train_backend.export import to_gguf
from train_backend.export.tokens import special_tokens

DEMO = Path(__file__).resolve().parents[1] / "cockpit" / "data" / "demo" / "train.jsonl"
TEXTS = [
    "<s>[INST] What is the capital of France? [/INST] The capital of France is Paris. </s>",
    "Hello world, this is a test of 12345 numbers and   spaces.",
    "naïve café, 日本語 and emoji 🙂 fall back to bytes",
    " leading space\nand a new line\tand a tab",
]
TEMPLATE = "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"


def build_llama2_style_tokenizer(folder: Path, pieces: int = 400):
    """A Llama-2-style tokenizer: pieces learnt from the demo data by `tokenizers`' BPE trainer, laid out
    as SentencePiece does (specials, then the 256 bytes, then the pieces in order), with the merges a
    score-ordered vocabulary implies (transformers' own conversion of a tokenizer.model)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaTokenizer
    from transformers.tokenization_utils_base import generate_merges

    texts = [json.loads(line)["text"].replace("<s>", "").replace("</s>", "") for line in DEMO.open()]
    learner = Tokenizer(models.BPE())
    learner.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    learner.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=pieces, show_progress=False))
    learnt = sorted(learner.get_vocab().items(), key=lambda item: item[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{byte:02X}>": 3 + byte for byte in range(256)})
    for piece, _ in learnt:
        vocab.setdefault(piece, len(vocab))
    scores = {piece: -float(index) for piece, index in vocab.items() if index >= 259}
    merges = generate_merges(vocab, scores)
    tokenizer = LlamaTokenizer(vocab=vocab, merges=merges, add_bos_token=True, chat_template=TEMPLATE)
    tokenizer.save_pretrained(str(folder))
    return tokenizer


@pytest.fixture(scope="module")
def spm_gguf(tmp_path_factory):
    import gguf

    folder = tmp_path_factory.mktemp("spm")
    tokenizer = build_llama2_style_tokenizer(folder)
    assert json.loads((folder / "tokenizer.json").read_text())["model"]["byte_fallback"]
    rows = len(tokenizer) + 3  # the embedding has rows no token uses: padded in the file
    config = {
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2,
        "num_hidden_layers": 1, "intermediate_size": 128, "vocab_size": rows, "tie_word_embeddings": False,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
    }  # fmt: skip
    shapes = {
        "model.embed_tokens.weight": (rows, 64),
        "model.layers.0.input_layernorm.weight": (64,),
        "model.layers.0.self_attn.q_proj.weight": (64, 64),
        "model.layers.0.self_attn.k_proj.weight": (64, 64),
        "model.layers.0.self_attn.v_proj.weight": (64, 64),
        "model.layers.0.self_attn.o_proj.weight": (64, 64),
        "model.layers.0.post_attention_layernorm.weight": (64,),
        "model.layers.0.mlp.gate_proj.weight": (128, 64),
        "model.layers.0.mlp.up_proj.weight": (128, 64),
        "model.layers.0.mlp.down_proj.weight": (64, 128),
        "model.norm.weight": (64,),
        "lm_head.weight": (rows, 64),
    }
    rng = np.random.default_rng(0)
    special = special_tokens(tokenizer)
    assert special["add_bos"] and not special["add_eos"]
    path = folder / "model-f16.gguf"
    to_gguf.write_gguf(
        path,
        config,
        lambda name: rng.standard_normal(shapes[name]).astype(np.float32),
        shapes,
        folder,
        special,
        "f16",
        "spm-test",
    )
    return folder, path, tokenizer, gguf.GGUFReader(str(path)), rows


def _field(reader, key):
    field = reader.fields[key]
    if len(field.data) == 1 and key not in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores"):
        value = field.parts[field.data[0]]
        return bytes(value).decode() if value.dtype == np.uint8 else value[0].item()
    return [
        bytes(field.parts[i]).decode() if field.parts[i].dtype == np.uint8 else field.parts[i][0].item()
        for i in field.data
    ]


def test_the_gguf_holds_the_sentencepiece_vocabulary(spm_gguf):
    from gguf import TokenType

    _, _, tokenizer, reader, rows = spm_gguf
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    assert "tokenizer.ggml.merges" not in reader.fields  # llama.cpp merges by score
    tokens = _field(reader, "tokenizer.ggml.tokens")
    scores = _field(reader, "tokenizer.ggml.scores")
    types = _field(reader, "tokenizer.ggml.token_type")
    vocab = tokenizer.get_vocab()
    assert len(tokens) == len(scores) == len(types) == rows
    assert tokens[: len(vocab)] == sorted(vocab, key=vocab.get)
    assert tokens[len(vocab) :] == [f"[PAD{i}]" for i in range(len(vocab), rows)]
    assert types[0] == TokenType.UNKNOWN and types[1] == types[2] == TokenType.CONTROL
    assert types[3:259] == [TokenType.BYTE] * 256 and tokens[3 + 0x0A] == "<0x0A>"
    assert set(types[259 : len(vocab)]) == {TokenType.NORMAL}
    assert types[len(vocab) :] == [TokenType.UNUSED] * (rows - len(vocab))
    # a joined piece scores by its merge's rank: the earlier merge scores higher
    merged = [i for i in range(259, len(vocab)) if len(tokens[i]) > 1]
    assert merged and all(scores[i] <= 0 for i in merged)
    first, later = vocab["▁the"] if "▁the" in vocab else merged[0], merged[-1]
    assert scores[first] > scores[later]
    assert _field(reader, "tokenizer.ggml.bos_token_id") == 1
    assert _field(reader, "tokenizer.ggml.eos_token_id") == 2
    assert _field(reader, "tokenizer.ggml.unknown_token_id") == 0
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True
    assert _field(reader, "tokenizer.ggml.add_eos_token") is False
    assert _field(reader, "tokenizer.ggml.add_space_prefix") is True
    assert _field(reader, "tokenizer.chat_template") == TEMPLATE


def test_the_tokenizer_read_from_the_gguf_alone_gives_the_same_ids(spm_gguf, tmp_path):
    from transformers import AutoTokenizer

    _, path, tokenizer, _, _ = spm_gguf
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / path.name).write_bytes(path.read_bytes())
    back = AutoTokenizer.from_pretrained(str(alone), gguf_file=path.name)
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"]
        assert back(text)["input_ids"] == ids, text
        assert back.decode(ids, skip_special_tokens=True) == tokenizer.decode(ids, skip_special_tokens=True)
    assert any(3 <= i < 259 for i in tokenizer(TEXTS[2])["input_ids"])  # the byte fallback was exercised
    assert back.chat_template == TEMPLATE


def test_unigram_vocab_keeps_its_scores_and_types():
    from gguf import TokenType

    tok = {
        "model": {
            "type": "Unigram",
            "unk_id": 0,
            "byte_fallback": True,
            "vocab": [
                ["<unk>", 0.0],
                ["<s>", 0.0],
                ["</s>", 0.0],
                ["<0x41>", 0.0],
                ["▁a", -1.5],
                ["b", -3.25],
            ],
        },
        "added_tokens": [
            {"id": 0, "content": "<unk>", "special": True},
            {"id": 1, "content": "<s>", "special": True},
            {"id": 2, "content": "</s>", "special": True},
            {"id": 6, "content": "<tool>", "special": False},
        ],
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
    }
    vocab = to_gguf.sentencepiece_json_vocab(tok, 8)
    assert vocab.model == "llama" and vocab.tokens == [
        "<unk>",
        "<s>",
        "</s>",
        "<0x41>",
        "▁a",
        "b",
        "<tool>",
        "[PAD7]",
    ]
    assert vocab.scores[4:6] == [-1.5, -3.25] and vocab.scores[6] == to_gguf.ADDED_SCORE
    assert vocab.token_types == [
        TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL, TokenType.BYTE, TokenType.NORMAL,
        TokenType.NORMAL, TokenType.USER_DEFINED, TokenType.UNUSED,
    ]  # fmt: skip
    assert vocab.add_space_prefix is True


def test_what_still_cannot_be_converted_is_refused_with_the_reason(tmp_path, monkeypatch):
    wordpiece = {"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(wordpiece))
    with pytest.raises(to_gguf.CannotConvert, match="the tokenizer is WordPiece"):
        to_gguf.tokenizer_vocab(tmp_path, 10)
    only_model = tmp_path / "only-model"
    only_model.mkdir()
    (only_model / "tokenizer.model").write_bytes(b"\0")
    monkeypatch.setattr(to_gguf, "_has_sentencepiece", lambda: False)
    with pytest.raises(to_gguf.CannotConvert, match=r"only tokenizer\.model and the `sentencepiece` package"):
        to_gguf.tokenizer_vocab(only_model, 10)


def test_tokenizer_model_is_read_through_sentencepiece_when_installed(tmp_path):
    """The tokenizer.model path: a SentencePiece BPE model trained here on the demo data, with byte
    fallback; its pieces, scores and types go into the file as the package reads them."""
    spm = pytest.importorskip("sentencepiece", reason="the sentencepiece package is not installed")
    from gguf import TokenType

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(json.loads(line)["text"] for line in DEMO.open()), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(tmp_path / "tokenizer"), vocab_size=400, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2,
    )  # fmt: skip
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "tokenizer.model"))
    vocab = to_gguf.tokenizer_vocab(tmp_path, 410)
    assert vocab.source == "tokenizer.model" and vocab.model == "llama"
    size = processor.vocab_size()
    assert vocab.tokens[:size] == [processor.IdToPiece(i) for i in range(size)]
    assert vocab.scores[:size] == [processor.GetScore(i) for i in range(size)]
    assert vocab.token_types[:3] == [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    assert vocab.token_types[processor.PieceToId("<0x0A>")] == TokenType.BYTE
    assert vocab.tokens[size:] == [f"[PAD{i}]" for i in range(size, 410)]

    # written into a GGUF (embeddings only) and read back by transformers from the file alone: the same
    # ids as sentencepiece's own encoder (on text it does not normalise: single spaces, no "<s>" text)
    from transformers import AutoTokenizer

    shapes = {"model.embed_tokens.weight": (410, 64), "model.norm.weight": (64,), "lm_head.weight": (410, 64)}
    config = {
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 0,
        "intermediate_size": 128, "vocab_size": 410,
    }  # fmt: skip
    out = tmp_path / "gguf"
    out.mkdir()
    special = {"bos": 1, "eos": 2, "unk": 0, "add_bos": True}
    to_gguf.write_gguf(
        out / "m.gguf",
        config,
        lambda name: np.zeros(shapes[name], np.float32),
        shapes,
        tmp_path,
        special,
        "f16",
        "m",
    )
    back = AutoTokenizer.from_pretrained(str(out), gguf_file="m.gguf")
    texts = [
        " ".join(json.loads(line)["text"].replace("<s>", "").replace("</s>", "").split())
        for line in DEMO.open()
    ]
    for text in [*texts[:100], "naïve café, 日本語 🙂"]:
        assert back(text)["input_ids"] == [1, *processor.encode(text)], text
