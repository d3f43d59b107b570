"""The trainer's arguments every objective shares (TRL's SFTConfig, DPOConfig, KTOConfig and ORPOConfig
are all HF TrainingArguments): from the config's training, output and report_to keys."""

from __future__ import annotations

import dataclasses

from cockpit.config.schema import TrainConfig
from cockpit.run import rundir


def common_kwargs(cfg: TrainConfig, run: rundir.RunDir, precision: str, device_kind: str, config_cls) -> dict:
    """`config_cls`: the TRL config class they are for (trackio's project is an argument of newer ones)."""
    t = cfg.training
    kwargs = dict(
        output_dir=str(run.checkpoints_dir),
        per_device_train_batch_size=t.micro_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        num_train_epochs=t.epochs,
        max_steps=t.max_steps if t.max_steps is not None else -1,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler,
        warmup_steps=t.warmup,
        optim=t.optimizer,
        weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm,
        gradient_checkpointing=t.gradient_checkpointing,
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=device_kind == "cpu",
        max_length=t.max_length,
        train_sampling_strategy=t.sampling,
        seed=t.seed,
        data_seed=t.seed,
        logging_steps=t.logging_steps,
        logging_first_step=True,
        dataloader_num_workers=t.dataloader_num_workers,
        save_strategy="steps",
        save_steps=cfg.output.save_steps,
        save_total_limit=None,  # rotation happens after the atomic rename (AtomicCheckpoints)
        report_to=list(cfg.report_to or []),  # validated installed (cockpit.config.load)
        run_name=run.run_id,  # the trackers' name for it
        disable_tqdm=True,
    )
    if "trackio" in kwargs["report_to"] and "project" in {f.name for f in dataclasses.fields(config_cls)}:
        kwargs["project"] = "lora-cockpit"  # trackio's project (an argument of newer transformers)
    return kwargs
