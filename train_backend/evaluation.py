"""Evaluation while training: the held-out eval split, its loss every `eval.steps`, the best
checkpoint by that loss, and the samples (`eval.prompts`) answered before step 1, at each
checkpoint and at the end, as `eval` and `sample` events.

The eval loss is the mean cross-entropy per predicted token over the eval samples, each tokenized
as the trainer tokenizes its rows (text + eos, or the chat template) and truncated to
`training.max_length`: the same quantity as the training loss, on data it never trains on. Rows
trained on their answers (`dataset.train_on`) count the answers' tokens alone, as training does.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from cockpit.config.schema import TrainConfig
from cockpit.run import journal, rundir
from train_backend import answer_data, generation
from train_backend import data as data_mod
from train_backend import prompt_completion as pc
from train_backend.early_stop import EarlyStop
from train_backend.errors import DataError
from train_backend.test_aids import Aids

FRACTION_SOURCE = "eval_fraction"


@dataclass
class EvalData:
    dataset: object  # datasets.Dataset, the same one column as the training data
    fmt: str
    source: str  # what it was taken from, for the data event
    input_ids: list[list[int]] = field(default_factory=list)
    labels: list[list[int]] | None = None  # -100 off the answers, when only the answers train


@dataclass
class Prompt:
    index: int
    shown: str  # the prompt as the user gave it (or the eval row's question)
    rendered: generation.Rendered
    reference: str | None  # the eval row's own answer


def held_out(cfg: TrainConfig, n: int, unit: str) -> tuple[list[int], list[int]]:
    """dataset.eval_fraction of `n` rows or samples: (held out, kept), each in order, drawn with the
    run's seed; at least one held out, and refused where none would be left to train on."""
    fraction = cfg.dataset.eval_fraction
    assert fraction is not None
    k = max(1, round(n * fraction))
    if n - k < 1:
        raise DataError(
            f"dataset.eval_fraction: {fraction} of {n} {unit} leaves none to train on; "
            "use a smaller fraction or more data"
        )
    order = list(range(n))
    random.Random(cfg.training.seed).shuffle(order)
    return sorted(order[:k]), sorted(order[k:])


def split_eval(cfg: TrainConfig, prepared: data_mod.PreparedData, tokenizer):
    """(training data, eval data or None): the eval split held out, never trained on."""
    ds = cfg.dataset
    if ds.eval_fraction is not None:
        n = len(prepared.dataset)
        held, kept = held_out(cfg, n, "samples")
        train_ds = prepared.dataset.select(kept)
        eval_ds = prepared.dataset.select(held)
        if cfg.eval.max_samples is not None:
            eval_ds = eval_ds.select(range(min(cfg.eval.max_samples, len(eval_ds))))
        lengths = [prepared.lengths[i] for i in kept]
        stats = dict(prepared.stats)
        stats.update(data_mod.length_stats(lengths, cfg.training.max_length), samples=len(kept))
        stats.update(
            answer_data.trained_fields(train_ds, prepared.format, ds.train_on, stats["tokens_total"])
        )
        train = data_mod.PreparedData(train_ds, prepared.format, stats, lengths, prepared.dropped_note)
        source = f"{FRACTION_SOURCE} {ds.eval_fraction} of {n} samples, seed {cfg.training.seed}"
        evaluation = EvalData(eval_ds, prepared.format, source)
    elif ds.eval_split is not None:
        train = prepared
        evaluation = _load_split(cfg, prepared, tokenizer)
    else:
        return prepared, None
    evaluation.input_ids = tokenize(evaluation, tokenizer, cfg.training.max_length)
    return train, evaluation


def _load_split(cfg: TrainConfig, prepared: data_mod.PreparedData, tokenizer) -> EvalData:
    ds, split = cfg.dataset, cfg.dataset.eval_split
    as_file = Path(split).expanduser().is_file()
    if not as_file and ds.path != "demo" and Path(ds.path).expanduser().is_file():
        raise DataError(
            f"dataset.eval_split: {split!r}, but dataset.path {ds.path!r} is one file, which has no "
            "splits. Give "
            "the eval data as a file (dataset.eval_split: path/to/eval.jsonl) or hold part of the data out "
            "with dataset.eval_fraction: 0.05"
        )
    if ds.path == "demo" and not as_file:
        raise DataError(
            f"dataset.eval_split: {split!r}; the demo dataset has one split. Use dataset.eval_fraction: 0.05 "
            "to hold part of it out, or give an eval file"
        )
    section = dataclasses.replace(
        ds,
        path=split if as_file else ds.path,
        split="train" if as_file else split,
        max_samples=cfg.eval.max_samples,
        sources=None,  # the eval rows are one file or split, whatever the training mix is
    )
    if ds.format == "auto":
        section.format = prepared.format
    try:
        loaded = data_mod.prepare(section, tokenizer, cfg.training.max_length, split_key="dataset.eval_split")
    except DataError as exc:
        text = str(exc)
        raise DataError(
            text if text.startswith("dataset.eval_split") else f"dataset.eval_split: {text}"
        ) from exc
    if loaded.format != prepared.format:
        raise DataError(
            f"dataset.eval_split: its rows are in format {loaded.format!r}, the training rows in "
            f"{prepared.format!r}; give eval data in the same format"
        )
    source = f"file {split}" if as_file else f"split {split!r}"
    return EvalData(loaded.dataset, loaded.format, source)


def tokenize(evaluation: EvalData, tokenizer, max_length: int) -> list[list[int]]:
    if "labels" in evaluation.dataset.column_names:  # tokenized with their answers (answer_data)
        evaluation.labels = [list(v) for v in evaluation.dataset["labels"]]
        return [list(v) for v in evaluation.dataset["input_ids"]]
    column = {"text": "text", "messages": "messages", "tokens": "input_ids"}[evaluation.fmt]
    values = evaluation.dataset[column]
    if evaluation.fmt == "tokens":
        return [list(v)[:max_length] for v in values]
    eos = tokenizer.eos_token or ""
    if evaluation.fmt == "messages":
        texts = [tokenizer.apply_chat_template(m, tokenize=False) for m in values]
        special = False
    else:  # TRL adds the eos a row lacks, and tokenizes with the tokenizer's specials
        texts = [t if t.endswith(eos) else t + eos for t in values]
        special = True
    encoded = tokenizer(texts, add_special_tokens=special)["input_ids"]
    return [ids[:max_length] for ids in encoded if len(ids) > 1]


def eval_loss(
    model, input_ids: list[list[int]], batch_size: int, pad_id: int, labels: list[list[int]] | None = None
) -> tuple[float, int]:
    """(mean loss per predicted token, predicted tokens) over the eval samples, without gradients.
    `labels`: each sample's, -100 where a token is not counted (default: every token counts)."""
    import torch

    device = getattr(model, "device", None) or next(model.parameters()).device
    order = sorted(range(len(input_ids)), key=lambda i: len(input_ids[i]))  # less padding
    total, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            rows = [input_ids[i] for i in order[start : start + batch_size]]
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, row in enumerate(rows):
                ids[i, : len(row)] = torch.tensor(row)
                mask[i, : len(row)] = 1
            targets = ids.masked_fill(mask == 0, -100)
            if labels is not None:
                for i, index in enumerate(order[start : start + batch_size]):
                    targets[i, : len(labels[index])] = torch.tensor(labels[index])
            out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=targets.to(device))
            counted = int((targets[:, 1:] != -100).sum())
            total += float(out.loss) * counted
            tokens += counted
    return (total / tokens if tokens else float("nan")), tokens


def build_prompts(
    cfg: TrainConfig, evaluation: EvalData | None, tokenizer, style: str, prefix: str
) -> list[Prompt]:
    wanted = cfg.eval.prompts
    if wanted is None:
        return []
    if isinstance(wanted, list):
        return [
            Prompt(
                i,
                text,
                generation.render_chat(style, tokenizer, [{"role": "user", "content": text}], prefix),
                None,
            )
            for i, text in enumerate(wanted)
        ]
    if evaluation is None:  # the config check refuses this; a guard for a config edited by hand
        raise DataError("eval.prompts: a number takes prompts from the eval split, and there is none")
    if evaluation.fmt == "tokens":
        raise DataError(
            f"eval.prompts: {wanted} takes prompts from the eval split, whose rows are token ids with no "
            "text to show; give the prompts as a list of strings"
        )
    column = "messages" if evaluation.fmt == "messages" else "text"
    if evaluation.fmt == pc.FORMAT:
        head = evaluation.dataset.select(range(min(wanted, len(evaluation.dataset))))
        rows = [pc.as_example(row) for row in pc.rows(head)]
    else:
        rows = [(evaluation.fmt, value) for value in evaluation.dataset[column][:wanted]]
    prompts = []
    for i, (fmt, value) in enumerate(rows):
        shown, rendered, reference = generation.split_example(style, fmt, value, tokenizer, prefix)
        prompts.append(Prompt(i, shown, rendered, reference))
    return prompts


class EvalTracker:
    """The eval losses so far (this attempt's and, after a restart, those its events recorded) and
    which kept checkpoint has the lowest."""

    def __init__(self, run: rundir.RunDir):
        self.run = run
        self.losses: dict[int, float] = {}
        self.restore()

    def restore(self) -> None:
        for event in journal.read_all(self.run.events_path):
            if isinstance(event, dict) and event.get("type") == "eval":
                step, loss = event.get("step"), event.get("eval_loss")
                if isinstance(step, int) and isinstance(loss, (int, float)):
                    self.losses[step] = float(loss)

    def add(self, step: int, loss: float) -> None:
        self.losses[step] = loss

    def best(self) -> tuple[int, float] | None:
        finite = [(loss, step) for step, loss in self.losses.items() if loss == loss]
        if not finite:
            return None
        loss, step = min(finite)
        return step, loss

    def best_checkpoint(self, names: list[str]) -> tuple[str, float] | None:
        """The kept checkpoint (by name) whose step had the lowest eval loss."""
        scored = []
        for name in names:
            step = int(name.rsplit("-", 1)[-1])
            if step in self.losses and self.losses[step] == self.losses[step]:
                scored.append((self.losses[step], name))
        if not scored:
            return None
        loss, name = min(scored)
        return name, loss


def early_stop_from(cfg: TrainConfig, tracker: EvalTracker) -> EarlyStop | None:
    """eval.early_stop_patience's watch, fed the losses a restart finds in the events."""
    if cfg.eval.early_stop_patience is None:
        return None
    early = EarlyStop(cfg.eval.early_stop_patience, cfg.eval.early_stop_min_gain)
    for step in sorted(tracker.losses):
        early.feed(step, tracker.losses[step])
    return early


class Evaluator:
    """Runs the eval passes and the samples inside the trainer process, on its device."""

    def __init__(
        self,
        cfg: TrainConfig,
        emitter,
        tracker: EvalTracker,
        evaluation: EvalData | None,
        prompts,
        style,
        aids: Aids | None = None,
    ):
        self.cfg, self.emitter, self.tracker = cfg, emitter, tracker
        self.evaluation, self.prompts, self.style = evaluation, prompts, style
        self.trainer = None  # set once the trainer exists
        self.sampling = True  # off under FSDP: generation needs the whole model on one device
        self.base_without_adapter = True  # the base's samples: the model with its adapter disabled
        self.every = cfg.eval.steps or cfg.output.save_steps
        self.early = early_stop_from(cfg, tracker)
        self.aids = aids or Aids()
        self.passes = 0  # eval passes run by this trainer

    @property
    def early_stopped(self) -> bool:
        return self.early is not None and self.early.due

    def due(self, step: int) -> bool:
        return self.evaluation is not None and step > 0 and step % self.every == 0

    def run_eval(self, step: int, stage: str) -> float | None:
        if self.evaluation is None or not self.evaluation.input_ids:
            return None
        self.emitter.emit("busy", what="eval", step=step)  # silent until its eval event
        model = self.trainer.model
        was_training = model.training
        model.eval()
        started = time.perf_counter()
        try:
            with self.trainer.accelerator.autocast():
                loss, tokens = eval_loss(
                    model,
                    self.evaluation.input_ids,
                    self.cfg.training.micro_batch_size,
                    self.trainer.processing_class.pad_token_id or 0,
                    self.evaluation.labels,
                )
        finally:
            if was_training:
                model.train()
        loss = self.aids.eval_loss(self.passes, loss)
        self.passes += 1
        self.tracker.add(step, loss)
        if self.early is not None and stage != "final":
            self.early.feed(step, loss)
        best = self.tracker.best()
        kept = [p.name for p in self.trainer_checkpoints()]
        best_ckpt = self.tracker.best_checkpoint(kept)
        self.emitter.emit(
            "eval",
            step=step,
            stage=stage,
            eval_loss=round(loss, 6) if loss == loss else loss,
            eval_samples=len(self.evaluation.input_ids),
            eval_tokens=tokens,
            eval_s=round(time.perf_counter() - started, 3),
            best_step=best[0] if best else None,
            best_eval_loss=round(best[1], 6) if best else None,
            best_checkpoint=best_ckpt[0] if best_ckpt else None,
            **(self.early.event_fields() if self.early is not None and stage != "final" else {}),
        )
        return loss

    def trainer_checkpoints(self) -> list[Path]:
        return self.tracker.run.complete_checkpoints()

    def run_samples(self, step: int, stage: str, checkpoint: str | None = None) -> None:
        if not self.prompts or not self.sampling:
            return
        self.emitter.emit("busy", what="samples", step=step)  # silent until its first sample event
        model = self.trainer.model
        tokenizer = self.trainer.processing_class
        was_training = model.training
        model.eval()
        try:
            with self.trainer.accelerator.autocast():
                for prompt in self.prompts:
                    if stage == "base" and self.base_without_adapter and hasattr(model, "disable_adapter"):
                        with model.disable_adapter():
                            answer = self._generate(model, tokenizer, prompt)
                    else:
                        answer = self._generate(model, tokenizer, prompt)
                    self.emitter.emit(
                        "sample",
                        stage=stage,
                        step=step,
                        checkpoint=checkpoint,
                        index=prompt.index,
                        count=len(self.prompts),
                        prompt=prompt.shown,
                        reference=prompt.reference,
                        output=answer.text,
                        finish=answer.finish,
                        end_token=answer.end_token,
                        new_tokens=answer.new_tokens,
                        prompt_tokens=answer.prompt_tokens,
                        max_new_tokens=self.cfg.eval.max_new_tokens,
                        seed=self.cfg.training.seed,
                        seconds=answer.seconds,
                        style=self.style,
                    )
        finally:
            if was_training:
                model.train()

    def _generate(self, model, tokenizer, prompt: Prompt) -> generation.Generated:
        return generation.generate(
            model,
            tokenizer,
            prompt.rendered,
            self.style,
            self.cfg.eval.max_new_tokens,
            self.cfg.training.seed,
        )


def make_eval_callback(evaluator: Evaluator, controls):
    from transformers import TrainerCallback

    class EvalCallback(TrainerCallback):
        """Eval loss every `eval.steps` (and of the base before step 1); samples before step 1 and after
        each checkpoint. After the step's own events, before its checkpoint (HF saves after)."""

        def on_train_begin(self, args, state, control, **kw):
            if state.global_step == 0:
                evaluator.run_eval(0, "base")
                evaluator.run_samples(0, "base")

        def on_step_end(self, args, state, control, **kw):
            if controls.stop.is_set():  # HF's own should_training_stop at the last step is no reason
                return control
            if evaluator.due(state.global_step):
                evaluator.run_eval(state.global_step, "train")
                early = evaluator.early
                if early is not None and early.best_step == state.global_step:
                    control.should_save = True  # each new best is a checkpoint, kept as the best
                if evaluator.early_stopped:
                    control.should_training_stop = True  # finish() loads the best into final/
            return control

        def on_save(self, args, state, control, **kw):
            if controls.stop.is_set():  # a stop wants its checkpoint and the exit, not generation
                return control
            evaluator.run_samples(state.global_step, "checkpoint", f"checkpoint-{state.global_step}")
            return control

    return EvalCallback()
