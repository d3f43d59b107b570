"""Network checks against a real HTTP server on loopback: fast, throttled, and a closed port."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from cockpit.preflight.checks import network as n

BIG_BYTES = 4 << 20


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        if self.path.endswith("/small.json"):
            body = b"{}" * 1000
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        slow = "slow" in self.path
        self.send_response(200)
        self.send_header("Content-Length", str(BIG_BYTES))
        self.end_headers()
        chunk = b"x" * (16 << 10)
        try:
            for _ in range(BIG_BYTES // len(chunk)):
                self.wfile.write(chunk)
                if slow:
                    time.sleep(0.05)  # ~0.3 MB/s
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture(scope="module")
def endpoint():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def closed_port_endpoint():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def test_reachable_endpoint_passes(endpoint):
    result = n.check_hub_reach(endpoint)
    assert result.status == "pass"
    assert result.evidence["http_status"] == 200
    assert result.evidence["connect_ms"] < 1000


def test_fast_download_passes_and_times_the_model(endpoint):
    result = n.check_download(endpoint, "org/model/resolve/main/big.bin", model_bytes=13 * 2**30)
    assert result.status == "pass", result.value
    assert result.evidence["bytes_read"] == BIG_BYTES
    assert result.evidence["complete"] is True
    assert "lower bound" in result.value  # 4 MiB is all there was to measure
    assert result.evidence["model_download_s"] > 0


def test_byte_budget_stops_early(endpoint):
    result = n.measure_download(f"{endpoint}/big.bin", max_bytes=1 << 20)
    assert result.bytes_read == 1 << 20 and not result.complete


def test_slow_default_endpoint_gets_the_mirror_hint(endpoint):
    slow = n.measure_download(f"{endpoint}/slow.bin", time_budget_s=0.6)
    assert slow.mb_per_s is not None and slow.mb_per_s < 1
    assert slow.seconds < 2

    result = n.check_download(n.DEFAULT_ENDPOINT, model_bytes=13 * 2**30, download=lambda url, **kw: slow)
    assert result.status == "fail"
    assert "HF_ENDPOINT=https://hf-mirror.com" in result.fix


def test_slow_mirror_does_not_suggest_itself(endpoint):
    result = n.check_download(endpoint, "slow.bin", time_budget_s=0.6)
    assert result.status in ("warn", "fail")
    assert "hf-mirror" not in result.fix and endpoint in result.fix


def test_http_error_is_a_fail_not_a_crash(endpoint):
    result = n.check_download(
        endpoint, download=lambda url, **kw: n.Download(url, 0, 0.0, None, False, 404, "HTTP 404")
    )
    assert result.status == "fail" and "HTTP 404" in result.value


def test_closed_port_is_offline_fast(closed_port_endpoint):
    started = time.monotonic()
    hub = n.check_hub_reach(closed_port_endpoint)
    download = n.check_download(closed_port_endpoint, "big.bin")
    assert time.monotonic() - started < 2
    assert hub.status == "fail" and hub.value.startswith("offline")
    assert "ConnectionRefused" in hub.evidence["error"]
    assert download.status == "fail"


def test_dns_failure_is_fast():
    started = time.monotonic()
    result = n.check_hub_reach("http://no-such-host.invalid", connect_timeout_s=1.0, total_timeout_s=2.0)
    assert result.status == "fail"
    assert time.monotonic() - started < 2.5


def test_default_endpoint_comes_from_hf_endpoint(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example/")
    seen = {}

    def probe(endpoint, **kw):
        seen["endpoint"] = endpoint
        return n.Reach(endpoint, "mirror.example", 443, [], None, None, None, "gaierror: unknown host")

    result = n.check_hub_reach(probe=probe)
    assert seen["endpoint"] == "https://mirror.example"
    assert result.status == "fail" and "another mirror" in result.fix


def test_the_hub_s_threshold_is_rounded_and_a_shorter_wait_says_why():
    """The start's quick preflight gives the hub what its budget leaves (1.99433 s): said rounded,
    beside why it is not `cockpit preflight`'s 5 s."""

    def probe(endpoint, **kw):
        return n.Reach(endpoint, "huggingface.co", 443, [], None, None, None, "gaierror: unknown host")

    start = n.check_hub_reach(total_timeout_s=1.99433, connect_timeout_s=1.99433, probe=probe)
    assert start.threshold == (
        "answers within 2 s (all a run's start waits for; `cockpit preflight` waits 5 s), connect < 300 ms"
    )
    assert n.check_hub_reach(probe=probe).threshold == "answers within 5 s, connect < 300 ms"
    assert n.check_hub_reach(total_timeout_s=0.25, probe=probe).threshold.startswith(
        "answers within 0.25 s ("
    )
