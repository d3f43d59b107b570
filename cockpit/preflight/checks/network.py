"""Network preflight checks: can this box reach the model hub, how fast, and is a mirror wiser.

Everything is bounded: DNS runs in a helper thread with a deadline (getaddrinfo has no
timeout of its own), connects and reads carry socket timeouts, and the download stops
after a byte or time budget, so an offline box gets a verdict in seconds, not minutes.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from cockpit.fmt import duration, gib
from cockpit.models.shape import hub_endpoint
from cockpit.preflight.checks.base import CheckResult

DEFAULT_ENDPOINT = "https://huggingface.co"
MIRROR_HINT = "export HF_ENDPOINT=https://hf-mirror.com"
# a public file large enough to measure throughput (~550 MB; only the budget is read)
DEFAULT_PROBE_PATH = "openai-community/gpt2/resolve/main/model.safetensors"
GOOD_MB_PER_S = 10.0
BAD_MB_PER_S = 1.0
SLOW_CONNECT_MS = 300.0
HUB_TIMEOUT_S = 5.0  # `cockpit preflight`'s wait for the hub; a run's start gives it what its budget leaves


@dataclass(frozen=True)
class Reach:
    endpoint: str
    host: str
    port: int
    addresses: list[str]
    connect_ms: float | None
    http_status: int | None
    http_ms: float | None
    error: str  # empty when reachable


def _resolve(host: str, port: int, timeout_s: float) -> list[tuple[Any, ...]]:
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"DNS lookup of {host} took longer than {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    found: list[tuple[Any, ...]] = box["value"]  # socket.getaddrinfo's
    return found


def probe_endpoint(
    endpoint: str, connect_timeout_s: float = 3.0, total_timeout_s: float = HUB_TIMEOUT_S
) -> Reach:
    """DNS, TCP connect time, then an HTTP HEAD of the endpoint's root (any status means reachable)."""
    parts = urllib.parse.urlsplit(endpoint)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    deadline = time.monotonic() + total_timeout_s
    addresses: list[str] = []
    connect_ms = http_ms = None
    status = None
    try:
        infos = _resolve(host, port, connect_timeout_s)
        addresses = sorted({info[4][0] for info in infos})
        started = time.monotonic()
        with socket.create_connection((host, port), timeout=connect_timeout_s):
            connect_ms = (time.monotonic() - started) * 1000
        started = time.monotonic()
        request = urllib.request.Request(
            endpoint + "/", method="HEAD", headers={"User-Agent": "lora-cockpit"}
        )
        remaining = max(0.5, deadline - time.monotonic())
        try:
            with urllib.request.urlopen(request, timeout=min(remaining, total_timeout_s)) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        http_ms = (time.monotonic() - started) * 1000
        error = ""
    except (OSError, urllib.error.URLError) as exc:
        reason = getattr(exc, "reason", exc)
        error = f"{type(reason).__name__}: {reason}"
    return Reach(endpoint, host, port, addresses, connect_ms, status, http_ms, error)


def _mirror_fix(endpoint: str, what: str) -> str:
    if endpoint.rstrip("/") == DEFAULT_ENDPOINT:
        return f"{what}: try a mirror ({MIRROR_HINT}) or download the model elsewhere and copy it in."
    return f"{what} through {endpoint}: try another mirror or the default hub, or copy the model in."


def _seconds(value: float) -> str:
    """A wait for people: 2 (not 1.99433), 0.5, 12."""
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


def check_hub_reach(
    endpoint: str | None = None,
    connect_timeout_s: float = 3.0,
    total_timeout_s: float = HUB_TIMEOUT_S,
    probe: Callable[..., Reach] = probe_endpoint,
) -> CheckResult:
    started = time.monotonic()
    endpoint = (endpoint or hub_endpoint()).rstrip("/")
    reach = probe(endpoint, connect_timeout_s=connect_timeout_s, total_timeout_s=total_timeout_s)
    common = {"id": "network.hub", "group": "network", "title": "Model hub reachable"}
    wait = f"answers within {_seconds(total_timeout_s)} s"
    if total_timeout_s < HUB_TIMEOUT_S:  # the quick preflight at a run's start, which must not hold it up
        wait += f" (all a run's start waits for; `cockpit preflight` waits {_seconds(HUB_TIMEOUT_S)} s)"
    threshold = f"{wait}, connect < {SLOW_CONNECT_MS:.0f} ms"
    evidence = asdict(reach)
    if reach.error:
        return CheckResult(
            **common,
            status="fail",
            value=f"offline: {endpoint} not reachable ({reach.error})",
            threshold=threshold,
            fix=_mirror_fix(endpoint, "The hub cannot be reached")
            + " With a local copy, set HF_HUB_OFFLINE=1.",
            evidence=evidence,
            duration_s=time.monotonic() - started,
        )
    slow = (reach.connect_ms or 0) > SLOW_CONNECT_MS
    server_error = reach.http_status is not None and reach.http_status >= 500
    status = "warn" if slow or server_error else "pass"
    fix = ""
    if server_error:
        fix = _mirror_fix(endpoint, f"The hub answers HTTP {reach.http_status}")
    elif slow:
        fix = _mirror_fix(endpoint, f"Connecting takes {reach.connect_ms:.0f} ms")
    return CheckResult(
        **common,
        status=status,
        value=(
            f"{endpoint}: connect {reach.connect_ms:.0f} ms, "
            f"HTTP {reach.http_status} in {reach.http_ms:.0f} ms"
        ),
        threshold=threshold,
        fix=fix,
        evidence=evidence,
        duration_s=time.monotonic() - started,
    )


@dataclass(frozen=True)
class Download:
    url: str
    bytes_read: int
    seconds: float  # from the first byte of the body
    mb_per_s: float | None
    complete: bool  # the whole file arrived before the budget ran out
    http_status: int | None
    error: str


def measure_download(
    url: str,
    max_bytes: int = 64 << 20,
    time_budget_s: float = 10.0,
    connect_timeout_s: float = 3.0,
    chunk_bytes: int = 256 << 10,
) -> Download:
    """Read up to max_bytes of url for at most ~time_budget_s (+ one socket timeout)."""
    request = urllib.request.Request(url, headers={"User-Agent": "lora-cockpit"})
    read, status, error, complete = 0, None, "", False
    body_started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=connect_timeout_s) as response:
            status = response.status
            body_started = time.monotonic()
            deadline = body_started + time_budget_s
            while read < max_bytes and time.monotonic() < deadline:
                data = response.read1(min(chunk_bytes, max_bytes - read))
                if not data:
                    complete = True
                    break
                read += len(data)
    except urllib.error.HTTPError as exc:
        status, error = exc.code, f"HTTP {exc.code}"
    except (OSError, urllib.error.URLError) as exc:
        reason = getattr(exc, "reason", exc)
        error = f"{type(reason).__name__}: {reason}"
    seconds = time.monotonic() - body_started
    mb_per_s = read / seconds / 1e6 if read and seconds > 0 else None
    return Download(url, read, seconds, mb_per_s, complete, status, error)


def check_download(
    endpoint: str | None = None,
    probe_path: str = DEFAULT_PROBE_PATH,
    model_bytes: int | None = None,
    max_bytes: int = 64 << 20,
    time_budget_s: float = 10.0,
    connect_timeout_s: float = 3.0,
    download: Callable[..., Download] = measure_download,
) -> CheckResult:
    started = time.monotonic()
    endpoint = (endpoint or hub_endpoint()).rstrip("/")
    url = probe_path if "://" in probe_path else f"{endpoint}/{probe_path.lstrip('/')}"
    result = download(
        url, max_bytes=max_bytes, time_budget_s=time_budget_s, connect_timeout_s=connect_timeout_s
    )
    common = {"id": "network.download", "group": "network", "title": "Download speed from the hub"}
    threshold = f">= {GOOD_MB_PER_S:g} MB/s (fail < {BAD_MB_PER_S:g} MB/s)"
    evidence = asdict(result) | {"endpoint": endpoint, "model_bytes": model_bytes}
    if result.mb_per_s is None:
        return CheckResult(
            **common,
            status="fail",
            value=f"nothing downloaded from {url} ({result.error or 'empty body'})",
            threshold=threshold,
            fix=_mirror_fix(endpoint, "Downloads from the hub fail"),
            evidence=evidence,
            duration_s=time.monotonic() - started,
        )
    speed = result.mb_per_s
    model_s = model_bytes / (speed * 1e6) if model_bytes else None
    evidence["model_download_s"] = model_s
    small = result.complete and result.bytes_read < 8 << 20
    note = f" (only {result.bytes_read / 2**20:.1f} MiB available: a lower bound)" if small else ""
    model_text = f"; the model ({gib(model_bytes, 1)}) takes ~{duration(model_s)}" if model_s else ""
    status = "pass" if speed >= GOOD_MB_PER_S else ("warn" if speed >= BAD_MB_PER_S else "fail")
    return CheckResult(
        **common,
        status=status,
        value=f"{speed:.1f} MB/s over {result.bytes_read / 2**20:.1f} MiB{note}{model_text}",
        threshold=threshold,
        fix="" if status == "pass" else _mirror_fix(endpoint, f"Downloads run at {speed:.1f} MB/s"),
        evidence=evidence,
        duration_s=time.monotonic() - started,
    )
