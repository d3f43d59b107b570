"""speed.read_figures: at_log: a step's figures read when the step is logged, not after each micro-batch.

Twice a micro-batch the trainer as TRL and HF write it makes the host wait for the GPU to finish
everything queued so far:
- after the forward, TRL's SFTTrainer.compute_loss reads its metrics (`.item()` on the entropy,
  the token accuracy and the tokens in the batch, and `num_valid > 0`);
- after the backward, HF Trainer's `logging_nan_inf_filter` tests the loss for nan/inf (a `bool()`
  of a GPU tensor).

While it waits, the host queues nothing. So the host's launches for the backward never overlap
the GPU's forward, and a micro-batch takes the longer of host and GPU for its forward plus the
longer for its backward (cockpit.speed.model.micro_batch_s), not the longer of the two sums.

With `at_log`, this class keeps the same figures on the device: the entropy and accuracy of each
micro-batch as 0-d tensors (0 where a batch has no trained token, as TRL's `if num_valid > 0`
gives), the tokens as a running device sum, and the nan/inf filter as a `torch.where` that adds
what HF adds. At a logging step it reads them all in one copy. The logged numbers are TRL's and
HF's to the bit (tests/test_step_figures.py holds both trainers to it), and so is the loss the
backward takes: this is TRL's plain loss, `-log_probs` summed over the trained tokens and divided
by their count, written out. A run that TRL's loss does otherwise (an MoE's aux loss, a loss
function of its own, label smoothing, DFT, sequence parallelism) and the eval passes go through
TRL's own compute_loss, which reads its figures at once as before.

One read stays, not the trainer's: the model's forward reads its mask's input once to build the
attention mask (transformers' masking_utils: whether a padded batch's mask is all ones, where a
packed row's sequences start). It comes at the start of the forward, when the host has queued the
micro-batch before, so the host still waits once a micro-batch; the forward and the backward's
launches overlap as one (the speed model's max of the sums). The test aid count_reads counts every
read by the file that made it (tests/test_step_figures.py).

`at_log` is the default: on an H100 it ran 1.04x-1.16x the tokens/s of `each_micro_batch` on
the 7B and 8B QLoRA rows of bench/vs_unsloth.py (docs/benchmarks.md). `each_micro_batch`: TRL's
and HF's own.
The packed rows' real-token count (train_backend.packing) and the trained-token count
(train_backend.answer_data) are read the same way as the rest.
"""

from __future__ import annotations

from typing import Any


def reads_at_log(cfg: Any) -> bool:
    """Whether a run's SFT trainer reads its figures at logging steps (speed.read_figures: at_log)."""
    return cfg is not None and cfg.reads_figures_at_log()


class FiguresAtLog:
    """Mixed in before TRL's SFTTrainer (train_backend.checkpoints.trainer_class), after a class that
    sets `self.cfg`. Inactive unless speed.read_figures is at_log."""

    def _at_log(self) -> bool:
        return reads_at_log(self.cfg)

    def _plain_loss(self) -> bool:
        """TRL's loss is `-log_probs` over the trained tokens, which compute_loss below writes out."""
        args = self.args
        return (
            not self.aux_loss_enabled
            and self.compute_loss_func is None
            and self.label_smoother is None
            and getattr(args, "loss_type", "nll") == "nll"
            and not _sequence_parallel(self.accelerator, self.model.training)
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs or not self.model.training or not self._at_log() or not self._plain_loss():
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        import torch

        inputs["use_cache"] = False
        outputs = model(**inputs, fused_lm_head=True)
        count = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = (-outputs.log_probs).sum() / torch.as_tensor(count).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.accelerator.num_processes // self.get_tp_size())
        gather = self.accelerator.gather_for_metrics
        valid = gather(outputs.label_mask.sum()).sum()
        entropy = gather(outputs.entropy.detach().sum()).sum()
        correct = gather(outputs.is_top1.sum()).sum()
        metrics = self._metrics["train"]
        metrics["entropy"].append(_mean_or_zero(entropy, valid))
        metrics["mean_token_accuracy"].append(_mean_or_zero(correct, valid))
        self.add_tokens(_batch_tokens(self, inputs))
        return loss

    def add_tokens(self, count) -> None:
        """The train tokens' running count (TRL's `_total_train_tokens`, its `num_tokens`): a device
        tensor or a host int, added without reading the device."""
        total = self._total_train_tokens + count // self._tp_size
        self._total_train_tokens = total
        self._metrics["train"]["num_tokens"] = [total]

    def training_step(self, model, inputs, num_items_in_batch=None):
        if getattr(getattr(self, "aids", None), "count_reads", False):
            self._note_reads()
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not self._at_log() or self.args.logging_nan_inf_filter:
            return loss
        import torch

        # HF's logging_nan_inf_filter without reading the loss: a nan or inf micro-batch adds the
        # average of the losses since the last log instead (transformers' Trainer inner loop)
        fill = self._tr_loss / (1 + self.state.global_step - self._globalstep_last_logged)
        return torch.where(torch.isfinite(loss), loss, fill)

    def _note_reads(self) -> None:
        """Test aid count_reads: the reads since the last micro-batch began, by the file that made them,
        a line each in RUN/aid-reads.jsonl with the optimizer step they fell in (the same step as the
        line before: no step ended between)."""
        import json

        counter = getattr(self, "_reads", None)
        if counter is None:
            counter = self._reads = ReadCounter()
            counter.install()
        line = {"step": self.state.global_step, "reads": counter.take()}
        with open(self.run.path / READS_FILE, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self._at_log():
            self._read_figures()
        super().log(logs, start_time)

    def _read_figures(self) -> None:
        """Every figure still on the device, read in one copy: the lists of self._metrics and the
        token count, each turned into the Python number TRL's own `.item()` gives."""
        import torch

        places: list[tuple[list, int]] = []
        values = []
        for mode in self._metrics.values():
            for series in mode.values():
                for i, value in enumerate(series):
                    if isinstance(value, torch.Tensor):
                        places.append((series, i))
                        values.append(value.reshape(()))
        total = self._total_train_tokens
        if isinstance(total, torch.Tensor):
            values.append(total.reshape(()))
        if not values:
            return
        device = values[0].device
        # one copy: floats and counts in float64 (exact for counts under 2**53), then each as TRL has it
        read = torch.stack([v.to(device=device, dtype=torch.float64) for v in values]).tolist()
        for (series, i), number, value in zip(places, read, values, strict=False):
            series[i] = number if value.is_floating_point() else int(number)
        if isinstance(total, torch.Tensor):  # its num_tokens entries were read with the rest above
            self._total_train_tokens = int(read[-1])


READS_FILE = "aid-reads.jsonl"
READ_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__")


class ReadCounter:
    """Counts calls of torch.Tensor's reads (READ_METHODS), what makes the host wait for a GPU, by the
    file that made them (its last two path parts). Test aid only: installed in a trainer whose
    COCKPIT_TEST_AIDS sets count_reads, for the rest of its life."""

    def __init__(self) -> None:
        self.by: dict[str, int] = {}

    def take(self) -> dict[str, int]:
        by, self.by = self.by, {}
        return by

    def install(self) -> None:
        import torch

        for name in READ_METHODS:
            setattr(torch.Tensor, name, self._counted(getattr(torch.Tensor, name)))

    def _counted(self, method):
        import sys

        def read(tensor, *args, **kwargs):
            where = "/".join(sys._getframe(1).f_code.co_filename.split("/")[-2:])
            self.by[where] = self.by.get(where, 0) + 1
            return method(tensor, *args, **kwargs)

        return read


def _mean_or_zero(total, valid):
    """TRL's `(total / valid).item() if valid > 0 else 0.0`, left on the device."""
    import torch

    return torch.where(valid > 0, total / valid.clamp(min=1), torch.zeros((), device=total.device))


def _batch_tokens(trainer, inputs: dict):
    """The batch's tokens as TRL counts them, over every process: the attention mask's ones, else
    (padding-free) the width of position_ids, a host figure."""
    if "attention_mask" in inputs:
        return trainer.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum()
    if "position_ids" in inputs:
        return counted(trainer, inputs["position_ids"].size(1))
    raise ValueError("Expected 'attention_mask' or 'position_ids' in inputs.")


def counted(trainer, n: int):
    """`n`, a figure this process knows on the host, summed over the run's processes: `n` itself on one;
    else gathered, left on the device where the run reads its figures at log, else read now. A fill
    kernel puts it on the device: `torch.tensor(n, device=...)` copies from the host and waits."""
    if trainer.accelerator.num_processes == 1:
        return n
    import torch

    local = torch.full((1,), n, dtype=torch.long, device=trainer.accelerator.device)
    total = trainer.accelerator.gather_for_metrics(local).sum()
    return total if reads_at_log(trainer.cfg) else int(total.item())


def _sequence_parallel(accelerator, training: bool) -> bool:
    config = getattr(accelerator, "parallelism_config", None)
    return bool(
        training
        and config is not None
        and getattr(config, "sp_backend", None) == "deepspeed"
        and getattr(config, "sp_enabled", False)
    )
