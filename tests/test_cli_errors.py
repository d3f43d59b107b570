"""The command line refuses bad input with a message that names it, before anything starts."""

from __future__ import annotations

import pytest

from cockpit.cli import main


@pytest.mark.parametrize(("value", "expected"), [("0", "give a size above 0"), ("1.2.3", "e.g. 24GiB")])
def test_emulate_vram_refuses_a_size_that_is_no_card(value, expected, capsys):
    with pytest.raises(SystemExit) as info:
        main(["demo", "--emulate-vram", value, "--check"])
    assert info.value.code == 2 and expected in capsys.readouterr().err


def test_emulate_vram_goes_through_the_configs_range_check(capsys):
    assert main(["demo", "--emulate-vram", "99999", "--check"]) == 2
    assert "emulate_vram_gib: 99999.0 (float) is out of range; it must be <= 4096" in capsys.readouterr().err
    assert main(["demo", "--emulate-vram", "24GiB", "--check"]) == 0


@pytest.mark.parametrize("value", ["-5", "0"])
def test_estimate_vram_must_be_a_card_size(value, capsys):
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--model", "synthetic:tiny", "--vram", value])
    assert info.value.code == 2 and "--vram" in capsys.readouterr().err
