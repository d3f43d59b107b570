"""What a preference objective (dpo, kto, orpo) asks of the rest of the config, checked before
anything starts; each refusal names the key, what was expected and the fix (docs/preference.md)."""

from __future__ import annotations

from cockpit.config.schema import ConfigError, TrainConfig

# the objectives that score the policy against a reference model (orpo has none)
WITH_REFERENCE = ("dpo", "kto")
# the objectives whose rows are pairs: one prompt, a chosen and a rejected answer
PAIRED = ("dpo", "orpo")


def is_preference(cfg: TrainConfig) -> bool:
    return cfg.objective != "sft"


def check(cfg: TrainConfig) -> None:
    """The keys a preference objective cannot run with, and init_from's own."""
    if cfg.init_from is not None:
        _check_init_from(cfg)
    if not is_preference(cfg):
        return
    objective = cfg.objective
    if cfg.gpus > 1 or cfg.distributed.nnodes > 1:
        raise ConfigError(
            f"gpus: {cfg.gpus}, but objective {objective} runs on one GPU for now (several GPUs are not "
            "tested with TRL's preference trainers here); set gpus: 1"
        )
    if cfg.dataset.sources is not None and len(cfg.dataset.sources) > 1:
        raise ConfigError(
            f"dataset.sources: objective {objective} trains on one source; give its file as dataset.path "
            "(several preference sets: concatenate them into one file first)"
        )
    if cfg.dataset.format not in ("auto",):
        raise ConfigError(
            f"dataset.format: {cfg.dataset.format}, but objective {objective} reads its own columns "
            f"({_columns(cfg)}); leave dataset.format at auto"
        )
    if cfg.training.packing:  # speed: auto never packs preference rows (cockpit/speed/auto.py)
        raise ConfigError(
            f"training.packing: true, but objective {objective} runs each prompt + answer as its own "
            "sequence (TRL does not pack preference rows); remove training.packing"
        )
    if objective == "kto" and cfg.training.micro_batch_size < 2:
        raise ConfigError(
            "training.micro_batch_size: 1, but objective kto estimates its KL term from the other "
            "completions of the same micro-batch (TRL needs at least 2); set it to 2 or more"
        )
    pref = cfg.preference
    if objective == "orpo" and pref.precompute_ref_log_probs:
        raise ConfigError(
            "preference.precompute_ref_log_probs: true, but objective orpo has no reference model; remove it"
        )
    if pref.max_prompt_length is not None and pref.max_prompt_length >= cfg.training.max_length:
        raise ConfigError(
            f"preference.max_prompt_length: {pref.max_prompt_length}, but training.max_length is "
            f"{cfg.training.max_length}: a prompt that long leaves no room for its answer. Set it below "
            "max_length (e.g. half of it), or leave it null"
        )


def _check_init_from(cfg: TrainConfig) -> None:
    if cfg.method == "full":
        raise ConfigError(
            "init_from: an adapter is trained further only with method lora or qlora; with method full, "
            "merge that run first (cockpit export RUN --merge) and give the merged folder as model.name"
        )
    if not str(cfg.init_from).strip():
        raise ConfigError("init_from: empty; give a run id, RUN:best, RUN:N or an adapter folder")


def _columns(cfg: TrainConfig) -> str:
    p, d = cfg.preference, cfg.dataset
    if cfg.objective == "kto":
        return f"{d.prompt_field}, {d.completion_field}, {p.label_field}"
    return f"{d.prompt_field} (optional), {p.chosen_field}, {p.rejected_field}"


def sequences_per_row(objective: str) -> int:
    """Sequences one row puts through the model with gradients: chosen and rejected for a pair."""
    return 2 if objective in PAIRED else 1
