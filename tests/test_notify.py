"""`notify.urls`: Apprise notifications on end, failure, OOM, budget, idle and a new best eval, sent
for real through Apprise's `json://` to a local HTTP server; their secrets in no record.
"""

from __future__ import annotations

import http.server
import io
import json
import threading
import time
from contextlib import redirect_stdout
from typing import ClassVar

import pytest

from cockpit.cli.main import main
from cockpit.config import secrets
from cockpit.config.load import load_config
from cockpit.money import end_runner, idle, notify
from cockpit.money.notices import RunNotices
from cockpit.protocol.wire import encode
from cockpit.run import journal, rundir
from cockpit.run.state import RunState

pytest.importorskip("apprise")

TOKEN = "hook-s3cr3t-0123456789abcdef"  # the secret part of every URL here


class _Hook(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append({"path": self.path, **json.loads(body)})
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook():
    """A local webhook: json://127.0.0.1:PORT/TOKEN, what it received."""
    _Hook.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"json://127.0.0.1:{server.server_port}/{TOKEN}", _Hook.received
    server.shutdown()


def closed_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"json://127.0.0.1:{port}/{TOKEN}-down"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


# ---------------------------------------------------------------- secrets in URLs


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/987654321", "tgram://***/***"),
        ("discord://4174216298/JHMHI8qBe7bk2ZwO5U711o3dV_js", "discord://***/***"),
        ("ntfy://ntfy.sh/my-secret-topic-xyz", "ntfy://ntfy.sh/***"),
        ("mailto://me:app-password-99@gmail.com", "mailto://me:***@gmail.com"),  # too short to hide: "me"
        ("json://localhost:8123/hook?token=abcdefghij", "json://localhost:8123/***?token=***"),
    ],
)
def test_a_urls_secret_parts_are_masked_and_the_service_still_shows(url, shown):
    assert secrets.masked_url(url) == shown


def test_urls_are_checked_by_apprise_and_shown_masked(monkeypatch):
    assert notify.check_urls(["json://127.0.0.1:9/x", "tgram://123456789:ABCDEFGH/123"]) == []
    (bad,) = notify.check_urls(["json://127.0.0.1:9/x", f"notaservice://{TOKEN}"])
    assert bad.startswith("notify.urls[2]: Apprise cannot read notaservice://***") and TOKEN not in bad
    monkeypatch.setattr(notify, "apprise_missing", lambda: "apprise is not installed in this environment")
    assert "pip install" not in notify.check_urls([])  # nothing asked, nothing needed
    (missing,) = notify.check_urls(["json://127.0.0.1:9/x"])
    assert "apprise is not installed" in missing and "remove notify" in missing


def test_the_short_form_is_a_list_of_urls(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("notify: ['json://127.0.0.1:9/x']\n")
    cfg = load_config(path)
    assert cfg.notify.urls == ["json://127.0.0.1:9/x"] and cfg.notify.best_eval is False


# ---------------------------------------------------------------- sending


def test_a_notification_reaches_the_hook_with_the_run_and_what_happened(hook, tmp_path):
    url, received = hook
    said = []
    assert notify.Notifier("run-1", [url], said.append).send("end", "finished at step 8", "train loss 1.2")
    (got,) = received
    assert got["path"] == f"/{TOKEN}" and got["title"] == "lora-cockpit: run-1: finished at step 8"
    assert got["message"] == "train loss 1.2"
    assert said == ["notify: end: told 1 of 1 (finished at step 8)"]


def test_a_failing_url_is_said_once_never_raises_and_the_others_still_get_it(hook, tmp_path):
    url, received = hook
    events = tmp_path / "events.jsonl"
    events.write_text("")
    said = []
    down = closed_port_url()
    notifier = notify.Notifier("run-1", [down, url], said.append, events)
    for n in range(3):
        assert notifier.send("budget", f"budget reached {n}", "body")
    assert len(received) == 3 and notifier.failed == {down: 3}
    failures = [line for line in said if "failed" in line]
    assert (
        len(failures) == 1 and "json://127.0.0.1:" in failures[0] and "the run is not affected" in failures[0]
    )
    assert TOKEN not in "".join(said)
    (warning,) = [e for e in journal.read_all(events) if e["type"] == "warning"]
    assert "later failures of this URL are not said" in warning["message"] and TOKEN not in warning["message"]

    def broken(url, title, body):
        raise RuntimeError("plugin bug")

    assert notify.Notifier("r", [url], said.append, sender=broken).send("end", "t", "b") is False


# ---------------------------------------------------------------- what is told


def test_budget_oom_and_a_new_best_eval_are_told_as_they_come():
    notices = RunNotices(best_eval=True)
    assert notices.feed({"type": "eval", "step": 0, "eval_loss": 3.0}) == []  # the base: only a mark
    (best,) = notices.feed({"type": "eval", "step": 20, "eval_loss": 2.5})
    assert best.kind == "best_eval" and best.title == "new best eval loss 2.5000 at step 20"
    assert notices.feed({"type": "eval", "step": 40, "eval_loss": 2.6}) == []
    (budget,) = notices.feed({"type": "budget", "message": "budget reached at step 41: $2.00 spent"})
    assert budget.kind == "budget" and "$2.00" in budget.body
    (oom,) = notices.feed({"type": "error", "kind": "oom", "step": 42, "message": "CUDA out of memory"})
    assert oom.kind == "oom" and oom.title == "out of GPU memory at step 42"
    state = RunState()
    state.status, state.step, state.error = "failed", 42, {"kind": "oom", "message": "CUDA out of memory"}
    assert notices.ending(state, []) is None  # the OOM was told already
    assert RunNotices().feed({"type": "eval", "step": 20, "eval_loss": 1.0}) == []  # best_eval not asked


def make_run(events: list[bytes], config: str) -> rundir.RunDir:
    run = rundir.create(None, "synthetic:tiny", config)
    run.events_path.write_bytes(b"".join(events))
    run.trainer_path.write_text(json.dumps({"pid": 2**22 + 19, "create_time": None}))
    return run


def test_the_end_runner_tells_the_ending_before_on_end_with_what_still_bills(home, hook):
    url, received = hook
    events = [
        encode("hello", ts=1.0, pid=1, run_id="r", price_per_hour=2.0),
        encode("log", ts=2.0, step=8, total_steps=8, loss=1.25),
        encode("done", ts=9.0, status="finished", step=8, total_steps=8, output="/runs/r/final"),
    ]
    run = make_run(events, "model: {name: 'synthetic:tiny'}\ncost: {on_end: 'echo done > ended.txt'}\n")
    notify.keep_urls(run.path, [url])
    assert (run.path / notify.URLS_FILE).stat().st_mode & 0o777 == 0o600
    log = io.StringIO()
    with redirect_stdout(log):
        assert end_runner.run_end(run, 2**22 + 19) == 0
    (got,) = received
    assert got["title"] == f"lora-cockpit: {run.run_id}: finished at step 8 of 8"
    assert "train loss 1.2500" in got["message"] and "adapter: /runs/r/final" in got["message"]
    assert "then: echo done > ended.txt" in got["message"]
    assert TOKEN not in log.getvalue()


def test_the_watch_tells_new_events_and_not_those_of_earlier_attempts(home, hook):
    url, received = hook
    run = make_run([encode("budget", ts=1.0, step=3, message="an earlier attempt's budget")], "{}\n")
    watch = notify.RunWatch(run.path, notify.Notifier(run.run_id, [url], lambda _: None), best_eval=True)
    watch.poll()
    assert received == []
    journal.append(run.events_path, "eval", step=0, eval_loss=3.0)
    journal.append(run.events_path, "eval", step=4, eval_loss=2.0)
    journal.append(run.events_path, "budget", step=5, message="budget reached at step 5")
    watch.poll()
    assert [r["title"].split(": ", 2)[2] for r in received] == [
        "new best eval loss 2.0000 at step 4",
        "budget reached",
    ]


def test_the_idle_alarm_tells_the_runs_urls(hook, tmp_path):
    from cockpit.doctor.window import Finding

    url, received = hook
    notify.keep_urls(tmp_path, [url])
    alarm = idle.IdleAlarm(idle.IdleSettings(5.0, None), tmp_path / "backend.log")
    finding = Finding("idle_billed", "alarm", "Idle GPU, still billed", "0% for 5 min", "cost.on_idle")
    assert "IDLE ALARM" in alarm.update([finding])
    alarm.notifier.send_in_background("noop", "x", "y").join(30)
    # each send is a thread of its own: the two arrive in either order, so wait for both
    deadline = time.monotonic() + 30
    while len(received) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    (told,) = [r for r in received if r["title"].endswith("GPU idle, still billed")]
    assert "0% for 5 min" in told["message"]


# ---------------------------------------------------------------- before the run


def config_with(tmp_path, urls) -> str:
    path = tmp_path / "run.yaml"
    training = {"optimizer": "adamw_torch", "max_steps": 2}
    path.write_text(
        json.dumps(
            {"model": {"name": "synthetic:tiny"}, "method": "lora", "training": training, "notify": urls}
        )
    )
    return str(path)


def test_check_shows_the_urls_masked_and_refuses_one_apprise_cannot_read(home, tmp_path, capsys):
    good = f"json://127.0.0.1:9/{TOKEN}"
    assert main(["train", config_with(tmp_path, [good]), "--check"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "notify: json://127.0.0.1:9/*** on end, failure, out of memory, budget reached, idle alarm" in out
    assert TOKEN not in out
    assert main(["train", config_with(tmp_path, [good, f"tgram://{TOKEN}"]), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "notify.urls[2]: Apprise cannot read tgram://***" in err and TOKEN not in err
