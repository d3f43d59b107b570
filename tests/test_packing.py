"""Packed rows (speed: auto) keep every sample to itself, and train as the same samples unpacked.

A tiny llama on the CPU: the packed forward gives each sample the logits it gets alone, the
loss of a packed batch is the loss of the same samples padded, and a short training run
follows the same loss trajectory packed and unpacked. The real trainer then runs packed rows
end to end.
"""

from __future__ import annotations

import pytest
import torch
from conftest import cockpit, events, only_run, write_config
from transformers import LlamaConfig, LlamaForCausalLM

from train_backend.packing import REAL_TOKENS_KEY, PackedRowsCollator

PAD = 0
LENGTHS = [5, 9, 3, 7, 6, 2]


def tiny_model(attn: str, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    config._attn_implementation = attn
    # as in training (model.load_model, TRL's compute_loss): with a KV cache transformers does not
    # look for packed samples in position_ids
    config.use_cache = False
    return LlamaForCausalLM(config).eval()


def samples(lengths=LENGTHS, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 97, (n,), generator=g).tolist() for n in lengths]


def packed_batch(rows: list[list[list[int]]]) -> dict:
    """Rows, each a list of samples, through the product's collator."""
    examples = [
        {"input_ids": [t for s in row for t in s], "seq_lengths": [len(s) for s in row]} for row in rows
    ]
    return PackedRowsCollator(PAD)(examples)


def padded_batch(batch_samples: list[list[int]]) -> dict:
    width = max(len(s) for s in batch_samples)
    ids = torch.full((len(batch_samples), width), PAD)
    mask = torch.zeros((len(batch_samples), width), dtype=torch.long)
    for i, s in enumerate(batch_samples):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_the_collator_restarts_positions_and_masks_sample_starts_and_padding():
    a, b, c = samples([3, 2, 4])
    batch = packed_batch([[a, b], [c]])
    assert "attention_mask" not in batch  # transformers then reads the samples from position_ids
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1], [0, 1, 2, 3, 0]]
    assert batch["input_ids"].tolist() == [a + b, [*c, PAD]]
    assert batch["labels"].tolist() == [[-100, a[1], a[2], -100, b[1]], [-100, c[1], c[2], c[3], -100]]
    assert batch[REAL_TOKENS_KEY] == 9  # padding is not counted


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_a_packed_row_gives_each_sample_the_logits_it_gets_alone(attn):
    model = tiny_model(attn)
    rows = [samples()[:3], samples()[3:]]
    batch = packed_batch(rows)
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
        for r, row in enumerate(rows):
            start = 0
            for sample in row:
                alone = model(input_ids=torch.tensor([sample])).logits[0]
                got = packed[r, start : start + len(sample)]
                torch.testing.assert_close(got, alone, atol=2e-5, rtol=2e-5)
                start += len(sample)
        # without the restarting positions the later samples see the earlier ones: the check has teeth
        leaky = model(input_ids=batch["input_ids"]).logits
        second = rows[0][1]
        alone = model(input_ids=torch.tensor([second])).logits[0]
        first_len = len(rows[0][0])
        assert (leaky[0, first_len : first_len + len(second)] - alone).abs().max() > 1e-3


def test_the_packed_loss_is_the_loss_of_the_same_samples_padded():
    model = tiny_model("sdpa")
    data = samples()
    packed = packed_batch([data[:3], data[3:]])
    with torch.no_grad():
        loss_packed = model(
            input_ids=packed["input_ids"], position_ids=packed["position_ids"], labels=packed["labels"]
        ).loss
        loss_padded = model(**padded_batch(data)).loss
    torch.testing.assert_close(loss_packed, loss_padded, atol=1e-5, rtol=1e-5)


def test_a_short_training_follows_the_same_loss_trajectory_packed_and_unpacked():
    steps = [samples(seed=1), samples(seed=2)] * 6  # each step: the same 6 samples both ways

    def train(packed: bool) -> list[float]:
        model = tiny_model("sdpa", seed=3).train()
        optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for data in steps:
            if packed:
                b = packed_batch([data[:3], data[3:]])
                out = model(input_ids=b["input_ids"], position_ids=b["position_ids"], labels=b["labels"])
            else:
                out = model(**padded_batch(data))
            out.loss.backward()
            optim.step()
            optim.zero_grad()
            losses.append(out.loss.item())
        return losses

    unpacked, packed = train(False), train(True)
    assert unpacked[-1] < unpacked[0] - 0.1  # it learns, so the comparison means something
    for a, b in zip(unpacked, packed):
        assert abs(a - b) <= 1e-3 * abs(a), (unpacked, packed)


@pytest.mark.slow
def test_the_trainer_runs_packed_rows_and_counts_real_tokens(tmp_path, env):
    config = write_config(tmp_path / "c.yaml", {"training.packing": True, "training.max_steps": 4})
    proc = cockpit(["train", str(config), "--no-ui", "--log-every", "0"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    evs = events(only_run(env))
    plan = next(e for e in evs if e["type"] == "speed_plan")
    assert plan["packing"] == "rows" and plan["attn_implementation"] == "sdpa"
    assert any(c["name"] == "packing" and c["source"] == "yours" for c in plan["choices"])
    data = next(e for e in evs if e["type"] == "data")
    logs = [e for e in evs if e["type"] == "log"]
    assert evs[-1]["type"] == "done" and evs[-1]["status"] == "finished"
    # 4 rows of up to 64 tokens a step: more real tokens than 4 unpacked samples could hold
    per_step = logs[-1]["tokens_seen"] / logs[-1]["step"]
    assert 4 * data["tokens_mean"] * 1.3 < per_step <= 4 * 64, (per_step, data["tokens_mean"])
    assert logs[-1]["loss"] < logs[0]["loss"]


def test_packed_rows_are_padded_to_the_multiple_asked_for_and_the_padding_is_no_target():
    rows = [[[5, 6, 7], [8, 9]], [[10, 11, 12, 13, 14, 15, 16]]]  # rows of 5 and 7 tokens
    examples = [{"input_ids": [t for s in r for t in s], "seq_lengths": [len(s) for s in r]} for r in rows]
    plain = PackedRowsCollator(PAD)(examples)
    wide = PackedRowsCollator(PAD, multiple_of=16)(examples)
    assert plain["input_ids"].shape == (2, 7) and wide["input_ids"].shape == (2, 16)
    assert torch.equal(wide["input_ids"][:, :7], plain["input_ids"])
    assert torch.equal(wide["labels"][:, :7], plain["labels"])
    assert (wide["labels"][:, 7:] == -100).all() and (wide["position_ids"][:, 7:] == 0).all()
    assert wide[REAL_TOKENS_KEY] == plain[REAL_TOKENS_KEY] == 12  # padding is never a real token
    exact = [{"input_ids": list(range(1, 17)), "seq_lengths": [16]}]
    assert PackedRowsCollator(PAD, multiple_of=16)(exact)["input_ids"].shape == (1, 16)  # no extra row
