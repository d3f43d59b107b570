"""Packed rows: several samples in one row of max_length, each attending to itself only.

TRL's own packing flattens a whole micro-batch into one sequence, which only the varlen
flash-attention kernel runs without waste. Here every row keeps its length: the samples of
a row get position_ids that restart at 0, and no attention_mask is passed, so transformers
(masking_utils.find_packed_sequence_indices) builds a block-diagonal causal mask per row for
sdpa and eager attention. The first token of each sample is not a target (it would be
predicted from the previous sample's last token), which is what an unpacked batch does
too: there the first token has no prediction at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from train_backend import step_figures

REAL_TOKENS_KEY = "cockpit_real_tokens"


def pack_rows(dataset, max_length: int):
    """TRL's best-fit-decreasing packing of a tokenized dataset into rows of <= max_length tokens,
    with a `seq_lengths` column: the samples of each row."""
    from trl import pack_dataset

    columns = [c for c in ("input_ids", "labels") if c in dataset.column_names]
    return pack_dataset(dataset.select_columns(columns), max_length, strategy="bfd")


@dataclass
class PackedRowsCollator:
    """Rows of packed samples -> input_ids, labels and position_ids of shape (rows, longest row).

    Padding at the end of a row gets position 0 and label -100: each pad is a sequence of one
    token of its own, so no real token attends to it. The width is the longest row rounded up to
    `multiple_of`.
    """

    pad_token_id: int
    multiple_of: int = 1  # the width rounded up to a multiple of this (speed_auto.PAD_MULTIPLE)

    def __call__(self, examples: list[dict]) -> dict:
        import torch

        longest = max(len(e["input_ids"]) for e in examples)
        width = -(-longest // self.multiple_of) * self.multiple_of
        input_ids = torch.full((len(examples), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(examples), width), -100, dtype=torch.long)
        position_ids = torch.zeros((len(examples), width), dtype=torch.long)
        real = 0
        for row, example in enumerate(examples):
            ids = example["input_ids"]
            n = len(ids)
            input_ids[row, :n] = torch.as_tensor(ids)
            labels[row, :n] = torch.as_tensor(example.get("labels", ids))
            lengths = example.get("seq_lengths") or [n]
            position_ids[row, :n] = torch.cat([torch.arange(k) for k in lengths])
            real += n
        labels[position_ids == 0] = -100  # a sample's first token: nothing before it to predict it from
        return {
            "input_ids": input_ids,
            "labels": labels,
            "position_ids": position_ids,
            REAL_TOKENS_KEY: real,
        }


def with_real_token_count(trainer_cls):
    """A subclass that counts the packed rows' real tokens (TRL counts a batch without an
    attention_mask as one flattened row: the width of position_ids)."""

    class PackedRowsTrainer(trainer_cls):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            real = inputs.pop(REAL_TOKENS_KEY, None)
            before = self._total_train_tokens
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if real is not None and model.training:
                # over every process; on the device until a log reads it (speed.read_figures: at_log)
                self._total_train_tokens = before + step_figures.counted(self, int(real))
                self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
            return result

    PackedRowsTrainer.__name__ = f"PackedRows{trainer_cls.__name__}"
    return PackedRowsTrainer
