"""The protocol's event types: one TypedDict per `type`, the one definition of what each carries.

The trainer emits them (train_backend), `RunState` folds them, the event lines describe them,
and the field table of docs/protocol.md is generated from them (`python -m
cockpit.protocol.events` prints it; a test checks the file). Every event also has the envelope
`v`, `type` and `ts` (wire.py). A field typed `X | None` may be null; fields are optional
(`total=False`): a reader takes what is there, and a trainer of another version may send more.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict


@dataclass(frozen=True)
class Meaning:
    """What a field holds: `Annotated[int, Meaning("...")]`; it goes into docs/protocol.md."""

    text: str


class HelloEvent(TypedDict, total=False):
    """First message of every trainer process (a restarted run has several)."""

    pid: Annotated[int, Meaning("the trainer's process id")]
    pgid: Annotated[int, Meaning("its process group (a stop signals the group)")]
    run_id: Annotated[str, Meaning("the run directory's name")]
    device: Annotated[dict[str, Any], Meaning("`kind` cuda or cpu, `name`, `capability`, `total_bytes`")]
    precision: Annotated[str, Meaning("bf16, fp16 or fp32, as chosen")]
    versions: Annotated[
        dict[str, Any], Meaning("torch, transformers, peft, trl, bitsandbytes, datasets, accelerate")
    ]
    resume_from: Annotated[str | None, Meaning("the checkpoint this process continues from")]
    price_per_hour: Annotated[float | None, Meaning("from the config, for the cost meter")]
    max_usd: Annotated[float | None, Meaning("the budget (cost.max_usd)")]
    emulated_vram: Annotated[
        dict[str, Any] | None, Meaning("the emulated card: its cap, what sat outside the allocator")
    ]
    distributed: Annotated[
        dict[str, Any] | None, Meaning("several GPUs: world_size, nnodes, rank, strategy, pids")
    ]


class PhaseEvent(TypedDict, total=False):
    """The trainer moved to another phase."""

    phase: Annotated[
        str,
        Meaning(
            "starting, loading_model, preparing_data, quantising, training, evaluating, saving, sampling, "
            "syncing (output.sync: the last copies at the end), done"
        ),
    ]
    message: Annotated[str, Meaning("free text, e.g. the model being loaded")]


class DataEvent(TypedDict, total=False):
    """The dataset as prepared: rows kept and dropped, token lengths before truncation."""

    samples: Annotated[int, Meaning("rows kept")]
    dropped: Annotated[int, Meaning("empty or malformed rows")]
    source_rows: Annotated[int, Meaning("rows read")]
    format: Annotated[str, Meaning("text, messages, prompt_completion or tokens")]
    column: Annotated[str, Meaning("the column read")]
    tokens_min: Annotated[int, Meaning("shortest sample, in tokens")]
    tokens_mean: Annotated[float, Meaning("mean sample length")]
    tokens_p50: Annotated[int, Meaning("median sample length")]
    tokens_p95: Annotated[int, Meaning("95th percentile")]
    tokens_p99: Annotated[int, Meaning("99th percentile")]
    tokens_max: Annotated[int, Meaning("longest sample")]
    tokens_total: Annotated[int, Meaning("tokens after truncation")]
    truncated: Annotated[int, Meaning("samples longer than max_length")]
    max_length: Annotated[int, Meaning("training.max_length")]
    tokens_over: Annotated[
        dict[str, int], Meaning("samples longer than each power of two (for the OOM wizard)")
    ]
    train_on: Annotated[
        str,
        Meaning(
            "answers (the loss counts the answers' tokens) or all (every token), as dataset.train_on chose"
        ),
    ]
    trained_tokens: Annotated[
        int, Meaning("tokens the loss counts, after truncation (each row's first token never counts)")
    ]
    trained_share: Annotated[float | None, Meaning("trained_tokens over tokens_total, 0-1")]
    answers_cut: Annotated[int | None, Meaning("rows whose answers max_length cuts; they train on the rest")]
    answers_dropped: Annotated[
        int | None, Meaning("rows dropped with nothing to train on: every answer cut off, or none")
    ]
    note: Annotated[
        str | None, Meaning("those rows named, e.g. `... cuts the answers of 3 rows (rows 4, 9, 12)`")
    ]
    eval_samples: Annotated[int | None, Meaning("rows held out for evaluation (never trained on)")]
    eval_source: Annotated[str | None, Meaning("where they come from: eval_fraction, a split or a file")]
    prompt_style: Annotated[str, Meaning("how prompts are written: chat_template, llama2, guanaco or plain")]
    prompt_prefix: Annotated[str, Meaning("what llama2-style rows put before [INST], e.g. <s>")]
    sample_prompts: Annotated[int, Meaning("how many eval.prompts are answered at each sampling")]


class SpeedPlanEvent(TypedDict, total=False):
    """What `speed: auto` chose and why, before the weights load."""

    mode: Annotated[str, Meaning("auto or off")]
    choices: Annotated[
        list[dict[str, Any]],
        Meaning("per choice: `name`, `value`, `reason`, `source` (auto|yours|off|fixed)"),
    ]
    micro_batch_size: Annotated[int, Meaning("rows per micro-batch")]
    gradient_accumulation_steps: Annotated[int, Meaning("micro-batches per optimizer step")]
    checkpoint_layers: Annotated[int | None, Meaning("layers recomputed in the backward pass")]
    checkpoint_offload: Annotated[
        bool, Meaning("the recomputed layers' inputs wait in pinned host memory between the passes")
    ]
    num_layers: Annotated[int | None, Meaning("decoder layers of the model")]
    packing: Annotated[str, Meaning("none, rows or flat")]
    samples_per_row: Annotated[float | None, Meaning("samples packed per row (predicted)")]
    attn_implementation: Annotated[str, Meaning("the attention kernel")]
    liger: Annotated[bool, Meaning("Liger's fused kernels applied")]
    lora_backend: Annotated[
        str,
        Meaning(
            "fused: each adapted linear in one autograd function (train_backend.speed.fused_lora); hf: peft's"
        ),
    ]
    mlp_block: Annotated[
        str,
        Meaning(
            "fused: each SiLU MLP and its adapters in one autograd function (train_backend.speed.fused_mlp)"
        ),
    ]
    read_figures: Annotated[
        str,
        Meaning(
            "at_log: the step's figures read at logging steps (train_backend.step_figures); "
            "each_micro_batch: TRL's and HF's own reads"
        ),
    ]
    unpack_scales: Annotated[
        bool,
        Meaning(
            "QLoRA's double-quantised 4-bit scales unpacked into fp32 after loading "
            "(quantization.unpack_scales)"
        ),
    ]
    pad_multiple: Annotated[int, Meaning("rows padded to a multiple of this many tokens (1: to the longest)")]
    dataloader_num_workers: Annotated[int, Meaning("loader worker processes")]
    cache_tokens: Annotated[bool, Meaning("the token cache in the run directory")]
    budget_bytes: Annotated[int | None, Meaning("device memory the plan fits in")]
    predicted_peak_bytes: Annotated[int | None, Meaning("the memory model's peak for the plan")]
    predicted_tokens_per_s: Annotated[float | None, Meaning("the speed model's figure for the plan")]
    busy_tokens_per_micro_batch: Annotated[
        int | None,
        Meaning(
            "tokens per micro-batch from which the card's work outlasts the host's launches (speed model)"
        ),
    ]
    auto_split: Annotated[
        dict[str, Any] | None,
        Meaning(
            "what speed: auto picks for this step with the batch keys free: `micro_batch_size`, "
            "`gradient_accumulation_steps`, `checkpoint_layers`, `tokens_per_s` (speed model)"
        ),
    ]
    flops: Annotated[
        dict[str, Any] | None,
        Meaning(
            "for MFU (cockpit.speed.flops): `model_per_token` (forward + backward, frozen weights without "
            "their weight gradient), `hardware_per_token` (+ the recomputed forward), `attention_context` "
            "(mean causal positions per token, within its sample), `checkpoint_layers`, `peak_flops` (the "
            "card's dense bf16 peak from the catalog, null when unknown) and `peak_source`"
        ),
    ]
    host_probe_ms: Annotated[
        float | None,
        Meaning(
            "on a GPU, the host's ms per iteration of a fixed host-bound forward and backward "
            "(train_backend/speed/host_probe.py); null without one"
        ),
    ]
    host_scale: Annotated[
        float, Meaning("what the speed model's host terms were scaled by for that probe (1: the reference)")
    ]
    host_probe_spread: Annotated[
        float | None,
        Meaning("the probe's rounds: upper over lower quartile (1: steady); null without a probe"),
    ]
    host_rank_scale: Annotated[
        float,
        Meaning(
            "the host scale the splits were ranked at: 1 (the reference host) for a probe within "
            "speed.HOST_NOISE_RATIO of it, which one box's probe moves by between runs; else host_scale"
        ),
    ]
    effective_batch: Annotated[
        dict[str, Any] | None,
        Meaning(
            "the step's size: `config` (your micro-batch x accumulation, samples), `target` (the rows or "
            "samples that makes), `planned` (the plan's product), `unit`, `kept` (planned = target), "
            "`keep_effective_batch` (the config key)"
        ),
    ]


class ModelEvent(TypedDict, total=False):
    """The model is loaded (and quantised, with QLoRA)."""

    name: Annotated[str, Meaning("model.name")]
    method: Annotated[str, Meaning("lora, qlora or full")]
    params_total: Annotated[int, Meaning("parameters (4-bit weights counted as parameters)")]
    params_trainable: Annotated[int, Meaning("parameters the optimizer updates")]
    load_s: Annotated[float, Meaning("load time")]
    rss_bytes: Annotated[int | None, Meaning("host memory after the load")]
    mem_allocated_bytes: Annotated[int | None, Meaning("torch's allocated bytes after the load (CUDA)")]
    mem_reserved_bytes: Annotated[int | None, Meaning("torch's reserved bytes after the load (CUDA)")]
    mem_peak_bytes: Annotated[int | None, Meaning("torch's peak allocated bytes during the load (CUDA)")]
    alloc_retries: Annotated[int | None, Meaning("allocator retries during the load (CUDA)")]
    distributed: Annotated[dict[str, Any] | None, Meaning("several GPUs: the strategy chosen")]
    lora_fused: Annotated[
        dict[str, Any] | None,
        Meaning(
            "speed.backend fused: `fused` (adapted linears fused) and `kept` ({reason: count} left to peft)"
        ),
    ]
    mlp_fused: Annotated[
        dict[str, Any] | None,
        Meaning(
            "speed.mlp_block fused: `fused` (MLPs in one autograd function) and `kept` ({reason: count} "
            "left to their own forward); null when not asked"
        ),
    ]
    scales_unpacked: Annotated[
        dict[str, Any] | None,
        Meaning(
            "quantization.unpack_scales: `weights` (4-bit weights whose double-quantised scales were "
            "unpacked into fp32) and `bytes` (what the device memory grew by), or `kept` (why not); null "
            "when not asked"
        ),
    ]


class TrainBeginEvent(TypedDict, total=False):
    """Training starts (or resumes)."""

    total_steps: Annotated[int, Meaning("optimizer steps of the run")]
    start_step: Annotated[int, Meaning("non-zero when resumed")]
    epochs: Annotated[
        float | None, Meaning("epochs the steps cover; null when training.max_steps bounds the run")
    ]
    micro_batch_size: Annotated[int, Meaning("rows per micro-batch")]
    gradient_accumulation_steps: Annotated[int, Meaning("micro-batches per step")]
    max_length: Annotated[int, Meaning("tokens per row at most")]
    gradient_checkpointing: Annotated[bool, Meaning("activations recomputed")]
    precision: Annotated[str, Meaning("bf16, fp16 or fp32")]
    optimizer: Annotated[str, Meaning("the optimizer")]


class LogEvent(TypedDict, total=False):
    """One per logging step."""

    step: Annotated[int, Meaning("optimizer steps done")]
    total_steps: Annotated[int, Meaning("of the run")]
    epoch: Annotated[float, Meaning("epochs done")]
    loss: Annotated[float | None, Meaning("training loss of the last step")]
    learning_rate: Annotated[float | None, Meaning("the scheduler's rate")]
    grad_norm: Annotated[float | None, Meaning("gradient norm before clipping")]
    tokens_seen: Annotated[int, Meaning("real tokens so far (attention mask sum, never padding)")]
    trained_tokens_seen: Annotated[
        int | None,
        Meaning("tokens the loss counted so far in this attempt (the answers' alone with train_on answers)"),
    ]
    tokens_per_s: Annotated[float | None, Meaning("real tokens over wall time since the previous log")]
    samples_per_s: Annotated[float | None, Meaning("samples over wall time since the previous log")]
    step_time_s: Annotated[float, Meaning("median interval between step ends in the window (the ETA's)")]
    elapsed_s: Annotated[float, Meaning("training time, pauses excluded")]
    rss_bytes: Annotated[int | None, Meaning("host memory (CPU runs)")]
    mem_allocated_bytes: Annotated[int | None, Meaning("torch's allocated bytes (CUDA)")]
    mem_reserved_bytes: Annotated[int | None, Meaning("torch's reserved bytes (CUDA)")]
    mem_peak_bytes: Annotated[int | None, Meaning("torch's peak allocated bytes (CUDA)")]
    alloc_retries: Annotated[
        int | None,
        Meaning("times the CUDA allocator ran out, freed its cache and retried, since the start (CUDA)"),
    ]
    data_wait_s: Annotated[
        float | None,
        Meaning("mean time per optimizer step spent taking its micro-batches from the data loader"),
    ]
    compute_s: Annotated[float | None, Meaning("mean time per optimizer step not spent waiting for data")]
    data_wait_share: Annotated[float | None, Meaning("data wait over the window's wall time, 0-1")]
    gc_s: Annotated[
        float | None,
        Meaning(
            "mean time per optimizer step in Python's cyclic garbage collector (the host queues nothing)"
        ),
    ]
    gc_full: Annotated[int | None, Meaning("full (generation 2) garbage collections in the window")]
    tokens_per_micro_batch: Annotated[
        float | None,
        Meaning("mean tokens per micro-batch in the window, padding included (what the GPU computes)"),
    ]


class CheckpointEvent(TypedDict, total=False):
    """A complete checkpoint was written."""

    step: Annotated[int, Meaning("the step it holds")]
    path: Annotated[str, Meaning("checkpoints/checkpoint-<step>")]
    bytes: Annotated[int, Meaning("its size")]
    save_s: Annotated[float, Meaning("time to write it")]
    removed: Annotated[list[str], Meaning("older checkpoints rotated out")]
    eval_loss: Annotated[float | None, Meaning("the eval loss at this step (null when none ran at it)")]
    best_checkpoint: Annotated[str | None, Meaning("the kept checkpoint with the lowest eval loss")]
    best_eval_loss: Annotated[float | None, Meaning("its eval loss")]


class CommandEvent(TypedDict, total=False):
    """The answer to a command from a client."""

    name: Annotated[str, Meaning("stop, save, pause or resume")]
    accepted: Annotated[bool, Meaning("whether it will be carried out")]
    detail: Annotated[str, Meaning("why not, or when")]
    sender: Annotated[str, Meaning("which client sent it")]


class PausedEvent(TypedDict, total=False):
    """The trainer holds at a step boundary."""

    step: Annotated[int, Meaning("the step it holds at")]


class ResumedEvent(TypedDict, total=False):
    """A paused run goes on."""

    step: Annotated[int, Meaning("the step it goes on from")]
    paused_s: Annotated[float, Meaning("how long it was paused")]


class WarningEvent(TypedDict, total=False):
    """Something the user should know; the run goes on."""

    message: Annotated[str, Meaning("what happened")]
    hint: Annotated[str | None, Meaning("what to do")]


class ErrorEvent(TypedDict, total=False):
    """The run failed; the trainer exits non-zero (exit codes: the table below)."""

    kind: Annotated[
        str,
        Meaning(
            "config, data, model_load, oom, disk, gpu or other; from the export subprocess: "
            "unsupported, check_failed or export"
        ),
    ]
    message: Annotated[str, Meaning("what went wrong")]
    hint: Annotated[str, Meaning("what to do")]
    phase: Annotated[str, Meaning("the phase it failed in")]
    step: Annotated[int | None, Meaning("the step in flight")]
    oom: Annotated[
        dict[str, Any] | None, Meaning("kind oom: the parsed numbers, phase, batch and memory counters")
    ]
    traceback: Annotated[str | None, Meaning("the exception's traceback")]
    checkpoints: Annotated[list[str], Meaning("the complete checkpoints, intact")]
    source: Annotated[str | None, Meaning("client: written by the client that saw the trainer die")]
    returncode: Annotated[int | None, Meaning("the trainer's exit status (client-written)")]
    signal: Annotated[int | None, Meaning("the signal that ended it (client-written)")]
    log_tail: Annotated[str | None, Meaning("the end of backend.log (client-written)")]
    rank: Annotated[int | None, Meaning("several GPUs: the rank whose failure caused it")]
    failed_ranks: Annotated[list[dict[str, Any]] | None, Meaning("several GPUs: the other failed ranks")]


class DoneEvent(TypedDict, total=False):
    """The run ended on purpose."""

    status: Annotated[str, Meaning("finished or stopped")]
    step: Annotated[int, Meaning("the last step")]
    total_steps: Annotated[int, Meaning("of the run")]
    train_loss: Annotated[float | None, Meaning("mean training loss over the run")]
    runtime_s: Annotated[float, Meaning("training time")]
    output: Annotated[str | None, Meaning("the final/ folder with the adapter or model")]
    reason: Annotated[
        str | None,
        Meaning(
            "stopped: request (a stop command or signal) or budget; finished: early_stop "
            "(eval.early_stop_patience)"
        ),
    ]
    message: Annotated[str, Meaning("how it ended")]
    eval_loss: Annotated[float | None, Meaning("the last eval loss (with an eval split)")]
    best_checkpoint: Annotated[str | None, Meaning("the kept checkpoint with the lowest eval loss")]
    best_eval_loss: Annotated[float | None, Meaning("its eval loss")]
    not_spent_s: Annotated[float | None, Meaning("early_stop: the steps left, at this attempt's pace")]
    not_spent_usd: Annotated[
        float | None, Meaning("early_stop: what they would have cost (cost.price_per_hour)")
    ]
    host_probe_end_ms: Annotated[
        float | None, Meaning("finished on a GPU: the host probe again, after the last step (see speed_plan)")
    ]


class BudgetEvent(TypedDict, total=False):
    """The run's cost reached cost.max_usd at a step end: a checkpoint and a stop follow."""

    step: Annotated[int, Meaning("the step it was reached at")]
    cost_usd: Annotated[float, Meaning("price_per_hour x the wall time of every attempt so far")]
    max_usd: Annotated[float, Meaning("the budget")]
    message: Annotated[str, Meaning("what was spent of what, and what happens")]


class EndCommandEvent(TypedDict, total=False):
    """Written by the end runner (cockpit.money.end_runner) around cost.on_end, after the run's end."""

    state: Annotated[str, Meaning("started, then finished, failed or timed_out")]
    command: Annotated[str, Meaning("the shell command, or stop-instance / destroy-instance (cost.on_end)")]
    run_status: Annotated[str, Meaning("how the run ended: finished, stopped or failed")]
    returncode: Annotated[int | None, Meaning("its exit status; null when the shell could not start")]
    error: Annotated[str | None, Meaning("why the shell could not start")]
    duration_s: Annotated[float, Meaning("how long it ran")]
    timeout_s: Annotated[
        float, Meaning("how long it may run (cost.on_end_timeout_min); past it, its process group is ended")
    ]
    trainer_pid: Annotated[int, Meaning("the trainer attempt whose end it was")]
    detail: Annotated[
        str,
        Meaning(
            "stop-instance or destroy-instance: what is being done and what still bills (started), what "
            "was done (after)"
        ),
    ]


class ExitEvent(TypedDict, total=False):
    """Written by a client that saw the trainer end without done or error."""

    returncode: Annotated[int | None, Meaning("null when the client did not launch it")]
    signal: Annotated[int | None, Meaning("the signal that ended it")]
    reason: Annotated[str, Meaning("how it ended")]
    log_tail: Annotated[str, Meaning("the end of backend.log")]


class ProbeEvent(TypedDict, total=False):
    """A finding of the preflight probe subprocess (on its pipe, not in a run)."""

    finding: Annotated[
        str, Meaning("packages, torch, no_gpu, devices, bnb_4bit, matmul, h2d, peer_access, allreduce, done")
    ]
    data: Annotated[dict[str, Any], Meaning("plain numbers and strings; `error` when a measurement failed")]


class DataCheckProgressEvent(TypedDict, total=False):
    """The data check subprocess, while it reads (on its pipe, not in a run): at most once a second."""

    source: Annotated[int, Meaning("the source being read, from 1")]
    rows_read: Annotated[int, Meaning("rows read of it so far")]
    bytes_read: Annotated[int, Meaning("bytes read of it so far")]
    bytes_total: Annotated[int | None, Meaning("its size; null when unknown (the hub)")]


class DataCheckEvent(TypedDict, total=False):
    """The data check's answer (on its pipe, not in a run): docs/data.md describes the report."""

    report: Annotated[dict[str, Any] | None, Meaning("the report; null when the check itself failed")]
    error: Annotated[str | None, Meaning("why the check failed (not a data error: those are in the report)")]


class ConfigChangeEvent(TypedDict, total=False):
    """Written by a client that changed the run's config (OOM remedy, --emulate-vram)."""

    attempt: Annotated[int, Meaning("n: the old config is history/config-<n>.yaml")]
    reason: Annotated[str, Meaning("oom or --emulate-vram")]
    changes: Annotated[dict[str, Any], Meaning("dotted keys and their new values")]
    previous: Annotated[str, Meaning("history/config-<n>.yaml")]
    checkpoints_moved: Annotated[
        str | None, Meaning("history/checkpoints-<n>/ (the adapter's shape changed)")
    ]
    remedy: Annotated[list[str] | None, Meaning("oom: the remedies' keys")]
    title: Annotated[str | None, Meaning("oom: the remedy's title")]
    chosen_by: Annotated[str | None, Meaning("oom: the wizard, or --on-oom auto")]
    predicted_peak_bytes: Annotated[int | None, Meaning("oom: the memory model's peak with the remedy")]
    card_bytes: Annotated[int | None, Meaning("oom: the card's memory")]
    card: Annotated[str | None, Meaning("oom: where the card's size came from")]
    verdict: Annotated[str | None, Meaning("oom: fits, tight, no or unknown")]
    speed: Annotated[float | None, Meaning("oom: relative tokens/s")]
    effect: Annotated[str | None, Meaning("oom: the remedy's effect on the results")]
    resume: Annotated[bool | None, Meaning("oom: resumes from the last checkpoint")]
    from_step_zero: Annotated[bool | None, Meaning("oom: starts again at step 0")]


class ExportProgressEvent(TypedDict, total=False):
    """A stage of `cockpit export`'s subprocess (on its pipe, not in a run's events)."""

    stage: Annotated[
        str,
        Meaning(
            "load, reference (base + adapter's logits), merge, check, write, convert, quantize (K-quants)"
        ),
    ]
    done: Annotated[int, Meaning("units done in this stage")]
    total: Annotated[int, Meaning("units of this stage")]
    unit: Annotated[str, Meaning("layer, tensor, input, step or stage")]
    message: Annotated[str | None, Meaning("what the stage works on")]
    elapsed_s: Annotated[float | None, Meaning("seconds since the stage began")]
    finished: Annotated[bool | None, Meaning("true on the stage's last message")]
    peak_rss_bytes: Annotated[int | None, Meaning("the process's peak resident memory so far (getrusage)")]


class ExportCheckEvent(TypedDict, total=False):
    """The merged model's logits against base + adapter, before anything is written."""

    compared: Annotated[str, Meaning("what against what, in which dtype, on which device")]
    inputs: Annotated[int, Meaning("prompts compared")]
    positions: Annotated[int, Meaning("token positions compared")]
    rms_diff: Annotated[float, Meaning("root-mean-square logit difference")]
    ref_rms: Annotated[float, Meaning("root-mean-square of the reference logits")]
    max_abs_diff: Annotated[float, Meaning("largest absolute logit difference")]
    ref_max_abs: Annotated[float, Meaning("largest absolute reference logit")]
    adapter_effect_rms: Annotated[
        float | None, Meaning("RMS of (base + adapter) - base: what a merge that lost the adapter would show")
    ]
    relative: Annotated[float, Meaning("rms_diff / ref_rms")]
    tolerance: Annotated[
        float, Meaning("the largest relative difference that passes (cockpit/results/merge_check.py)")
    ]
    top1_agree: Annotated[float, Meaning("fraction of positions with the same most likely token")]
    passed: Annotated[bool, Meaning("relative <= tolerance and rms_diff below the adapter's effect")]
    discriminates: Annotated[
        bool, Meaning("the adapter's effect is at least twice rms_diff: a lost adapter could not pass")
    ]
    gating: Annotated[bool | None, Meaning("false: reported only (QLoRA: against the 4-bit base)")]


class ExportReadbackEvent(TypedDict, total=False):
    """The GGUF file read back into the merged model, its next-token logits against the merged
    model's on the merge check's prompts (train_backend/export/readback.py)."""

    file: Annotated[str, Meaning("the GGUF file's name as written")]
    file_type: Annotated[str, Meaning("its type (f16, q8_0, q5_1, q5_0, q4_0, or the K-quant made)")]
    tensors: Annotated[int, Meaning("tensors read")]
    inputs: Annotated[int, Meaning("prompts compared")]
    gaps: Annotated[
        list[float], Meaning("per prompt: max |Δ| of the last position's logits / its largest logit")
    ]
    gap: Annotated[float | None, Meaning("the worst of `gaps`; null when the file could not be read")]
    tolerance: Annotated[
        float, Meaning("the largest gap without a warning, per type (cockpit/results/merge_check.py)")
    ]
    top1_same: Annotated[int, Meaning("prompts whose most likely next token is the same")]
    elapsed_s: Annotated[float, Meaning("seconds to read the file and run the prompts")]
    passed: Annotated[bool, Meaning("read, and every tensor within its type's weight tolerance")]
    logits_passed: Annotated[
        bool, Meaning("gap <= tolerance; false with `passed`: a warning, the quantisation's own effect")
    ]
    weights_error: Annotated[
        float | None,
        Meaning("the worst tensor's ||read - merged|| / ||merged||, worst by its type's tolerance"),
    ]
    weights_tensor: Annotated[str | None, Meaning("that tensor's GGUF name")]
    weights_type: Annotated[str | None, Meaning("its GGUF type (Q4_0, Q8_0, F32, Q6_K, ...)")]
    weights_tolerance: Annotated[
        float | None, Meaning("that type's tolerance (cockpit/results/merge_check.py WEIGHT_TOLERANCE)")
    ]
    weights_by_type: Annotated[
        dict[str, float] | None, Meaning("each GGUF type in the file: its tensors' worst relative error")
    ]
    kept_as: Annotated[str | None, Meaning("a failed file's new name (NAME.failed-check.gguf)")]
    problem: Annotated[str | None, Meaning("why the file could not be read into the model")]
    skipped: Annotated[bool | None, Meaning("true: not read back (`reason`)")]
    reason: Annotated[str | None, Meaning("why it was skipped (--skip-readback)")]


class ExportDoneEvent(TypedDict, total=False):
    """The export is complete in its staging folder."""

    out_dir: Annotated[str, Meaning("the staging folder the client renames into place")]
    files: Annotated[list[dict[str, Any]], Meaning("`name`, `bytes` of each file written")]
    merged: Annotated[bool, Meaning("the adapter was merged into the base")]
    dtype: Annotated[str | None, Meaning("bf16 or fp16 of the merged weights")]
    device: Annotated[dict[str, Any], Meaning("where the merge ran (`kind`, `name`, ...)")]
    params: Annotated[int | None, Meaning("parameters of the merged model")]
    model_type: Annotated[str | None, Meaning("the base's config model_type")]
    eos_tokens: Annotated[
        list[str] | None, Meaning("the chat template's end of turn (generation_config, GGUF)")
    ]
    check: Annotated[dict[str, Any] | None, Meaning("the gating export_check's fields")]
    gguf: Annotated[
        dict[str, Any] | None, Meaning("`file`, `tensors`, `bytes`, `type`, `architecture`, `types`")
    ]
    readback: Annotated[dict[str, Any] | None, Meaning("the export_readback event's fields")]
    kquant: Annotated[
        dict[str, Any] | None,
        Meaning(
            "a K-quant: `type`, `done` (llama-quantize ran), `tool`, `version`, `file`, `command` (by file "
            "names, to run in the export folder)"
        ),
    ]
    export_versions: Annotated[
        dict[str, Any], Meaning("torch, transformers, peft, gguf, safetensors of the export")
    ]
    timings_s: Annotated[dict[str, float], Meaning("seconds per stage")]
    peak_rss_bytes: Annotated[int, Meaning("the process's peak resident memory")]
    stage_peak_rss_bytes: Annotated[dict[str, int], Meaning("peak resident memory at the end of each stage")]
    peak_gpu_bytes: Annotated[int | None, Meaning("torch.cuda.max_memory_allocated (CUDA)")]


class BusyEvent(TypedDict, total=False):
    """The trainer began work between steps that says nothing until it ends: an eval pass, sampling, a
    checkpoint save. Its own event (eval, checkpoint) or the next log ends it; a silence meanwhile is
    judged against that work's past durations, not the steps'."""

    what: Annotated[str, Meaning("eval, samples or save")]
    step: Annotated[int, Meaning("the optimizer step it follows")]


class SyncEvent(TypedDict, total=False):
    """output.sync: the run copied off the machine in the background (cockpit/sync/worker.py): the
    copying began, a checkpoint or final/ is on the target, a try failed; `restored` is written by
    `cockpit restart --from` into the run directory it rebuilt from the target."""

    status: Annotated[str, Meaning("started, synced, failed or restored")]
    what: Annotated[str | None, Meaning("checkpoint, final or record (the config and events alone)")]
    target: Annotated[str, Meaning("hf://ORG/NAME or the folder, as output.sync names it (never a token)")]
    checkpoint: Annotated[str | None, Meaning("checkpoint-<step>, or final")]
    step: Annotated[int | None, Meaning("the checkpoint's step")]
    bytes: Annotated[int | None, Meaning("synced: the bytes copied")]
    duration_s: Annotated[float | None, Meaning("synced: how long the copy took")]
    lag_s: Annotated[float | None, Meaning("synced: from the checkpoint's save to its arrival on the target")]
    removed: Annotated[
        list[str] | None,
        Meaning("synced: older checkpoints deleted there (it keeps output.checkpoints_kept)"),
    ]
    kind: Annotated[
        str | None,
        Meaning(
            "failed: space, permission, missing, auth, not_found, public, offline, rate, network or other"
        ),
    ]
    reason: Annotated[str | None, Meaning("failed: why, in a line")]
    retry_s: Annotated[
        float | None,
        Meaning("failed: when it tries again; null: not again (a newer copy replaces it, or the end)"),
    ]
    failures: Annotated[int | None, Meaning("failed tries so far in this trainer process")]
    synced_at: Annotated[float | None, Meaning("restored: when the checkpoint reached the target")]


class EvalEvent(TypedDict, total=False):
    """The eval loss on the held-out split: the base before step 1, every eval.steps, the end."""

    step: Annotated[int, Meaning("the step evaluated (0: the base model)")]
    stage: Annotated[str, Meaning("base, train or final")]
    eval_loss: Annotated[float, Meaning("mean cross-entropy per predicted token over the eval rows")]
    eval_samples: Annotated[int, Meaning("rows evaluated")]
    eval_tokens: Annotated[int, Meaning("tokens predicted")]
    eval_s: Annotated[float, Meaning("time the pass took")]
    best_step: Annotated[int | None, Meaning("the step with the lowest eval loss so far")]
    best_eval_loss: Annotated[float | None, Meaning("that loss")]
    best_checkpoint: Annotated[str | None, Meaning("the kept checkpoint with the lowest eval loss")]
    evals_without_gain: Annotated[
        int, Meaning("eval.early_stop_patience: evals in a row not beating the best")
    ]
    early_stop_patience: Annotated[int, Meaning("how many the run stops at")]


class SampleEvent(TypedDict, total=False):
    """One answer to one of eval.prompts: base before step 1, after each checkpoint, at the end."""

    stage: Annotated[str, Meaning("base, checkpoint or final")]
    step: Annotated[int, Meaning("the step of the weights")]
    checkpoint: Annotated[str | None, Meaning("checkpoint-<step>, final, or null for the base")]
    index: Annotated[int, Meaning("which prompt (from 0)")]
    count: Annotated[int, Meaning("of how many")]
    prompt: Annotated[str, Meaning("as given, or the eval row's question")]
    reference: Annotated[str | None, Meaning("the eval row's own answer")]
    output: Annotated[str, Meaning("the answer, cut at the format's stop string")]
    finish: Annotated[str, Meaning("eos (an end token), stop (the next-turn marker) or length")]
    end_token: Annotated[str | None, Meaning("the end token that stopped it (finish eos), else null")]
    new_tokens: Annotated[int, Meaning("tokens generated")]
    prompt_tokens: Annotated[int, Meaning("tokens of the rendered prompt")]
    max_new_tokens: Annotated[int, Meaning("eval.max_new_tokens")]
    seed: Annotated[int, Meaning("the RNG seed set for it (training's state restored after)")]
    seconds: Annotated[float, Meaning("generation time")]
    style: Annotated[str, Meaning("the prompt style (as in data)")]


class PreferenceSetupEvent(TypedDict, total=False):
    """A preference run (objective dpo, kto or orpo) set up: its reference, its rows (docs/preference.md)."""

    objective: Annotated[str, Meaning("dpo, kto or orpo")]
    reference: Annotated[
        str,
        Meaning(
            "what the policy is scored against: adapter_off (the base, adapter disabled), ref_adapter (the "
            "init_from adapter, frozen), copy (a 16-bit copy of the base), precomputed, or none (orpo)"
        ),
    ]
    reference_note: Annotated[str, Meaning("the same in words")]
    beta: Annotated[float, Meaning("preference.beta")]
    loss_type: Annotated[str, Meaning("dpo: TRL's loss_type (preference.dpo_loss); else the objective")]
    init_from: Annotated[str | None, Meaning("the adapter folder the run started from")]
    max_prompt_length: Annotated[int | None, Meaning("preference.max_prompt_length")]
    max_length: Annotated[int, Meaning("training.max_length: the most tokens of a prompt + answer")]
    rows: Annotated[int, Meaning("training rows (pairs, or KTO's completions)")]
    sequences_per_row: Annotated[int, Meaning("2 for a pair (chosen and rejected in one forward), 1 for kto")]
    prompt_tokens_p50: Annotated[int, Meaning("median prompt, in tokens, before the cut")]
    prompt_tokens_max: Annotated[int, Meaning("longest prompt")]
    answer_tokens_p50: Annotated[int, Meaning("median answer (chosen, rejected or completion)")]
    answer_tokens_max: Annotated[int, Meaning("longest answer")]
    prompts_cut: Annotated[int, Meaning("rows whose prompt max_prompt_length cuts (its start goes)")]
    answers_cut: Annotated[int, Meaning("rows whose answer max_length cuts (its end goes)")]
    rows_dropped_by_length: Annotated[int, Meaning("rows dropped: the prompt left no room for an answer")]


class PreferenceLogEvent(TypedDict, total=False):
    """A preference run's figures for one logged step, beside its `log` (the fields its objective has)."""

    step: Annotated[int, Meaning("optimizer step")]
    objective: Annotated[str, Meaning("dpo, kto or orpo")]
    loss: Annotated[float | None, Meaning("the objective's loss")]
    accuracy: Annotated[
        float, Meaning("dpo, orpo: share of pairs whose chosen reward beats the rejected one's, 0-1")
    ]
    margins: Annotated[float, Meaning("mean chosen reward minus rejected reward")]
    rewards_chosen: Annotated[float, Meaning("mean reward of the chosen (kto: desirable) answers")]
    rewards_rejected: Annotated[float, Meaning("mean reward of the rejected (kto: undesirable) answers")]
    kl: Annotated[float, Meaning("kto: the batch's KL estimate between the policy and the reference")]
    log_odds_ratio: Annotated[float, Meaning("orpo: mean log-sigmoid of the chosen/rejected log-odds ratio")]
    log_odds_chosen: Annotated[float, Meaning("orpo: mean log-odds of chosen over rejected")]
    nll_loss: Annotated[float, Meaning("orpo: the SFT loss on the chosen answers")]
    logps_chosen: Annotated[float, Meaning("mean log-probability of the chosen answers")]
    logps_rejected: Annotated[float, Meaning("mean log-probability of the rejected answers")]


class PreferenceEvalEvent(TypedDict, total=False):
    """A preference run's eval on the held-out rows (TRL's evaluate): before step 1, each eval.steps,
    and at the end."""

    step: Annotated[int, Meaning("the step evaluated (0: before training)")]
    stage: Annotated[str, Meaning("base, train or final")]
    objective: Annotated[str, Meaning("dpo, kto or orpo")]
    eval_loss: Annotated[float | None, Meaning("the objective's loss on the held-out rows")]
    eval_rows: Annotated[int, Meaning("held-out rows")]
    eval_s: Annotated[float, Meaning("time the pass took")]
    accuracy: Annotated[float, Meaning("dpo, orpo: the reward accuracy on held-out pairs, 0-1")]
    margins: Annotated[float, Meaning("mean chosen minus rejected reward")]
    rewards_chosen: Annotated[float, Meaning("mean reward of the chosen (desirable) answers")]
    rewards_rejected: Annotated[float, Meaning("mean reward of the rejected (undesirable) answers")]
    kl: Annotated[float, Meaning("kto: the KL estimate")]
    log_odds_ratio: Annotated[float, Meaning("orpo: as in preference_log")]
    log_odds_chosen: Annotated[float, Meaning("orpo: as in preference_log")]
    nll_loss: Annotated[float, Meaning("orpo: the SFT loss on the chosen answers")]
    logps_chosen: Annotated[float, Meaning("mean log-probability of the chosen answers")]
    logps_rejected: Annotated[float, Meaning("mean log-probability of the rejected answers")]


class ChatReadyEvent(TypedDict, total=False):
    """The chat backend (cockpit chat, on its pipe) loaded its weights."""

    base_model: Annotated[str, Meaning("the run's model.name, or the model folder")]
    target: Annotated[str, Meaning("the adapter or model folder loaded")]
    kind: Annotated[str, Meaning("adapter (base + LoRA) or model (a whole model)")]
    device: Annotated[dict[str, Any], Meaning("as in hello")]
    precision: Annotated[str, Meaning("bf16, fp16 or fp32")]
    quantized: Annotated[bool, Meaning("a 4-bit base (QLoRA on a GPU)")]
    style: Annotated[str, Meaning("the prompt style")]
    chat_template: Annotated[bool, Meaning("the tokenizer has a chat template")]
    stop_tokens: Annotated[list[str], Meaning("tokens that end an answer: eos and end-of-turn tokens")]
    stop_strings: Annotated[list[str], Meaning("the text format's next-turn marker")]
    load_s: Annotated[float, Meaning("load time")]


class ChatTokenEvent(TypedDict, total=False):
    """The next piece of a chat answer, as it is generated."""

    text: Annotated[str, Meaning("new text (what may begin a stop string is held back)")]


class ChatDoneEvent(TypedDict, total=False):
    """A chat answer ended."""

    text: Annotated[str, Meaning("the whole answer")]
    finish: Annotated[str, Meaning("eos, stop or length")]
    end_token: Annotated[str | None, Meaning("the end token that stopped it (finish eos), else null")]
    new_tokens: Annotated[int, Meaning("tokens generated")]
    prompt_tokens: Annotated[int, Meaning("tokens of the rendered conversation")]
    seconds: Annotated[float, Meaning("generation time")]
    tokens_per_s: Annotated[float | None, Meaning("new tokens over that time")]


# type -> its fields; EVENT_TYPES (wire.py) is this table's keys
EVENTS: dict[str, type] = {
    "hello": HelloEvent,
    "phase": PhaseEvent,
    "data": DataEvent,
    "speed_plan": SpeedPlanEvent,
    "model": ModelEvent,
    "train_begin": TrainBeginEvent,
    "log": LogEvent,
    "checkpoint": CheckpointEvent,
    "command": CommandEvent,
    "paused": PausedEvent,
    "resumed": ResumedEvent,
    "warning": WarningEvent,
    "error": ErrorEvent,
    "done": DoneEvent,
    "exit": ExitEvent,
    "probe": ProbeEvent,
    "data_check_progress": DataCheckProgressEvent,
    "data_check": DataCheckEvent,
    "config_change": ConfigChangeEvent,
    "budget": BudgetEvent,
    "end_command": EndCommandEvent,
    "export_progress": ExportProgressEvent,
    "export_check": ExportCheckEvent,
    "export_readback": ExportReadbackEvent,
    "export_done": ExportDoneEvent,
    "busy": BusyEvent,
    "sync": SyncEvent,
    "eval": EvalEvent,
    "sample": SampleEvent,
    "preference_setup": PreferenceSetupEvent,
    "preference_log": PreferenceLogEvent,
    "preference_eval": PreferenceEvalEvent,
    "chat_ready": ChatReadyEvent,
    "chat_token": ChatTokenEvent,
    "chat_done": ChatDoneEvent,
}
ENVELOPE = ("v", "type", "ts", "mono_s")  # mono_s: the trainer's monotonic clock (docs/protocol.md)
JSON_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def fields(event_type: str) -> dict[str, tuple[Any, str]]:
    """A type's fields: name -> (type, meaning)."""
    hints = typing.get_type_hints(EVENTS[event_type], include_extras=True)
    return {name: (typing.get_args(hint)[0], hint.__metadata__[0].text) for name, hint in hints.items()}


def undeclared(event: dict[str, Any]) -> list[str]:
    """Fields of an event its type does not declare (an unknown type: none are checked)."""
    if event.get("type") not in EVENTS:
        return []
    known = set(fields(event["type"])) | set(ENVELOPE)
    return sorted(k for k in event if k not in known)


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin in JSON_NAMES:  # dict[str, Any], list[str]: an object, an array
        return JSON_NAMES[origin]
    args = typing.get_args(tp)
    if args:
        return " or ".join(_type_name(a) for a in args)
    return JSON_NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def markdown_table() -> str:
    """The field table of docs/protocol.md (between its `events:begin` and `events:end` marks)."""
    lines = ["| type | field | JSON type | meaning |", "|---|---|---|---|"]
    for event_type, cls in EVENTS.items():
        lines.append(f"| `{event_type}` | | | {(cls.__doc__ or '').strip()} |")
        for name, (tp, meaning) in fields(event_type).items():
            lines.append(f"| | `{name}` | {_type_name(tp)} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
