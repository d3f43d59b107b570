#!/usr/bin/env python3
"""`cockpit serve` in a real browser: a real run's view in headless Chromium, paused through the page.

What a user does, end to end, on the CPU with the shipped tiny model:
1. `cockpit train` a run that keeps training (max_steps 400, each step slowed by the test aid
   `step_sleep_s`, so that it is still running when the browser comes), --no-ui, in the background;
2. once it has logged a step, `cockpit serve RUN` twice on 127.0.0.1, read-only and with --control,
   each printing a URL with its token; a request without the token (or a wrong one) must get 403;
3. headless Chromium (its DevTools protocol over a websocket, with aiohttp, which textual-serve
   brings: no browser driver to install) opens the read-only URL, waits for the run view's first
   bytes and for its `cockpit attach` to register in the run's clients/, presses `p`: nothing may
   reach the trainer (screenshot -read-only.png, the refusal in a toast);
4. opens the --control URL and presses `p`: the run must answer with
   `command` pause accepted and `paused` in its events.jsonl; the last screenshot shows it paused.
Then the run is stopped, the server and the browser closed.

  python bench/serve_browser.py [--out bench/results] [--stamp 2026-12-07]

Writes STAMP-serve-browser-cpu.json (timings, what the run answered) and STAMP-serve-browser-cpu.png
(the view paused through the page) and -read-only.png. tests/test_serve_browser.py runs it (marker bench;
skipped without chromium).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common import ROOT, cockpit_env, read_events

sys.path.insert(0, str(ROOT))
from train_backend import test_aids

CONFIG = {
    "model": {"name": "synthetic:tiny"},
    "dataset": {"path": "demo"},
    "method": "lora",
    "lora": {"r": 8, "alpha": 16, "target_modules": "all-linear"},
    "training": {
        "max_length": 64,
        "micro_batch_size": 4,
        "max_steps": 400,
        "logging_steps": 1,
        "optimizer": "adamw_torch",
        "gradient_checkpointing": False,
    },
    "output": {"save_steps": 1000},
    "cost": {"price_per_hour": 2.0},
}
WINDOW = (1280, 820)  # CSS pixels: about 130x40 cells of the page's terminal


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(what: str, predicate: Any, timeout_s: float, interval_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")


def first_event(run: Path, kind: str, **fields: Any) -> dict | None:
    if not (run / "events.jsonl").exists():
        return None
    for event in read_events(run):
        if event.get("type") == kind and all(event.get(k) == v for k, v in fields.items()):
            return event
    return None


class DevTools:
    """The few DevTools protocol calls this needs, over one page's websocket."""

    def __init__(self, ws: Any):
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, **params: Any) -> dict:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json(timeout=60)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    async def evaluate(self, expression: str) -> Any:
        return (await self.call("Runtime.evaluate", expression=expression, returnByValue=True))["result"].get(
            "value"
        )

    async def wait_until(self, what: str, expression: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not await self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> int:
        data = base64.b64decode((await self.call("Page.captureScreenshot", format="png"))["data"])
        path.write_bytes(data)
        return len(data)

    async def press(self, key: str) -> None:
        code = f"Key{key.upper()}"
        vk = ord(key.upper())
        await self.call(
            "Input.dispatchKeyEvent", type="keyDown", key=key, code=code, text=key, windowsVirtualKeyCode=vk
        )
        await self.call("Input.dispatchKeyEvent", type="keyUp", key=key, code=code, windowsVirtualKeyCode=vk)


async def open_view(tools: DevTools, url: str, run: Path) -> float:
    """Opens the served page and waits for its view: seconds until it has drawn."""
    opened = time.monotonic()
    await tools.call("Page.navigate", url=url)
    # textual-serve's page marks its body once the app's first bytes have come
    await tools.wait_until("the view's first bytes", "document.body.classList.contains('-first-byte')", 90)
    clients = run / "clients"
    await asyncio.to_thread(
        wait_for, "the served `cockpit attach` in clients/", lambda: any(clients.glob("*.json")), 60
    )
    await asyncio.sleep(2.0)  # the view has drawn the history by now; one more tick or two
    await tools.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
    return round(time.monotonic() - opened, 2)


async def drive_page(devtools_port: int, urls: dict[str, str], run: Path, out: Path, stamp: str) -> dict:
    import aiohttp

    result: dict[str, Any] = {}
    shot = out / f"{stamp}-serve-browser-cpu"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{devtools_port}/json/list") as answer:
            targets = await answer.json()
        page = next(t for t in targets if t.get("type") == "page")
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            tools = DevTools(ws)
            await tools.call("Page.enable")

            # read-only (served without --control): `p` is refused in the page, nothing is sent
            result["read_only_page_to_view_s"] = await open_view(tools, urls["read_only"], run)
            await tools.press("p")
            await asyncio.sleep(2.5)
            result["read_only_pause_sent"] = first_event(run, "command", name="pause") is not None
            result["screenshot_read_only_bytes"] = await tools.screenshot(Path(f"{shot}-read-only.png"))

            # --control: the same key pauses the run
            result["page_to_view_s"] = await open_view(tools, urls["control"], run)
            pressed = time.monotonic()
            await tools.press("p")
            accepted = await asyncio.to_thread(
                wait_for,
                "the trainer's answer to pause",
                lambda: first_event(run, "command", name="pause"),
                60,
            )
            paused = await asyncio.to_thread(
                wait_for, "the paused event", lambda: first_event(run, "paused"), 60
            )
            result["key_to_paused_s"] = round(time.monotonic() - pressed, 2)
            result["command_event"] = {k: accepted.get(k) for k in ("name", "accepted", "detail")}
            result["paused_at_step"] = paused.get("step")
            await asyncio.sleep(1.5)  # the view draws `paused`
            result["screenshot_paused_bytes"] = await tools.screenshot(Path(f"{shot}.png"))
            result["screenshots"] = [str(Path(f"{shot}{tail}.png")) for tail in ("-read-only", "")]
    return result


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:  # not listening yet
        return 0


def start_serving(run: Path, flags: list[str], env: dict, procs: list) -> tuple[str, list[str]]:
    """`cockpit serve RUN FLAGS` on a free port, once it listens: its URL and what it said."""
    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "cockpit", "serve", run.name, "--port", str(port), *flags],
        env={k: v for k, v in env.items() if k != test_aids.ENV},
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    procs.append(serve)
    said = []
    assert serve.stdout is not None
    for line in serve.stdout:
        said.append(line.rstrip("\n"))
        if "?token=" in line:
            break
    url = said[-1].strip()
    assert url.startswith(f"http://127.0.0.1:{port}/?token="), said
    wait_for("the server", lambda: status_of(url.split("?")[0]) == 403, 30)
    return url, said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--stamp", default=time.strftime("%Y-%m-%d"))
    args = parser.parse_args()
    browser = chromium()
    if browser is None:
        print("no chromium on PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="serve-browser-"))
    home = Path(os.environ["COCKPIT_HOME"]) if "COCKPIT_HOME" in os.environ else work / "home"
    env = cockpit_env(home, **test_aids.environ(step_sleep_s=0.3))
    import yaml

    config = work / "run.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    started = time.monotonic()
    procs: list[subprocess.Popen] = []
    result: dict[str, Any] = {"stamp": args.stamp, "browser": browser}
    run: Path | None = None
    try:
        train = subprocess.Popen(
            [sys.executable, "-m", "cockpit", "train", str(config), "--no-ui", "--skip-preflight"],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(train)
        runs = home / "runs"
        run = wait_for(
            "the run directory", lambda: next(iter(runs.glob("*")), None) if runs.is_dir() else None, 60
        )
        run = run.resolve()
        wait_for("the run's first step", lambda: first_event(run, "log"), 240, 0.3)
        result["train_to_first_step_s"] = round(time.monotonic() - started, 2)

        urls = {}
        for mode, flags in (("read_only", []), ("control", ["--control"])):
            url, said = start_serving(run, flags, env, procs)
            urls[mode] = url
            result[f"serve_said_{mode}"] = [line.split("?token=")[0] for line in said]  # no token kept
        base = urls["control"].split("?")[0]
        result["status_without_token"] = status_of(base)
        result["status_wrong_token"] = status_of(base + "?token=wrong")

        profile = work / "chromium"
        chrome = subprocess.Popen(
            [
                browser,
                "--headless=new",
                "--no-sandbox",  # as root (a container) Chromium starts only so
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={WINDOW[0]},{WINDOW[1]}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(chrome)
        active = profile / "DevToolsActivePort"
        devtools_port = int(
            wait_for(
                "Chromium's DevTools port", lambda: active.is_file() and active.read_text().split("\n")[0], 60
            )
        )
        result.update(asyncio.run(drive_page(devtools_port, urls, run, args.out, args.stamp)))
        result["total_s"] = round(time.monotonic() - started, 2)
    finally:
        for proc in reversed(procs[1:]):
            proc.send_signal(signal.SIGTERM)
        for proc in reversed(procs[1:]):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        if run is not None:  # the paused trainer: stopped (a checkpoint, then the end)
            subprocess.run(
                [sys.executable, "-m", "cockpit", "stop", str(run), "--timeout", "20", "--term-timeout", "5"],
                env=env,
                cwd=ROOT,
                capture_output=True,
                timeout=60,
            )
        for proc in procs[:1]:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if "COCKPIT_HOME" not in os.environ:
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(work / "chromium", ignore_errors=True)
    path = args.out / f"{args.stamp}-serve-browser-cpu.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
