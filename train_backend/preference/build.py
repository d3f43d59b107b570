"""The preference run's phases where they differ from SFT's (train_backend.trainer calls them): its
data (rows, eval split, prompts) and its trainer (TRL's DPO, KTO or ORPO trainer, its reference,
the `preference_setup` event)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cockpit.config.schema import TrainConfig
from cockpit.run import rundir
from train_backend import data as data_mod
from train_backend.channel import Emitter
from train_backend.evaluation import EvalData, Prompt
from train_backend.preference import data as pref_data
from train_backend.preference import trainers


@dataclass
class Prepared:
    """What prepare makes: the training rows, the eval rows, the sample prompts, their style."""

    train: data_mod.PreparedData
    held_out: EvalData | None
    prompts: list[Prompt]
    style: str
    setup: dict[str, Any] = field(default_factory=dict)  # the data's part of `preference_setup`


def prepare(cfg: TrainConfig, tokenizer) -> Prepared:
    rows = pref_data.read_rows(cfg, cfg.dataset, tokenizer, "dataset.split", cfg.dataset.max_samples)
    train_rows, held_rows, source = pref_data.split(cfg, rows, tokenizer)
    style = pref_data.prompt_style(train_rows, tokenizer)
    held = pref_data.eval_data(held_rows, source or "") if held_rows is not None else None
    prompts = pref_data.build_prompts(cfg, held_rows, tokenizer, style)
    lengths = [max(r.sequences()) for r in train_rows.tokens]
    train = data_mod.PreparedData(
        pref_data.to_dataset(train_rows),
        pref_data.FORMAT,
        pref_data.stats(cfg, train_rows),
        lengths,
        pref_data.dropped_note(rows) or None,
    )
    return Prepared(train, held, prompts, style, pref_data.setup_fields(cfg, train_rows))


def build_trainer(
    cfg: TrainConfig,
    run: rundir.RunDir,
    emitter: Emitter,
    setup: dict[str, Any],
    trainer_kwargs: dict[str, Any],
    model_args: tuple[str, str, Any, bool],
):
    """The objective's TRL trainer. `trainer_kwargs`: model, args' extras (`extra`), the datasets,
    the tokenizer, peft_config, callbacks, eval_tracker, aids. `model_args`: (model path, precision,
    device, sharded), for a full fine-tune's reference."""
    model_path, precision, device, sharded = model_args
    kind, words = trainers.reference_kind(cfg)
    emitter.emit(
        "preference_setup",
        objective=cfg.objective,
        reference=kind,
        reference_note=words,
        beta=cfg.preference.beta,
        loss_type=cfg.preference.dpo_loss if cfg.objective == "dpo" else cfg.objective,
        init_from=cfg.init_from,
        max_prompt_length=cfg.preference.max_prompt_length,
        max_length=cfg.training.max_length,
        **setup,
    )
    args = trainers.trl_config(cfg, run, precision, device.kind, trainer_kwargs.pop("extra"))
    if getattr(args, "disable_dropout", False) and cfg.method != "full" and cfg.lora.dropout > 0:
        emitter.emit(
            "warning",
            message=(
                f"lora.dropout {cfg.lora.dropout:g} is off in this {cfg.objective} run: TRL's "
                f"{type(args).__name__} turns every dropout off (disable_dropout), so that the policy and "
                "its reference score the same forward"
            ),
            hint="set lora.dropout: 0 to say so in the config (the memory estimate already counts it off)",
        )
    ref = trainers.reference_model(cfg, model_path, precision, device, sharded)
    if ref is not None:
        trainer_kwargs["ref_model"] = ref
    if cfg.preference.precompute_ref_log_probs:
        emitter.emit("phase", phase="scoring_reference", message="the reference's log-probs of every row")
    trainer_cls = trainer_kwargs.pop("trainer_cls_wrap")(trainers.trainer_class(cfg.objective))
    return trainer_cls(
        args=args,
        run=run,
        emitter=emitter,
        cfg=cfg,
        max_prompt_length=cfg.preference.max_prompt_length,
        **trainer_kwargs,
    )
