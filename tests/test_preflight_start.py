"""The quick preflight of a training start: what it checks, its lines, its time bound (a hung
driver, a hub that never answers), no torch or textual, and how `train`/`demo` use it: headless
lines before the run, a notice in the TUI, `--skip-preflight`, and the demo still runs."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from conftest import ROOT, events, only_run
from support.nvml_fake import FakeGpu, FakeNvml
from support.pilot import events_until_step, scripted
from textual.app import App
from textual.geometry import Region

from cockpit.cli import main as cli
from cockpit.config import schema as config
from cockpit.config.load import load_config
from cockpit.fmt import GIB
from cockpit.preflight import quick as preflight_start
from cockpit.preflight.checks.base import CheckResult
from cockpit.run import process
from screens.preflight.notice import PreflightNotice
from screens.run.app import CockpitApp
from screens.run.view import RunView

CAPPED = dict(name="NVIDIA H100 80GB HBM3", mem_total_bytes=80 * GIB, power_limit_mw=450_000, processes=[])


def demo_config() -> config.TrainConfig:
    return load_config(cli.demo_config_path(), [])


def dirs(tmp_path) -> dict:
    return {"cache": tmp_path / "cache", "runs": tmp_path / "runs"}


def test_the_demo_is_checked_locally_in_well_under_a_second(tmp_path):
    started = time.monotonic()
    checked = preflight_start.run_start_preflight(
        demo_config(), nvml_source=lambda: FakeNvml([FakeGpu(**{**CAPPED, "power_limit_mw": 700_000})]),
        dirs=dirs(tmp_path),
    )  # fmt: skip
    assert time.monotonic() - started < 1.0
    by_id = {r.id: r for r in checked.results}
    assert by_id["gpu.visible"].status == "pass" and by_id["gpu.power_limit"].status == "pass"
    assert by_id["network.hub"].status == "skip" and "are local" in by_id["network.hub"].value
    assert {"host.cpu", "host.ram_vram", "host.ram_model", "disk.type.cache", "disk.free.runs"} <= set(by_id)
    assert by_id["host.ram_model"].status == "pass"  # the tiny model's size was known
    assert not any(i.startswith(("gpu.bf16", "gpu.bnb", "performance.")) for i in by_id)  # no torch here


def test_problems_become_lines_with_their_fixes(tmp_path):
    checked = preflight_start.run_start_preflight(
        demo_config(), nvml_source=lambda: FakeNvml([FakeGpu(**CAPPED)]), dirs=dirs(tmp_path)
    )
    lines = checked.lines()
    assert lines[0].startswith("preflight (quick, ") and "warn" in lines[0] and "going on" in lines[0]
    power = lines.index(next(line for line in lines if line.startswith("[WARN] Power limit")))
    assert "450 W of default 700 W" in lines[power] and lines[power + 1].strip().startswith("fix: ")
    assert lines[-1].strip().startswith("(`cockpit preflight` runs every check; --skip-preflight")
    assert checked.problems and all(r.status in ("fail", "warn") for r in checked.problems)


def test_no_gpu_is_a_failure_said_before_the_run(tmp_path):
    checked = preflight_start.run_start_preflight(
        demo_config(), nvml_source=lambda: FakeNvml(init_error="driver_not_loaded"), dirs=dirs(tmp_path)
    )
    assert checked.problems[0].id == "gpu.visible" and checked.problems[0].status == "fail"
    assert checked.lines()[1].startswith("[FAIL] GPU visible to NVML: NVML did not start")


@pytest.fixture
def silent_hub(monkeypatch):
    """A hub on loopback that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield endpoint
    server.close()


def test_bounded_when_the_driver_and_the_hub_hang(tmp_path, silent_hub, monkeypatch):
    monkeypatch.setenv("COCKPIT_CACHE", str(tmp_path / "cockpit-cache"))  # no cached hub config
    cfg = load_config(None, ["model.name=someorg/some-model", "dataset.path=demo"])
    hung = FakeNvml([FakeGpu(**CAPPED)], init_block_s=30)
    started = time.monotonic()
    checked = preflight_start.run_start_preflight(cfg, nvml_source=lambda: hung, dirs=dirs(tmp_path))
    took_s = time.monotonic() - started
    hung.unblock()
    assert took_s < 3.0, took_s
    by_id = {r.id: r for r in checked.results}
    assert by_id["gpu.visible"].status == "fail" and "did not answer within" in by_id["gpu.visible"].value
    hub = by_id["network.hub"]
    assert hub.status in ("warn", "fail") and silent_hub in json.dumps(hub.evidence) + hub.value


def test_the_hub_is_checked_only_when_the_run_needs_it(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    local_model = tmp_path / "model"
    local_model.mkdir()
    (local_model / "config.json").write_text("{}")
    assert "are local" in preflight_start.hub_unneeded(demo_config())
    # `cockpit demo --real`'s model comes from `cockpit fetch` (the package index), not the hub
    assert preflight_start.hub_unneeded(load_config(None, ["model.name=smollm2-135m"])) is not None
    assert preflight_start.hub_unneeded(load_config(None, [f"model.name={local_model}"])) is not None
    assert preflight_start.hub_unneeded(load_config(None, ["model.name=org/model"])) is None
    assert preflight_start.hub_unneeded(load_config(None, ["dataset.path=org/data"])) is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE" in preflight_start.hub_unneeded(load_config(None, ["model.name=org/m"]))


def test_a_preflight_that_cannot_be_planned_is_a_warning_not_a_crash(tmp_path, monkeypatch):
    def broken(*_a, **_k):
        raise OSError("mountinfo unreadable")

    monkeypatch.setattr(preflight_start, "start_plan", broken)
    checked = preflight_start.run_start_preflight(demo_config(), nvml_source=FakeNvml, dirs=dirs(tmp_path))
    [problem] = checked.problems
    assert problem.status == "warn" and "OSError: mountinfo unreadable" in problem.value and problem.fix


def test_imports_neither_torch_nor_textual():
    code = (
        "import sys, json\n"
        "from cockpit.cli import main as cli\n"
        "from cockpit.config import load as config_load\n"
        "from cockpit.preflight import quick as preflight_start\n"
        "preflight_start.run_start_preflight(config_load.load_config(cli.demo_config_path(), []))\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    mods = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert not mods & {"torch", "textual", "transformers"}


class Launched(Exception):
    """Stands in for the trainer's launch: the test stops there."""


def test_skip_preflight_starts_without_it(env, monkeypatch, capsys):
    calls = []

    def counted(cfg, **_kw):
        calls.append(cfg)
        return preflight_start.StartPreflight([], 0.0)

    monkeypatch.setattr(preflight_start, "run_start_preflight", counted)

    def launch(run):
        raise Launched(run.run_id)

    monkeypatch.setattr(process, "launch", launch)
    with pytest.raises(Launched):
        cli.main(["demo", "--no-ui", "--skip-preflight"])
    assert calls == [] and "preflight" not in capsys.readouterr().out
    assert cli.main(["demo", "--no-ui", "--check"]) == 0 and calls == []  # --check only validates
    with pytest.raises(Launched):
        cli.main(["demo", "--no-ui"])
    assert len(calls) == 1


@pytest.mark.slow
def test_headless_demo_says_the_problems_first_and_still_trains(env, monkeypatch, capsys):
    monkeypatch.setattr(preflight_start, "NVML_SOURCE", lambda: FakeNvml([FakeGpu(**CAPPED)]))
    code = cli.main(["demo", "--no-ui", "--log-every", "0", "--set", "training.max_steps=2"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, "\n".join(out)
    assert out[0].startswith("preflight (quick, ") and "going on with the run" in out[0]
    power = next(i for i, line in enumerate(out) if line.startswith("[WARN] Power limit"))
    trainer = next(i for i, line in enumerate(out) if "trainer pid" in line)
    assert power < trainer
    assert events(only_run(env))[-1]["status"] == "finished"


async def test_tui_start_shows_the_problems_in_a_notice_and_goes_on(tmp_path):
    checked = preflight_start.run_start_preflight(
        demo_config(), nvml_source=lambda: FakeNvml([FakeGpu(**CAPPED)]), dirs=dirs(tmp_path)
    )
    steps = events_until_step(10)
    session = scripted(tmp_path, steps)
    app = CockpitApp(
        session, poll_interval_s=0.02, clock=lambda: steps[-1]["ts"], preflight_problems=checked.problems
    )
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, PreflightNotice)
        shown = str(app.screen.query_one("#notice-problems").render())
        assert "Power limit" in shown and "450 W of default 700 W" in shown and "fix:" in shown
        deadline = time.monotonic() + 5
        while app.run_view.updates_shown == 0:  # the run goes on under the notice
            assert time.monotonic() < deadline
            await pilot.pause(0.02)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, RunView)


def shown_lines(widget) -> list[str]:
    """The rows a widget draws, as text."""
    return [strip.text.rstrip() for strip in widget.render_lines(Region(0, 0, *widget.region.size))]


async def test_a_fix_wrapped_in_the_notice_goes_on_under_its_text():
    """Walkthrough: the notice's `fix:` went on at the left edge (`in a` / `container, ...`)."""
    fix = (
        "install or load the NVIDIA driver (`nvidia-smi` must work); in a container, start it with --gpus all"
    )
    problem = CheckResult("gpu.visible", "gpu", "GPU visible", "fail", value="no NVIDIA driver", fix=fix)

    class Notice(App):
        def on_mount(self) -> None:
            self.push_screen(PreflightNotice([problem]))

    app = Notice()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = shown_lines(app.screen.query_one("#notice-problems"))
    at = next(i for i, line in enumerate(lines) if "fix: " in line)
    column = lines[at].index("fix: ") + len("fix: ")
    assert lines[at + 1][:column].strip() == "" and lines[at + 1][column] != " ", lines
    assert " ".join(" ".join(lines[at:]).split()).endswith("fix: " + fix)
