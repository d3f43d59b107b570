"""`cost.on_end: stop-instance | destroy-instance`: the provider found from its variables, its own CLI
or API called with the key it put there (never printed), said before the run and after it.

The providers' CLIs are fakes on PATH that record their argv and the key they were given; Lambda's
API is a local HTTP server that records the request.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import stat
import sys
import threading
from contextlib import redirect_stdout
from pathlib import Path
from typing import ClassVar

import pytest

from cockpit import cloud
from cockpit.cli.main import main
from cockpit.config.load import load_config
from cockpit.money import end_runner, idle, instance_end
from cockpit.preflight.checks.cloud import check_provider
from cockpit.protocol.wire import encode
from cockpit.results import summary
from cockpit.run import journal, rundir

RUNPOD_KEY = "rpa_FAKEKEY0123456789abcdef"
VAST_KEY = "vastkey-0123456789abcdef0123"
LAMBDA_KEY = "secret_lambda_0123456789abcdef"

FAKE_CLI = """#!{python}
import json, os, sys
with open(os.environ["FAKE_CLI_RECORD"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv, "runpod_key": os.environ.get("RUNPOD_API_KEY"),
                        "vast_key": os.environ.get("VAST_API_KEY")}}) + "\\n")
key = os.environ.get("RUNPOD_API_KEY") or os.environ.get("VAST_API_KEY")
print("pod {{}} stopping; key {{}}".format(sys.argv[-1], key))
sys.exit(int(os.environ.get("FAKE_CLI_EXIT", "0")))
"""


def fake_cli(folder: Path, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(FAKE_CLI.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def recorded(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


@pytest.fixture
def box(tmp_path, monkeypatch):
    """A clean environment: no provider's variables, PATH with a folder for the fakes first."""
    for name in list(os.environ):
        if name.startswith(("RUNPOD_", "VAST_", "LAMBDA_", "CONTAINER_")):
            monkeypatch.delenv(name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("FAKE_CLI_RECORD", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    return bin_dir


def on_runpod(monkeypatch, box: Path) -> None:
    fake_cli(box, "runpodctl")
    monkeypatch.setenv("RUNPOD_POD_ID", "pod123")
    monkeypatch.setenv("RUNPOD_API_KEY", RUNPOD_KEY)


# ---------------------------------------------------------------- detection and plans


def test_each_provider_is_found_by_its_own_variables_and_named_without_its_key():
    found = lambda env: cloud.detect(env, which=lambda name: f"/usr/bin/{name}")  # noqa: E731
    assert found({}) is None
    assert found({"CONTAINER_ID": "42"}) is None  # a container id alone is any docker box
    runpod = found({"RUNPOD_POD_ID": "p1", "RUNPOD_API_KEY": RUNPOD_KEY})
    assert (runpod.key, runpod.instance_id, runpod.credential, runpod.cli) == (
        "runpod",
        "p1",
        "RUNPOD_API_KEY",
        "/usr/bin/runpodctl",
    )
    vast = found({"CONTAINER_ID": "42", "CONTAINER_API_KEY": VAST_KEY})
    assert (vast.key, vast.instance_id, vast.credential) == ("vast", "42", "CONTAINER_API_KEY")
    lam = found({"LAMBDA_API_KEY": LAMBDA_KEY, "LAMBDA_INSTANCE_ID": "i-9"})
    assert (lam.key, lam.instance_id, lam.credential, lam.cli) == ("lambda", "i-9", "LAMBDA_API_KEY", None)
    for provider in (runpod, vast, lam):
        assert RUNPOD_KEY not in provider.describe() and VAST_KEY not in provider.describe()
        assert LAMBDA_KEY not in provider.describe()


def test_the_plans_are_the_documented_commands_and_say_what_still_bills():
    which = lambda name: name  # noqa: E731
    runpod = {"RUNPOD_POD_ID": "p1", "RUNPOD_API_KEY": RUNPOD_KEY}
    stop, remove = cloud.plan("stop-instance", runpod, which), cloud.plan("destroy-instance", runpod, which)
    assert stop.argv == ["runpodctl", "stop", "pod", "p1"] and remove.argv == [
        "runpodctl",
        "remove",
        "pod",
        "p1",
    ]
    assert "volume disk" in stop.still_bills and "runpodctl remove pod p1" in stop.still_bills
    assert "deleted" in remove.does and remove.still_bills.startswith("nothing")
    vast = {"CONTAINER_ID": "42", "CONTAINER_API_KEY": VAST_KEY}
    stop, destroy = cloud.plan("stop-instance", vast, which), cloud.plan("destroy-instance", vast, which)
    assert stop.argv == ["vastai", "stop", "instance", "42"]
    assert destroy.argv == ["vastai", "destroy", "instance", "42"]
    assert stop.env_from == {"VAST_API_KEY": "CONTAINER_API_KEY"} and "disk" in stop.still_bills
    lam = {"LAMBDA_API_KEY": LAMBDA_KEY, "LAMBDA_INSTANCE_ID": "i-9"}
    terminate = cloud.plan("destroy-instance", lam, which)
    assert terminate.ok and terminate.http is not None
    assert terminate.http.url == "https://cloud.lambdalabs.com/api/v1/instance-operations/terminate"
    assert terminate.http.body == {"instance_ids": ["i-9"]}
    no_stop = cloud.plan("stop-instance", lam, which)
    assert not no_stop.ok and "no stopped state" in no_stop.problems[0]
    for plan in (stop, destroy, terminate):
        line = plan.before_line("when the run ends")
        assert "still billed after" in line and VAST_KEY not in line and LAMBDA_KEY not in line


def test_a_missing_cli_key_or_provider_is_a_problem_with_its_fix():
    nothing = lambda name: None  # noqa: E731
    plan = cloud.plan("stop-instance", {"RUNPOD_POD_ID": "p1"}, nothing)
    assert not plan.ok
    assert any("runpodctl is not on PATH" in p for p in plan.problems)
    assert any("no RunPod API key: set RUNPOD_API_KEY" in p for p in plan.problems)
    none = cloud.plan("stop-instance", {}, nothing)
    assert "no provider detected" in none.problems[0] and "shell command" in none.problems[0]
    lam = cloud.plan("destroy-instance", {"LAMBDA_API_KEY": LAMBDA_KEY}, nothing)
    assert lam.problems == ["LAMBDA_INSTANCE_ID is not set: the instance's id is needed"]


# ---------------------------------------------------------------- carrying it out


def test_runpod_stop_calls_runpodctl_with_the_pods_key_and_never_prints_it(box, monkeypatch, tmp_path):
    on_runpod(monkeypatch, box)
    outcome = cloud.carry_out(cloud.plan("stop-instance"))
    assert outcome.ok
    (call,) = recorded(tmp_path / "calls.jsonl")
    assert call["argv"][1:] == ["stop", "pod", "pod123"] and call["runpod_key"] == RUNPOD_KEY
    assert "pod pod123 stopping; key ***" in outcome.answer  # the CLI echoed it: scrubbed
    assert RUNPOD_KEY not in outcome.text + outcome.answer
    assert outcome.text.startswith("stop-instance done: stops RunPod pod pod123")


def test_vast_gets_the_containers_key_through_its_environment_not_its_arguments(box, monkeypatch, tmp_path):
    fake_cli(box, "vastai")
    monkeypatch.setenv("CONTAINER_ID", "4242")
    monkeypatch.setenv("CONTAINER_API_KEY", VAST_KEY)
    outcome = cloud.carry_out(cloud.plan("destroy-instance"))
    (call,) = recorded(tmp_path / "calls.jsonl")
    assert call["argv"][1:] == ["destroy", "instance", "4242"] and call["vast_key"] == VAST_KEY
    assert VAST_KEY not in " ".join(call["argv"]) and VAST_KEY not in outcome.answer
    assert outcome.ok and "its billing ends" in outcome.text


def test_a_refusing_cli_is_a_failure_with_its_last_line(box, monkeypatch):
    on_runpod(monkeypatch, box)
    monkeypatch.setenv("FAKE_CLI_EXIT", "3")
    outcome = cloud.carry_out(cloud.plan("stop-instance"))
    assert not outcome.ok and outcome.text.startswith("stop-instance FAILED (exit 3)")


class _LambdaApi(http.server.BaseHTTPRequestHandler):
    calls: ClassVar[list[dict]] = []
    status = 200

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls.append(
            {"path": self.path, "auth": self.headers["Authorization"], "body": json.loads(body)}
        )
        answer = json.dumps({"data": {"terminated_instances": [{"id": "i-9"}]}}).encode()
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


@pytest.fixture
def lambda_api(monkeypatch):
    _LambdaApi.calls, _LambdaApi.status = [], 200
    server = http.server.HTTPServer(("127.0.0.1", 0), _LambdaApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("LAMBDA_API_URL", f"http://127.0.0.1:{server.server_port}/api/v1")
    yield _LambdaApi
    server.shutdown()


def test_lambda_terminates_through_its_api_with_the_key_as_a_bearer_token(box, monkeypatch, lambda_api):
    monkeypatch.setenv("LAMBDA_API_KEY", LAMBDA_KEY)
    monkeypatch.setenv("LAMBDA_INSTANCE_ID", "i-9")
    outcome = cloud.carry_out(cloud.plan("destroy-instance"))
    (call,) = lambda_api.calls
    assert call == {
        "path": "/api/v1/instance-operations/terminate",
        "auth": f"Bearer {LAMBDA_KEY}",
        "body": {"instance_ids": ["i-9"]},
    }
    assert outcome.ok and "terminates Lambda instance i-9" in outcome.text
    lambda_api.status = 401
    refused = cloud.carry_out(cloud.plan("destroy-instance"))
    assert not refused.ok and "HTTP 401" in refused.text and LAMBDA_KEY not in refused.text


# ---------------------------------------------------------------- the end runner


def stop_run(command: str = "stop-instance") -> rundir.RunDir:
    run = rundir.create(
        None, "synthetic:tiny", f"model: {{name: 'synthetic:tiny'}}\ncost: {{on_end: {command}}}\n"
    )
    events = [
        encode("hello", ts=1.0, pid=1, run_id="r", price_per_hour=2.0),
        encode("done", ts=9.0, status="finished"),
    ]
    run.events_path.write_bytes(b"".join(events))
    run.trainer_path.write_text(json.dumps({"pid": 2**22 + 17, "create_time": None}))
    return run


def test_the_end_runner_stops_the_pod_says_what_still_bills_and_records_it(box, monkeypatch, tmp_path):
    on_runpod(monkeypatch, box)
    run = stop_run()
    log = io.StringIO()
    with redirect_stdout(log):
        assert end_runner.run_end(run, 2**22 + 17) == 0
    (call,) = recorded(tmp_path / "calls.jsonl")
    assert call["argv"][1:] == ["stop", "pod", "pod123"]
    said = log.getvalue()
    assert "stop-instance: stops RunPod pod pod123: its GPU stops billing" in said
    assert "still billed after: the pod's volume disk" in said and RUNPOD_KEY not in said
    started, ended = [e for e in journal.read_all(run.events_path) if e["type"] == "end_command"]
    assert started["state"] == "started" and "still billed after" in started["detail"]  # said before it acts
    assert ended["state"] == "finished" and ended["detail"].startswith("stop-instance done")
    lines = summary.run_summary_lines(run, journal.fold(run.events_path))
    assert lines[-1].startswith("on_end: stop-instance: stop-instance done: stops RunPod pod pod123")
    assert "still billed: the pod's volume disk" in lines[-1]


def test_the_end_runner_on_a_box_without_a_provider_says_so_and_fails(box, tmp_path):
    run = stop_run("destroy-instance")
    log = io.StringIO()
    with redirect_stdout(log):
        assert end_runner.run_end(run, 2**22 + 17) == 1
    ended = journal.last_event(run.events_path, "end_command")
    assert ended["state"] == "failed" and "no provider detected" in ended["detail"]


def test_on_idle_stop_instance_runs_the_providers_stop_through_the_shell(box, monkeypatch, tmp_path):
    on_runpod(monkeypatch, box)
    assert instance_end.shell_for("sudo shutdown -h now") == "sudo shutdown -h now"
    log_path = tmp_path / "backend.log"
    started = idle.start_command("stop-instance", log_path)
    assert not isinstance(started, str)
    started.wait(60)
    (call,) = recorded(tmp_path / "calls.jsonl")
    assert call["argv"][1:] == ["stop", "pod", "pod123"]
    text = log_path.read_text()
    assert (
        "on_idle: running: stop-instance" in text and "stop-instance done" in text and RUNPOD_KEY not in text
    )


# ---------------------------------------------------------------- before the run: --check, preflight


def check_config(tmp_path: Path, on_end: str, on_idle: str | None = None) -> str:
    path = tmp_path / "run.yaml"
    cost = {"on_end": on_end} | ({"on_idle": on_idle} if on_idle else {})
    training = {"optimizer": "adamw_torch", "max_steps": 2}
    path.write_text(
        json.dumps(
            {"model": {"name": "synthetic:tiny"}, "method": "lora", "training": training, "cost": cost}
        )
    )
    return str(path)


def test_check_refuses_stop_instance_where_no_provider_is_detected(box, tmp_path, capsys):
    assert main(["train", check_config(tmp_path, "stop-instance"), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "cannot start: what it asks for at its end cannot happen on this box" in err
    assert "cost.on_end: stop-instance cannot run here: no provider detected" in err
    assert not (tmp_path / "home" / "runs").exists()


def test_check_refuses_where_the_cli_or_the_key_is_missing(box, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RUNPOD_POD_ID", "pod123")
    assert main(["train", check_config(tmp_path, "stop-instance"), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "runpodctl is not on PATH" in err and "no RunPod API key: set RUNPOD_API_KEY" in err


def test_check_says_the_provider_what_happens_at_the_end_and_what_still_bills(
    box, monkeypatch, tmp_path, capsys
):
    on_runpod(monkeypatch, box)
    config = check_config(tmp_path, "stop-instance", on_idle="destroy-instance")
    assert main(["train", config, "--check"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert f"provider: RunPod pod pod123, runpodctl at {box / 'runpodctl'}, key from RUNPOD_API_KEY" in out
    assert "when the run ends (cost.on_end): stop-instance: stops RunPod pod pod123" in out
    assert "still billed after: the pod's volume disk" in out
    assert "(cost.on_idle): destroy-instance: removes RunPod pod pod123" in out
    assert RUNPOD_KEY not in out
    assert load_config(config).cost.on_end == "stop-instance"


def test_preflight_names_the_provider_or_says_none_was_found(box, monkeypatch):
    assert check_provider().status == "skip"
    monkeypatch.setenv("RUNPOD_POD_ID", "pod123")
    missing = check_provider()
    assert missing.status == "warn" and "runpodctl is not on PATH" in missing.fix
    on_runpod(monkeypatch, box)
    found = check_provider()
    assert found.status == "pass" and "stop-instance, destroy-instance available" in found.value
    monkeypatch.delenv("RUNPOD_POD_ID")
    monkeypatch.setenv("LAMBDA_API_KEY", LAMBDA_KEY)
    monkeypatch.setenv("LAMBDA_INSTANCE_ID", "i-9")
    lam = check_provider()
    assert lam.status == "pass" and "destroy-instance available" in lam.value and LAMBDA_KEY not in lam.value
