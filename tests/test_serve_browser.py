"""`cockpit serve` from a real browser (bench/serve_browser.py): a real run's view in headless
Chromium, `p` refused by the read-only page and pausing the run through the --control one. A bench
(about 25 s of two cores: a trainer, two servers, their views and Chromium); CI's box has no
chromium, where it skips."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
from support import benches

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bench,
    pytest.mark.skipif(
        not any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome", "chrome")),
        reason="no chromium on PATH (Debian: apt-get install chromium): the browser test needs one",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("textual_serve") is None,
        reason="textual-serve is not installed (the serve extra; the test extra has it)",
    ),
]


def test_a_browser_watches_the_run_read_only_then_pauses_it_with_control(tmp_path, env):
    benches.run_bench("serve_browser.py", env, "--out", str(tmp_path), "--stamp", "t")
    result = json.loads((tmp_path / "t-serve-browser-cpu.json").read_text())
    assert result["status_without_token"] == result["status_wrong_token"] == 403
    assert any("ssh -N -L" in line for line in result["serve_said_read_only"])
    assert result["read_only_pause_sent"] is False  # `p` in the read-only page reached nobody
    assert result["command_event"] == {
        "name": "pause",
        "accepted": True,
        "detail": "pausing after the current step",
    }
    assert result["paused_at_step"] >= 1
    for name in ("t-serve-browser-cpu.png", "t-serve-browser-cpu-read-only.png"):
        png = (tmp_path / name).read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000, (
            name
        )  # a drawn view, not a blank page
