"""The idle watch with no client attached (cockpit.money.idle_watch): the end runner's watch of the
GPUs through the fake NVML, on a clock the test moves (no minutes are slept): cost.on_idle runs once
after cost.idle_minutes of idle GPUs with no client and no run training, never while a GPU works or
a client is attached, and the watch leaves when a run trains or NVML cannot be read. Then the end
runner running it after the run's end, and a live client's presence file."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.nvml_fake import FakeGpu, FakeNvml

from cockpit.live.session import RunSession
from cockpit.money import end_runner, idle, idle_watch
from cockpit.run import clients, process
from cockpit.run.rundir import RunDir

FIXTURE = Path(__file__).parent / "fixtures" / "eval_run_events.jsonl"
SETTINGS = idle.IdleSettings(idle_minutes=5, on_idle="echo idle >> idled.txt")


class Clock:
    """Monotonic time that moves only when the watch sleeps; `on_sleep` lets a test act at a time."""

    def __init__(self, on_sleep=None):
        self.now = 1000.0
        self.slept = 0
        self.on_sleep = on_sleep or (lambda t: None)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept += 1
        assert self.slept < 1000, "the watch never ended"
        self.now += seconds
        self.on_sleep(self.now - 1000.0)


def ended_run(root: Path, name: str = "20261201-223529-tiny") -> RunDir:
    run = RunDir(root / name)
    run.path.mkdir(parents=True)
    run.events_path.write_bytes(FIXTURE.read_bytes())
    return run


def watch(run: RunDir, fake: FakeNvml, clock: Clock, **kw) -> idle_watch.WatchEnd:
    lines = kw.pop("lines", [])
    return idle_watch.watch(
        run,
        kw.pop("settings", SETTINGS),
        runs_root=run.path.parent,
        source_factory=lambda: fake,
        clock=clock,
        sleep=clock.sleep,
        poll_s=15.0,
        say=lines.append,
        **kw,
    )


def idled_at(run: RunDir) -> list[str]:
    path = run.path / "idled.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_idle_gpus_with_no_client_run_on_idle_once_after_the_window(tmp_path):
    run = ended_run(tmp_path)
    clock = Clock()
    fake = FakeNvml(gpus=[FakeGpu(util_pct=0), FakeGpu(util_pct=3)])
    end = watch(run, fake, clock)
    assert end.reason == "on_idle_ran" and idled_at(run) == ["idle"]
    assert clock.now - 1000.0 == 300.0  # the first idle reading at 0 s, on_idle at the 5th minute
    assert "GPU0 0%, GPU1 3%" in end.text and "ran cost.on_idle" in end.text
    warning = [json.loads(x) for x in run.events_path.read_text().splitlines()][-1]
    assert warning["type"] == "warning" and warning["message"].startswith(
        "idle alarm with no client attached"
    )
    assert "on_idle: running: echo idle >> idled.txt" in run.log_path.read_text()


def test_a_working_gpu_restarts_the_spell(tmp_path):
    run = ended_run(tmp_path)
    fake = FakeNvml(gpus=[FakeGpu(util_pct=0), FakeGpu(util_pct=0)])

    def gpu1_works_once(t: float) -> None:
        fake.gpus[1].util_pct = 40 if t == 240.0 else 0  # one busy reading at the 4th minute

    clock = Clock(gpu1_works_once)
    assert watch(run, fake, clock).reason == "on_idle_ran"
    assert clock.now - 1000.0 == 255.0 + 300.0  # idle again from 4:15, five minutes more


def test_an_attached_client_holds_the_watch_until_it_leaves(tmp_path):
    run = ended_run(tmp_path)
    other = ended_run(tmp_path, "20261201-230000-tiny")
    holder = {}

    def client(t: float) -> None:
        if t == 60.0:
            holder["ctx"] = clients.attached(other)  # this test's process: alive
            holder["ctx"].__enter__()
        if t == 600.0:
            holder["ctx"].__exit__(None, None, None)

    clock = Clock(client)
    lines: list[str] = []
    end = watch(run, FakeNvml(gpus=[FakeGpu(util_pct=0)]), clock, lines=lines)
    assert end.reason == "on_idle_ran" and idled_at(run) == ["idle"]
    assert clock.now - 1000.0 == 600.0 + 300.0  # never during the client's ten minutes
    assert any("a client is attached: 20261201-230000-tiny (pid" in line for line in lines)
    assert not list((other.path / "clients").iterdir())  # its presence file went with it


def test_a_dead_clients_presence_file_does_not_count(tmp_path):
    run = ended_run(tmp_path)
    (run.path / "clients").mkdir()
    (run.path / "clients" / "4194321.json").write_text(json.dumps({"pid": 4194321, "create_time": 1.0}))
    assert clients.attached_clients([run]) == []
    assert watch(run, FakeNvml(gpus=[FakeGpu(util_pct=0)]), Clock()).reason == "on_idle_ran"


def test_a_run_training_ends_the_watch_without_acting(tmp_path, monkeypatch):
    run = ended_run(tmp_path)
    ended_run(tmp_path, "20261201-230000-tiny")
    monkeypatch.setattr(process, "is_alive", lambda r: r.run_id == "20261201-230000-tiny")
    end = watch(run, FakeNvml(gpus=[FakeGpu(util_pct=0)]), Clock())
    assert end.reason == "run_training" and "20261201-230000-tiny is training" in end.text
    assert idled_at(run) == []


@pytest.mark.parametrize("fake", [FakeNvml(init_error="driver_not_loaded"), FakeNvml(gpus=0)])
def test_no_gpu_to_watch_ends_the_watch(tmp_path, fake):
    run = ended_run(tmp_path)
    assert watch(run, fake, Clock()).reason == "no_gpu" and idled_at(run) == []


def test_an_on_idle_that_cannot_start_is_said(tmp_path):
    run = ended_run(tmp_path)
    end = watch(run, FakeNvml(gpus=[FakeGpu(util_pct=0)]), Clock(), starter=lambda cmd, log: "no shell")
    assert end.reason == "on_idle_failed" and "cost.on_idle could not start (no shell)" in end.text


def test_the_end_runner_watches_after_the_runs_end(tmp_path, monkeypatch):
    """run_end of an ended run whose config sets on_end and on_idle: on_end first, then the watch."""
    from conftest import write_config

    run = ended_run(tmp_path)
    write_config(
        run.config_path,
        {
            "cost.on_end": "echo end >> idled.txt",
            "cost.on_idle": "echo idle >> idled.txt",
            "cost.idle_minutes": 2,
        },
    )
    clock = Clock()
    monkeypatch.setattr(idle_watch, "NVML_SOURCE", lambda: FakeNvml(gpus=[FakeGpu(util_pct=1)]))
    monkeypatch.setattr(idle_watch, "time", SimpleNamespace(monotonic=clock, sleep=clock.sleep))
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    assert end_runner.run_end(run, 4194321) == 0  # a trainer pid no process can have
    assert idled_at(run) == ["end", "idle"] and clock.now - 1000.0 == 120.0
    assert end_runner.run_end(run, 4194321) == 0  # the same ending: neither again
    assert idled_at(run) == ["end", "idle"]


def test_a_live_client_is_attached_until_it_closes(tmp_path):
    run = ended_run(tmp_path)
    session = RunSession(run)
    assert clients.attached_clients([run]) == [f"{run.run_id} (pid {__import__('os').getpid()})"]
    session.close()
    assert clients.attached_clients([run]) == []
    recorded = RunSession(run, recorded=True)
    assert clients.attached_clients([run]) == []
    recorded.close()
