"""The training rows when the loss counts the answers (`dataset.train_on`): each row tokenized here
(train_backend.answer_mask) into `input_ids` and `labels` (-100 off the answers), which TRL's
collators and our packed rows take as they are, with or without packing or padding-free rows.

Rows whose answers `training.max_length` cuts are counted and named; a row left with nothing to
train on (every answer cut off, or none to begin with) is dropped, and named. The trained tokens
are counted for the `data` event, and during training for the `log` events.
"""

from __future__ import annotations

from dataclasses import dataclass

from train_backend.answer_mask import IGNORE, resolve_train_on, tokenize_with_mask
from train_backend.errors import DataError
from train_backend.step_figures import reads_at_log

TRAINED_TOKENS_KEY = "trained_tokens"  # the trainer's running count, in TRL's logged metrics


def pretokenized(fmt: str, train_on: str) -> bool:
    """Whether the rows are tokenized here: for the answers, and for prompt/completion rows in any
    case (TRL would count only their completion even when all is asked for)."""
    return fmt == "prompt_completion" or resolve_train_on(train_on, fmt) == "answers"


@dataclass
class MaskedRows:
    dataset: object  # the rows kept, with input_ids and labels beside their own columns
    lengths: list[int]  # each kept row's tokens before truncation
    cut: list[int]  # source rows (0-based) whose answers max_length cut, kept
    cut_off: list[int]  # source rows dropped: max_length cut every answer
    no_answer: list[int]  # source rows dropped: no answer to train on

    def fields(self, max_length: int, name_rows) -> dict:
        """The `data` event's counts of them, and its note naming the rows (`name_rows`: row
        indices -> "rows 4, 9 and 3 more")."""
        parts = []
        if self.cut:
            parts.append(
                f"training.max_length ({max_length}) cuts the answers of {_rows(self.cut)} "
                f"({name_rows(self.cut)}): they train on what is left"
            )
        if self.cut_off:
            parts.append(
                f"dropped {_rows(self.cut_off)} whose answers training.max_length ({max_length}) cuts "
                f"off entirely ({name_rows(self.cut_off)})"
            )
        if self.no_answer:
            named = name_rows(self.no_answer)
            parts.append(f"dropped {_rows(self.no_answer)} with no answer to train on ({named})")
        return {
            "answers_cut": len(self.cut),
            "answers_dropped": len(self.cut_off) + len(self.no_answer),
            "note": "; ".join(parts) or None,
        }


def _rows(indices: list[int]) -> str:
    return f"{len(indices)} row{'s' if len(indices) != 1 else ''}"


def tokenize_rows(
    dataset, fmt: str, tokenizer, max_length: int, train_on: str, rows: list[int]
) -> MaskedRows:
    """`dataset`'s rows tokenized with their mask. `rows`: each row's index in the source, for the
    errors and notes."""
    mode = resolve_train_on(train_on, fmt)
    ids, labels, lengths, keep = [], [], [], []
    cut, cut_off, no_answer = [], [], []
    for index, row in enumerate(dataset):
        source = rows[index] if rows else index
        try:
            sample = tokenize_with_mask(tokenizer, row, fmt, mode, max_length)
        except DataError as exc:
            raise DataError(f"dataset row {source + 1}: {exc}") from exc
        except Exception as exc:  # jinja's TemplateError: the template's own words
            raise DataError(
                f"dataset row {source + 1}: the tokenizer's chat template refused it: {type(exc).__name__}: "
                f"{str(exc)[:300]}"
            ) from exc
        if sample.trained_tokens == 0:
            (cut_off if sample.answers_cut_off else no_answer).append(source)
            continue
        if sample.truncated_answer:
            cut.append(source)
        keep.append(index)
        ids.append(sample.input_ids)
        labels.append(sample.labels)
        lengths.append(sample.length)
    if not keep:
        raise DataError(
            f"no row has an answer left to train on: training.max_length ({max_length}) cuts off every "
            f"answer of {len(cut_off)} rows, and {len(no_answer)} rows have none. Raise training.max_length, "
            "or set dataset.train_on: all"
        )
    kept = dataset.select(keep) if len(keep) < len(dataset) else dataset
    kept = kept.add_column("input_ids", ids).add_column("labels", labels)
    return MaskedRows(kept, lengths, cut, cut_off, no_answer)


def trained_fields(dataset, fmt: str, train_on: str, tokens_total: int) -> dict:
    """The `data` event's trained tokens: those whose prediction the loss counts."""
    mode = resolve_train_on(train_on, fmt)
    if "labels" in dataset.column_names:
        trained = count_trained(dataset["labels"])
    else:  # every token but each row's first
        trained = max(0, tokens_total - len(dataset))
    share = round(trained / tokens_total, 4) if tokens_total else None
    return {"train_on": mode, "trained_tokens": trained, "trained_share": share}


def count_trained(labels: list[list[int]]) -> int:
    return sum(1 for row in labels for label in row[1:] if label != IGNORE)


def trainer_columns(dataset):
    """What the trainer is given: the tokenized columns alone when the rows were tokenized here."""
    if "labels" in dataset.column_names:
        return dataset.select_columns(["input_ids", "labels"])
    return dataset


def counting_trained_tokens(trainer_cls):
    """A subclass that counts the trained tokens its training batches carried (labels other than
    -100 after the first position: what the loss averages over), across every process, and logs
    the running count as `trained_tokens`."""

    class TrainedTokensTrainer(trainer_cls):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.get("labels")
            if labels is not None and model.training:
                count = (labels[..., 1:] != IGNORE).sum()
                seen = self.accelerator.gather_for_metrics(count.reshape(1)).sum()
                if not reads_at_log(getattr(self, "cfg", None)):
                    seen = int(seen.item())  # else on the device until a log reads it (step_figures)
                self._trained_tokens_seen = getattr(self, "_trained_tokens_seen", 0) + seen
                self._metrics["train"][TRAINED_TOKENS_KEY] = [self._trained_tokens_seen]
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    TrainedTokensTrainer.__name__ = TrainedTokensTrainer.__qualname__ = trainer_cls.__name__
    return TrainedTokensTrainer
