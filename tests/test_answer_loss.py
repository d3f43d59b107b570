"""The loss really counts the answers alone: rows masked by train_backend.answer_mask, batched by
each collator the trainer may use (TRL's padded one, TRL's padding-free one, our packed rows),
give the model's loss equal to a cross-entropy computed by hand over the answers' tokens, and
the logits that predict a prompt token get no gradient."""

from __future__ import annotations

import pytest

from train_backend.answer_mask import tokenize_with_mask

CHATS = [
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is two plus two?"},
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "And three plus three?"},
        {"role": "assistant", "content": "Six, as three and three make six."},
    ],
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."}],
    [{"role": "user", "content": "Say nothing more than yes."}, {"role": "assistant", "content": "Yes"}],
]


@pytest.fixture(scope="module")
def setup():
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from train_backend.model import shipped_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(shipped_tokenizer_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    samples = [tokenize_with_mask(tokenizer, {"messages": c}, "messages", "answers", 512) for c in CHATS]
    return tokenizer, model, samples


def collate(kind: str, tokenizer, samples) -> dict:
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from train_backend.packing import REAL_TOKENS_KEY, PackedRowsCollator

    examples = [{"input_ids": s.input_ids, "labels": s.labels} for s in samples]
    if kind == "padded":
        return DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id)(examples)
    if kind == "padding_free":
        return DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=True)(
            examples
        )
    packed = {  # the samples packed into one row, as train_backend.packing.pack_rows leaves them
        "input_ids": [t for e in examples for t in e["input_ids"]],
        "labels": [t for e in examples for t in e["labels"]],
        "seq_lengths": [len(e["input_ids"]) for e in examples],
    }
    batch = PackedRowsCollator(tokenizer.pad_token_id, multiple_of=8)([packed])
    batch.pop(REAL_TOKENS_KEY)
    return batch


def answer_places(kind: str, samples) -> list[tuple[int, int]]:
    """(row, position) of every answer token in the batch's layout, from the masks alone."""
    places, offset = [], 0
    for index, sample in enumerate(samples):
        row = index if kind == "padded" else 0
        start = 0 if kind == "padded" else offset
        places += [(row, start + p) for p, trained in enumerate(sample.trained) if trained]
        offset += len(sample.input_ids)
    return places


@pytest.mark.parametrize("kind", ["padded", "padding_free", "packed_rows"])
def test_the_loss_is_the_answers_cross_entropy_and_prompts_get_no_gradient(setup, kind):
    import torch

    tokenizer, model, samples = setup
    batch = collate(kind, tokenizer, samples)
    places = answer_places(kind, samples)
    assert len(places) == sum(s.trained_tokens for s in samples) > 0
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    logits = model(**inputs).logits.detach().requires_grad_(True)
    loss = model.loss_function(logits=logits, labels=batch["labels"], vocab_size=model.config.vocab_size)
    ids = batch["input_ids"]
    by_hand = torch.stack(
        [torch.nn.functional.cross_entropy(logits[r, p - 1], ids[r, p]) for r, p in places]
    ).mean()
    assert torch.allclose(loss, by_hand, atol=1e-6)
    assert torch.allclose(model(**batch).loss, by_hand, atol=1e-5)  # the model's own loss, as trained
    loss.backward()
    predicting = {(r, p - 1) for r, p in places}
    grads = logits.grad.abs().sum(-1)
    for r in range(grads.shape[0]):
        for p in range(grads.shape[1]):
            assert (grads[r, p] > 0) == ((r, p) in predicting), (r, p)


def test_sft_trainers_own_loss_counts_the_answers_alone(setup, tmp_path):
    """TRL's SFTTrainer, given our tokenized rows (as train_backend.trainer gives them), keeps them
    as they are and its training loss (its fused head, not the model's loss) is the answers'."""
    import datasets
    import torch
    from trl import SFTConfig, SFTTrainer

    tokenizer, model, samples = setup
    rows = datasets.Dataset.from_dict(
        {"input_ids": [s.input_ids for s in samples], "labels": [s.labels for s in samples]}
    )
    args = SFTConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True, max_length=512, disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=tokenizer)
    assert trainer.train_dataset["labels"] == [s.labels for s in samples]
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(samples))])
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, dict(batch))
    trainer.model.eval()
    with torch.no_grad():
        logits = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    ids = batch["input_ids"]
    places = answer_places("padded", samples)
    by_hand = torch.stack(
        [torch.nn.functional.cross_entropy(logits[r, p - 1], ids[r, p]) for r, p in places]
    ).mean()
    assert torch.allclose(loss.detach(), by_hand, atol=1e-5)
    everything = (batch["attention_mask"][:, 1:] == 1).sum()
    assert len(places) < int(everything)  # the prompts were there to count, and were not
