"""The emulated card holds the whole process to its size as nvidia-smi counts it: a fake NVML
reading of the process, checked after every micro-batch from the first, and a CUDA-shaped error
that the OOM parsing (and so the wizard) reads."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cockpit.fmt import GIB
from cockpit.run.oom_messages import parse_oom_message
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


def test_nvml_finds_the_gpu_by_its_whole_pci_address():
    """torch gives the PCI domain, bus and device as integers; NVML wants "DDDDDDDD:BB:DD.0"
    (str() of the bus number alone made NVML refuse the lookup: the check never ran)."""
    from train_backend.emulated_card import pci_address

    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    assert pci_address(props) == "00000000:1B:00.0"
    assert (
        pci_address(SimpleNamespace(pci_domain_id=1, pci_bus_id=0xDC, pci_device_id=3)) == "00000001:DC:03.0"
    )


@pytest.mark.parametrize(
    ("reader", "why"),
    [
        (lambda: lambda: None, "NVML does not list this process"),
        (lambda: (_ for _ in ()).throw(RuntimeError("no NVML")), "NVML: RuntimeError: no NVML"),
    ],
)
def test_a_card_nvml_cannot_read_says_why_in_the_emulation_record(monkeypatch, reader, why):
    pytest.importorskip("torch")
    from train_backend import emulated_card

    monkeypatch.setattr(emulated_card, "nvml_process_reader", reader)
    record = {"limit_bytes": 24 * GIB}
    assert emulated_card.start(24 * GIB, record) is None
    assert record["whole_process"] is False and record["whole_process_why"].startswith(why)


def test_a_card_nvml_reads_holds_the_whole_process(monkeypatch):
    pytest.importorskip("torch")
    from train_backend import emulated_card

    monkeypatch.setattr(emulated_card, "nvml_process_reader", lambda: lambda: 3 * GIB)
    record: dict = {}
    card = emulated_card.start(24 * GIB, record)
    assert card is not None and record == {"whole_process": True}
    card.check()
    assert card.peak_used_bytes == 3 * GIB
