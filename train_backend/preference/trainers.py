"""TRL's preference trainers as the run builds them: DPOTrainer, KTOTrainer and ORPOTrainer (in
trl.experimental.orpo since TRL 1.x), each with the cockpit's atomic checkpoints, the prompt cut
(`preference.max_prompt_length`, which TRL 1.16 no longer has) and their TRL config from ours.

The reference (docs/preference.md): with LoRA or QLoRA and a new adapter, TRL's own way, the base
with the adapter disabled (no second copy: `ref_model=None` with a peft model); from `init_from`,
TRL copies the loaded adapter into a frozen adapter named "ref" and scores the reference with it
(the SFT model); a full fine-tune gets a second copy of the base in 16 bits (the compute dtype),
loaded here; `precompute_ref_log_probs` scores every row once before step 1 instead and keeps no
reference at all during training. ORPO has none.
"""

from __future__ import annotations

from typing import Any

from cockpit.config.schema import TrainConfig
from cockpit.run import rundir
from train_backend import checkpoints, train_args


def reference_kind(cfg: TrainConfig) -> tuple[str, str]:
    """(kind, in words) of the reference this run scores against: the memory model's own rule
    (cockpit.models.memory.reference_kind), so the estimate and the run say the same."""
    from cockpit.models.memory import reference_kind as kind_of

    p = cfg.preference
    kind = kind_of(cfg.objective, cfg.method, p.precompute_ref_log_probs, cfg.init_from is not None)
    if kind == "precomputed":
        where = (
            "the init_from adapter's model"
            if cfg.init_from
            else ("the base" if cfg.method == "full" else "the base (adapter disabled)")
        )
        return kind, f"precomputed: {where} scored every row once before step 1; no reference in memory"
    words = {
        "none": "none: ORPO's odds ratio needs no reference model",
        "ref_adapter": "the init_from adapter's model: a frozen copy of that adapter ('ref') on its base",
        "copy": "a second copy of the base in 16 bits (the compute dtype), frozen",
        "adapter_off": "the base with the adapter disabled: no second copy (TRL with peft)",
    }
    return kind, words[kind]


def trl_config(cfg: TrainConfig, run: rundir.RunDir, precision: str, device_kind: str, extra: dict):
    """DPOConfig, KTOConfig or ORPOConfig from the run's config; `extra`: the speed plan's arguments."""
    objective, p = cfg.objective, cfg.preference
    config_cls = config_class(objective)
    kwargs = train_args.common_kwargs(cfg, run, precision, device_kind, config_cls)
    kwargs.update(beta=p.beta)
    if objective == "dpo":
        kwargs.update(loss_type=[p.dpo_loss], precompute_ref_log_probs=p.precompute_ref_log_probs)
    elif objective == "kto":
        kwargs.update(
            precompute_ref_log_probs=p.precompute_ref_log_probs,
            desirable_weight=p.desirable_weight,
            undesirable_weight=p.undesirable_weight,
            # the KL term pairs each row with its neighbour in a fixed-order batch (TRL requires it)
            train_sampling_strategy="sequential",
        )
    for key, value in extra.items():
        if key in {f for f in config_cls.__dataclass_fields__}:
            kwargs[key] = value
    return config_cls(**kwargs)


def config_class(objective: str):
    if objective == "dpo":
        from trl import DPOConfig

        return DPOConfig
    if objective == "kto":
        from trl import KTOConfig

        return KTOConfig
    from trl.experimental.orpo import ORPOConfig

    return ORPOConfig


def trainer_class(objective: str) -> type:
    """The objective's TRL trainer with AtomicCheckpoints and the prompt cut; build it with run=,
    emitter=, cfg=, eval_tracker=, aids= and max_prompt_length= besides TRL's own arguments."""
    if objective == "orpo":
        from trl.experimental.orpo import ORPOTrainer

        class CockpitORPOTrainer(_OrpoPromptCut, checkpoints.AtomicCheckpoints, ORPOTrainer):
            """ORPOTrainer with atomic checkpoints, the prompt cut and a token count for tokens/s."""

        return CockpitORPOTrainer
    if objective == "kto":
        from trl import KTOTrainer

        class CockpitKTOTrainer(_PromptCut, checkpoints.AtomicCheckpoints, KTOTrainer):
            """KTOTrainer with atomic checkpoints and the prompt cut."""

        return CockpitKTOTrainer
    from trl import DPOTrainer

    class CockpitDPOTrainer(_PromptCut, checkpoints.AtomicCheckpoints, DPOTrainer):
        """DPOTrainer with atomic checkpoints and the prompt cut."""

    return CockpitDPOTrainer


class _PromptCut:
    """DPO and KTO: each tokenized prompt keeps its last `max_prompt_length` tokens, cut before TRL
    drops a row whose prompt fills max_length (so a prompt the cut shortens enough is kept); and a
    `length` column (the row's longest sequence) for group_by_length, which the rows lack."""

    def __init__(self, *args, max_prompt_length: int | None = None, **kw):
        self.max_prompt_length = max_prompt_length
        super().__init__(*args, **kw)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        limit = self.max_prompt_length
        if "prompt_ids" in dataset.column_names:
            return super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        max_length = args.max_length
        if limit is not None:
            args.max_length = None  # TRL's own drop waits for the cut
        try:
            dataset = super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        finally:
            args.max_length = max_length
        if limit is not None:
            dataset = dataset.map(lambda row: {"prompt_ids": row["prompt_ids"][-limit:]})
            if max_length is not None:
                dataset = dataset.filter(lambda row: len(row["prompt_ids"]) < max_length)
        answers = [k for k in ("chosen_ids", "rejected_ids", "completion_ids") if k in dataset.column_names]
        return dataset.map(lambda row: {"length": len(row["prompt_ids"]) + max(len(row[k]) for k in answers)})

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        if self._signature_columns is not None and "length" not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, "length"]


class _OrpoPromptCut:
    """ORPO: the prompt (already rendered as text) keeps its last `max_prompt_length` tokens, each row
    gets a `length` for group_by_length, and the real tokens of each batch are counted into
    `num_tokens`, which ORPO's logs lack."""

    def __init__(self, *args, max_prompt_length: int | None = None, **kw):
        self.max_prompt_length = max_prompt_length
        self._cockpit_tokens = 0
        super().__init__(*args, **kw)

    def tokenize_row(self, feature: dict[str, Any], model=None) -> dict:
        limit = self.max_prompt_length
        if limit is not None and isinstance(feature.get("prompt"), str):
            ids = self.processing_class(feature["prompt"], add_special_tokens=False)["input_ids"]
            if len(ids) > limit:
                feature = {**feature, "prompt": self.processing_class.decode(ids[-limit:])}
        row = super().tokenize_row(feature, model)
        row["length"] = max(len(row.get("chosen_input_ids", ())), len(row.get("rejected_input_ids", ())))
        return row

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if model.training:
            for key in ("chosen_attention_mask", "rejected_attention_mask"):
                if key in inputs:
                    self._cockpit_tokens += int(inputs[key].sum())
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            logs["num_tokens"] = float(self._cockpit_tokens)
        super().log(logs, start_time)


def reference_model(cfg: TrainConfig, model_path: str, precision: str, device, sharded: bool):
    """A full fine-tune's reference for dpo and kto: the base again, frozen, in the compute dtype
    (TRL would load it in the policy's fp32). None where TRL needs no second model."""
    if cfg.objective not in ("dpo", "kto") or cfg.method != "full" or cfg.preference.precompute_ref_log_probs:
        return None
    import dataclasses

    from train_backend import model as model_mod

    as_16bit = dataclasses.replace(cfg, method="lora")  # lora loads the weights in the compute dtype
    ref = model_mod.load_model(as_16bit, model_path, precision, device, sharded=sharded)
    ref.eval()
    for param in ref.parameters():
        param.requires_grad_(False)
    return ref
