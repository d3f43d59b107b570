"""The emulated card holds the whole process to its size as nvidia-smi counts it: a fake NVML
reading of the process, checked after every micro-batch from the first, and a CUDA-shaped error
that the OOM parsing (and so the wizard) reads."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cockpit.fmt import GIB
from cockpit.oom.messages import parse_oom_message
from train_backend.emulated_card import MARK, EmulatedCard


class FakeOom(RuntimeError):
    """Stands in for torch.OutOfMemoryError."""


def card_with(readings: list[int | None]) -> EmulatedCard:
    values = iter(readings)
    return EmulatedCard(24 * GIB, lambda: next(values), lambda: (20 * GIB, 22 * GIB), FakeOom)


def test_under_the_size_nothing_happens_and_the_peak_is_kept():
    card = card_with([10 * GIB, None, 23 * GIB])
    for _ in range(3):
        card.check()
    assert card.peak_used_bytes == 23 * GIB and card.checks == 3


def test_past_the_size_as_nvidia_smi_counts_it_a_cuda_shaped_oom():
    card = card_with([int(24.40 * GIB)])  # the article's 13B case: 24.40 GiB on a "24 GiB" card
    with pytest.raises(FakeOom) as raised:
        card.check()
    text = str(raised.value)
    assert MARK in text
    info = parse_oom_message(f"OutOfMemoryError: {text}")
    assert info is not None and info.format == "new"
    assert info.total_bytes == pytest.approx(24 * GIB, rel=1e-3)
    assert info.process_bytes == pytest.approx(24.40 * GIB, rel=1e-3)


def test_every_micro_batch_is_checked_from_the_first():
    card = card_with([5 * GIB, 25 * GIB])
    steps = []
    trainer = SimpleNamespace(training_step=lambda *a, **k: steps.append(a) or 0.5)
    card.watch(trainer)
    assert trainer.training_step("model", {"input_ids": 1}) == 0.5
    with pytest.raises(FakeOom):
        trainer.training_step("model", {"input_ids": 2})
    assert len(steps) == 2 and card.checks == 2
