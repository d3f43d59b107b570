"""Test aids: faults and slowdowns that tests and benches put into a real run; never a user's.

They reach the trainer in the environment variable COCKPIT_TEST_AIDS, a JSON object:

    COCKPIT_TEST_AIDS='{"fail_at_step": 3, "fail_kind": "oom"}' cockpit train run.yaml

Every trainer process (every rank) inherits it from the command that starts it; `environ()` writes
it for a test's or a bench's subprocess. A fault (`fail_at_step`) fires in the first trainer of a
run only: a restart or an OOM relaunch resumes past it, as past a real fault once fixed. An aid
the trainer cannot honour fails the run at its start, as a config error that names the aid.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cockpit.config.load import section_from_dict
from cockpit.config.schema import ConfigError, TrainConfig

ENV = "COCKPIT_TEST_AIDS"
MARK = f"(injected by {ENV})"  # in the message of every fault an aid raises
HINT = f"Fix {ENV} in the environment of the command that started the trainer (train_backend/test_aids.py)."


def _aid(default: Any, doc: str, **limits: Any) -> Any:
    return field(default=default, metadata={"doc": doc, **limits})


@dataclass(frozen=True)
class Aids:
    fail_at_step: int | None = _aid(None, "raise an error at the start of this optimizer step", min=1)
    fail_kind: str = _aid(
        "other",
        "what to raise: other (RuntimeError), oom (torch.OutOfMemoryError with a real message), "
        "disk_full (ENOSPC in the middle of the checkpoint save at that step)",
        choices=("other", "oom", "disk_full"),
    )
    fail_rank: int | None = _aid(
        None, "with several processes, only this global rank raises at fail_at_step", min=0
    )
    step_sleep_s: float = _aid(0.0, "sleep this long in every optimizer step", min=0, max=60)
    collate_cpu_ms: float = _aid(
        0.0,
        "burn this much CPU in the data collator for every batch, an expensive on-the-fly "
        "preprocessing that makes a run input-bound (bench/input_bound.py)",
        min=0,
        max=60000,
    )
    log_cpu_ms: float = _aid(
        0.0,
        "burn this much CPU in the trainer's main thread each time it logs, an expensive logging "
        "callback (a slow tracker) that makes a run CPU-bound outside the loader (bench/doctor_fixes.py)",
        min=0,
        max=60000,
    )
    free_bytes: int | None = _aid(
        None,
        "the checkpoint disk-space guard sees this many bytes free, less what checkpoints/ holds "
        "(a disk that fills as checkpoints are written)",
        min=0,
    )
    eval_losses: str | None = _aid(
        None,
        "the eval losses the passes report, comma-separated, in order (the base model's first), in "
        "place of the measured ones; past the list, the measured ones (early stopping's e2e test)",
    )
    count_reads: bool = _aid(
        False,
        "count the host's reads of tensors (item, tolist, cpu, numpy, bool, int, float: on a GPU each "
        "waits for it) between one micro-batch's training_step and the next, into RUN/aid-reads.jsonl "
        "(train_backend.step_figures)",
    )
    corrupt_gguf_tensor: str | None = _aid(
        None,
        "the export zeroes this tensor's bytes in the GGUF it wrote (e.g. output.weight) before it "
        "reads the file back: a damaged file, which the read-back check must fail",
    )

    def eval_loss(self, index: int, measured: float) -> float:
        """The loss the `index`th eval pass of this trainer reports."""
        given = [float(v) for v in self.eval_losses.split(",")] if self.eval_losses else []
        return given[index] if index < len(given) else measured


class AidError(ConfigError):
    """A test aid the trainer cannot honour; `hint` says where it came from."""

    hint = HINT


def environ(**aids: Any) -> dict[str, str]:
    """{COCKPIT_TEST_AIDS: the aids as JSON}, to add to a subprocess's environment; checked here, so
    a misspelt aid fails the test that wrote it rather than its trainer."""
    text = json.dumps(aids)
    parse(text)
    return {ENV: text}


def parse(text: str | None) -> Aids:
    """The aids in `text` (COCKPIT_TEST_AIDS's value), each checked as a config key is."""
    if not text:
        return Aids()
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise AidError(f'{ENV}: not JSON ({exc}); give an object, e.g. {{"step_sleep_s": 0.2}}') from None
    try:
        return section_from_dict(Aids, raw, f"{ENV}.")
    except ConfigError as exc:
        raise AidError(str(exc)) from None


def read(env: Mapping[str, str], cfg: TrainConfig, first_attempt: bool) -> Aids:
    """The aids of this trainer: checked against the run's config; without the fault after the
    run's first trainer."""
    aids = parse(env.get(ENV))
    max_steps = cfg.training.max_steps
    if aids.fail_at_step is not None and max_steps is not None and aids.fail_at_step > max_steps:
        raise AidError(
            f"{ENV}: fail_at_step {aids.fail_at_step} is after training.max_steps ({max_steps}); "
            "the fault would never fire"
        )
    try:
        aids.eval_loss(0, 0.0)
    except ValueError:
        raise AidError(f"{ENV}: eval_losses {aids.eval_losses!r}: give numbers, comma-separated") from None
    world = cfg.gpus * cfg.distributed.nnodes
    if aids.fail_rank is not None and aids.fail_rank >= world:
        raise AidError(f"{ENV}: fail_rank {aids.fail_rank}, but the job has {world} ranks (0 to {world - 1})")
    if not first_attempt and aids.fail_at_step is not None:
        aids = replace(aids, fail_at_step=None)  # the first trainer's fault: a later one resumes past it
    return aids
