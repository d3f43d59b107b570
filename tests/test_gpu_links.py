"""What joins the GPUs: the NVLink fields of the telemetry sampler, over the fake NVML and over a
stand-in for pynvml that answers the way the real library does (link by link)."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest
from support.nvml_fake import FakeGpu, FakeNvml

from cockpit.telemetry.nvml import NVML_SLOW_FIELDS, PynvmlSource, nvlink_active, nvlink_speed_mbps
from cockpit.telemetry.sampler import Sampler


def test_nvlink_is_a_slow_field_read_from_the_fake():
    fake = FakeNvml([FakeGpu(nvlink_active=12, nvlink_speed_mbps=25_781), FakeGpu()])
    sampler = Sampler(fake)
    samples = [sampler.sample() for _ in range(6)]
    assert "nvlink_active" in NVML_SLOW_FIELDS and "nvlink_speed_mbps" in NVML_SLOW_FIELDS
    assert [(g.nvlink_active, g.nvlink_speed_mbps) for g in samples[-1].gpus] == [(12, 25_781), (18, 26_562)]
    assert all(s.gpus[0].nvlink_active == 12 for s in samples)  # reused between slow reads
    assert fake.count("nvlink_active", 0) == 2  # samples 1 and 6 of 6


def test_a_card_without_nvlink_answers_not_supported_and_is_not_asked_again():
    fake = FakeNvml([FakeGpu(name="NVIDIA GeForce RTX 4090", nvlink_active=None, nvlink_speed_mbps=None)])
    sampler = Sampler(fake)
    samples = [sampler.sample() for _ in range(11)]
    gpu = samples[-1].gpus[0]
    assert (gpu.nvlink_active, gpu.nvlink_speed_mbps) == (None, None)
    assert gpu.error is None and gpu.pcie_gen == 5  # NotSupported is no error; the other fields go on
    assert fake.count("nvlink_active") == 1 and fake.count("nvlink_speed_mbps") == 1
    assert fake.count("pcie_gen") == 3


def real_like(states: dict[int, int | Exception], speed: SimpleNamespace | None = None) -> SimpleNamespace:
    """pynvml's names and errors, with NVLink answers per link (a link not listed: InvalidArgument)."""

    def state(handle, link):
        answer = states.get(link, pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT))
        if isinstance(answer, Exception):
            raise answer
        return answer

    def field_values(handle, ids):
        assert ids == [pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON]
        return [speed]

    return SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        NVML_NVLINK_MAX_LINKS=pynvml.NVML_NVLINK_MAX_LINKS,
        NVML_FEATURE_ENABLED=pynvml.NVML_FEATURE_ENABLED,
        NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON=pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON,
        nvmlDeviceGetNvLinkState=state,
        nvmlDeviceGetFieldValues=field_values,
    )


def test_the_real_path_counts_the_links_that_are_up():
    # 18 links, two of them down; links 18 and up do not exist on this card
    states = {link: int(link not in (3, 7)) for link in range(18)}
    assert nvlink_active(real_like(states), handle=0) == 16
    # an A100 PCIe without its bridge: links exist, none up
    assert nvlink_active(real_like(dict.fromkeys(range(12), 0)), handle=0) == 0


def test_the_real_path_raises_not_supported_for_a_card_without_nvlink():
    not_supported = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    for states in ({}, dict.fromkeys(range(pynvml.NVML_NVLINK_MAX_LINKS), not_supported)):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            nvlink_active(real_like(states), handle=0)
    lost = {0: 1, 1: pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)}
    with pytest.raises(pynvml.NVMLError_GpuIsLost):  # any other error is the sampler's to judge
        nvlink_active(real_like(lost), handle=0)


def test_the_real_path_reads_the_links_speed_from_a_field_value():
    ok = SimpleNamespace(nvmlReturn=pynvml.NVML_SUCCESS, value=SimpleNamespace(uiVal=25_781))
    assert nvlink_speed_mbps(real_like({}, ok), handle=0) == 25_781
    refused = SimpleNamespace(nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED, value=SimpleNamespace(uiVal=0))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvlink_speed_mbps(real_like({}, refused), handle=0)


def test_pynvml_source_hands_the_nvlink_fields_to_their_readers():
    source = PynvmlSource()
    source._nv = real_like(dict.fromkeys(range(4), 1))
    assert source.read(0, "nvlink_active") == 4
