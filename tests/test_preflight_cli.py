"""`cockpit preflight` here (no GPU, no network): it finishes, says why, and never hangs."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import pytest
from conftest import cockpit

from cockpit.models import shape as modelshape


def test_quick_preflight_without_gpu_or_network(env):
    started = time.monotonic()
    proc = cockpit(["preflight", "--quick", "--json"], env, timeout=120)
    assert time.monotonic() - started < 60
    report = json.loads(proc.stdout)
    assert proc.returncode == report["exit_code"] == 2
    by_id = {r["id"]: r for r in report["results"]}
    visible = by_id["gpu.visible"]
    assert visible["status"] == "fail" and "NVML" in visible["value"] and "driver" in visible["fix"]
    assert by_id["network.hub"]["status"] in ("fail", "warn") and "offline" in by_id["network.hub"]["value"]
    assert by_id["software.versions"]["status"] == "pass"
    assert report["meta"]["packages"]["torch"]
    for result in report["results"]:
        assert result["status"] in ("pass", "warn", "fail", "skip")
        if result["status"] in ("warn", "fail"):
            assert result["fix"], result["id"]


def test_plain_lines_as_checks_finish(env):
    proc = cockpit(["preflight", "--quick", "--no-ui"], env, timeout=120)
    lines = proc.stdout.splitlines()
    assert any(line.startswith("[FAIL] GPU visible to NVML") for line in lines)
    assert lines[-1].startswith("preflight: ") and " fail" in lines[-1]
    assert proc.returncode == 2


def _closed_port_endpoint() -> str:
    """A loopback port nothing listens on: connections are refused at once, as offline."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


class _Hub(http.server.BaseHTTPRequestHandler):
    """A hub that answers every request with the status in its path's first part (/404/...)."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(int(self.path.split("/")[1]))
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_model_whose_hub_is_unreachable_still_gets_the_whole_report(env, tmp_path):
    endpoint = _closed_port_endpoint()
    env = {k: v for k, v in env.items() if k != "HF_HUB_OFFLINE"} | {
        "HF_ENDPOINT": endpoint,
        "COCKPIT_CACHE": str(tmp_path / "cache"),  # no config.json fetched before
    }
    model = "meta-llama/Llama-2-7b-hf"
    proc = cockpit(["preflight", "--quick", "--json", "--model", model], env, timeout=120)
    report = json.loads(proc.stdout)
    by_id = {r["id"]: r for r in report["results"]}
    # every check of the quick plan ran, not only those that need no model
    planned = {"gpu.visible", "software.versions", "host.cpu", "host.ram_vram", "host.ram_model", "host.swap"}
    planned |= {"disk.type.cache", "disk.free.cache", "disk.type.runs", "disk.free.runs", "network.hub"}
    assert planned <= set(by_id)
    # the model's own checks say why they could not judge it, and how to have them judge it
    ram = by_id["host.ram_model"]
    assert ram["status"] == "skip"
    assert ram["value"].startswith(f"{model}'s size unknown: could not fetch config.json from {endpoint}")
    assert all(way in ram["fix"] for way in ("HF_ENDPOINT", "local folder", "synthetic:<arch>"))
    assert ram["evidence"]["model"] == model
    free = by_id["disk.free.cache"]
    assert f"room for {model} not judged" in free["threshold"]
    assert free["evidence"]["model_unknown"].startswith("could not fetch config.json")
    assert by_id["network.hub"]["status"] == "fail" and endpoint in by_id["network.hub"]["value"]
    # the exit code is the report's: the hub's failure, not a usage error before any check
    worst = max({"pass": 0, "skip": 0, "warn": 1, "fail": 2}[r["status"]] for r in report["results"])
    assert proc.returncode == report["exit_code"] == worst == 2
    assert f"--model: {model}: could not fetch config.json from {endpoint}" in proc.stderr
    assert "not judged" in proc.stderr


def test_the_model_s_room_is_judged_where_its_weights_go(env, tmp_path):
    """`--model synthetic:...` is built in cockpit's cache, a local folder takes no room: the full
    preflight judged both against the hub's cache (the start's quick preflight did not)."""
    env = env | {"COCKPIT_CACHE": str(tmp_path / "cockpit-cache"), "HF_HUB_CACHE": str(tmp_path / "hub")}
    proc = cockpit(["preflight", "--quick", "--json", "--model", "synthetic:llama-2-7b"], env, timeout=120)
    free = {r["id"]: r for r in json.loads(proc.stdout)["results"]}["disk.free.cache"]
    assert free["evidence"]["path"] == str(tmp_path / "cockpit-cache")
    assert free["evidence"]["model_bytes"] > 10 * 2**30  # 6.7B parameters in 16 bits
    local = tmp_path / "my-model"
    local.mkdir()
    (local / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "vocab_size": 32000,
                "hidden_size": 256,
                "intermediate_size": 688,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
            }
        )
    )
    proc = cockpit(["preflight", "--quick", "--json", "--model", str(local)], env, timeout=120)
    by_id = {r["id"]: r for r in json.loads(proc.stdout)["results"]}
    assert by_id["disk.free.cache"]["evidence"]["path"] == str(tmp_path / "hub")
    assert by_id["disk.free.cache"]["evidence"]["model_bytes"] is None  # it stays in its folder
    assert by_id["host.ram_model"]["evidence"]["model_bytes"] > 0  # RAM still loads it


def test_model_under_hf_hub_offline_plain_lines(env):
    endpoint = _closed_port_endpoint()  # the hub check fails here as offline, whatever the network
    env = env | {"HF_ENDPOINT": endpoint}  # HF_HUB_OFFLINE=1 stays: the fetch is refused before it starts
    proc = cockpit(["preflight", "--quick", "--no-ui", "--model", "org/model"], env, timeout=120)
    lines = proc.stdout.splitlines()
    skip = lines.index(
        "[skip] RAM to load the planned model: org/model's size unknown: could not fetch config.json "
        f"from {endpoint} (HF_HUB_OFFLINE is set)"
    )
    assert lines[skip + 1].startswith("       fix: Set HF_ENDPOINT to a mirror")
    assert any(line.startswith("[FAIL] Model hub reachable: offline") for line in lines)
    assert lines[-1].startswith("preflight: ") and " 0 fail" not in lines[-1]
    assert proc.returncode == 2 and "--model: org/model: could not fetch config.json" in proc.stderr


@pytest.mark.parametrize(
    "model, said",
    [
        ("org/name/extra", "is neither an existing path, a hub id (org/name) nor a shipped shape"),
        ("./no-such-folder", "is neither an existing path"),
        ("synthetic:gpt-5", "unknown synthetic architecture 'gpt-5'"),
        ("org/gone", "answered 404 for config.json"),
        ("org/gated", "answered 401 for config.json (gated or private: set HF_TOKEN)"),
    ],
)
def test_a_wrong_model_is_still_a_usage_error_before_any_check(env, hub, tmp_path, model, said):
    status = {"org/gone": "404", "org/gated": "401"}.get(model, "200")
    env = {k: v for k, v in env.items() if k != "HF_HUB_OFFLINE"} | {
        "HF_ENDPOINT": f"{hub}/{status}",
        "COCKPIT_CACHE": str(tmp_path / "cache"),
    }
    proc = cockpit(["preflight", "--quick", "--json", "--model", model], env, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("--model: ") and said in proc.stderr


def test_only_a_hub_that_does_not_answer_leaves_the_model_unsized(hub, monkeypatch, tmp_path):
    monkeypatch.setenv("COCKPIT_CACHE", str(tmp_path))
    for status in ("500", "503"):
        monkeypatch.setenv("HF_ENDPOINT", f"{hub}/{status}")
        with pytest.raises(modelshape.HubUnavailable, match=f"answered {status} for config.json"):
            modelshape.load_shape("org/model", timeout_s=5)
    for status in ("401", "404"):
        monkeypatch.setenv("HF_ENDPOINT", f"{hub}/{status}")
        with pytest.raises(modelshape.ShapeError) as raised:
            modelshape.load_shape("org/model", timeout_s=5)
        assert not isinstance(raised.value, modelshape.HubUnavailable)
    monkeypatch.setenv("HF_ENDPOINT", _closed_port_endpoint())
    with pytest.raises(modelshape.HubUnavailable) as raised:
        modelshape.load_shape("org/model", timeout_s=5)
    assert raised.value.repo == "org/model" and raised.value.cause.startswith("could not fetch config.json")
