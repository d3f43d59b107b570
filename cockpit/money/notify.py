"""Notifications through Apprise (`notify.urls`): the run ended, failed, ran out of memory, reached
its budget, its GPU idles billed, or (`notify.best_eval`) a new best eval loss.

The URLs hold secrets (a bot token, a webhook's key): `cockpit train` keeps them in the run's
`notify.json` (0600), writes them masked into config.yaml (cockpit.config.secrets.masked_url), and
no line, event or log the cockpit writes holds them whole. Apprise is imported only to send or to
check a URL, so a box without it runs everything else; `--check` says when it is missing.

A notification that fails never touches the run: it is said once per URL (backend.log and a
`warning` event), and later failures of that URL are only counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cockpit.config import secrets
from cockpit.config.schema import TrainConfig
from cockpit.run import journal

URLS_FILE = "notify.json"
TITLE = "lora-cockpit"
SEND_TIMEOUT_S = 20.0

# (url, title, body) -> (sent, why not): apprise_send, or a test's
Sender = Callable[[str, str, str], "tuple[bool, str]"]


def apprise_missing() -> str | None:
    """Why Apprise cannot be used here, or None."""
    import importlib.util

    if importlib.util.find_spec("apprise") is None:
        return "apprise is not installed in this environment: pip install apprise"
    return None


def check_urls(urls: Sequence[str]) -> list[str]:
    """Problems with the URLs (each shown masked): Apprise missing, or a URL it cannot read."""
    if not urls:
        return []
    missing = apprise_missing()
    if missing:
        return [f"notify.urls: {missing} (or remove notify)"]
    import apprise

    problems = []
    for n, url in enumerate(urls, 1):
        if not apprise.Apprise().add(url):
            problems.append(
                f"notify.urls[{n}]: Apprise cannot read {secrets.masked_url(url)}: its scheme or form is "
                "wrong (https://github.com/caronc/apprise/wiki lists each service's URL)"
            )
    return problems


def describe(cfg: TrainConfig) -> str:
    urls = cfg.notify.urls or []
    told = "end, failure, out of memory, budget reached, idle alarm" + (
        ", new best eval loss" if cfg.notify.best_eval else ""
    )
    return f"notify: {', '.join(secrets.masked_url(u) for u in urls)} on {told}"


# ---------------------------------------------------------------- keeping the URLs


def for_record(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with its notify URLs masked: what config.yaml holds."""
    import copy

    if not cfg.notify.urls:
        return cfg
    shown = copy.deepcopy(cfg)
    shown.notify.urls = [secrets.masked_url(u) for u in cfg.notify.urls]
    return shown


def keep_urls(run_path: Path, urls: Sequence[str] | None) -> None:
    """The URLs into the run's notify.json, readable by this user alone."""
    if not urls:
        return
    path = run_path / URLS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"urls": list(urls)}, f)


def urls_of(run_path: Path) -> list[str]:
    """The run's notify URLs; [] when it has none (or its file cannot be read)."""
    try:
        urls = json.loads((run_path / URLS_FILE).read_text(encoding="utf-8")).get("urls")
    except (OSError, ValueError, AttributeError):
        return []
    return [u for u in urls if isinstance(u, str)] if isinstance(urls, list) else []


# ---------------------------------------------------------------- sending


def apprise_send(url: str, title: str, body: str) -> tuple[bool, str]:
    """One URL through Apprise: (sent, why not), Apprise's own warnings as the reason."""
    missing = apprise_missing()
    if missing:
        return False, missing
    import apprise

    sender = apprise.Apprise()
    if not sender.add(url):
        return False, "Apprise cannot read the URL"
    quiet = apprise.logging.getLogger("apprise")
    was, quiet.propagate = quiet.propagate, False  # its debug lines hold the URL: nowhere but here
    try:
        capture = apprise.LogCapture(level=apprise.logging.WARNING, fmt="%(message)s")  # type: ignore[no-untyped-call,unused-ignore]
        with capture as said:
            sent = bool(sender.notify(body=body, title=title))
    finally:
        quiet.propagate = was
    why = said.getvalue().strip().splitlines() if not sent else []
    return sent, (why[-1] if why else "Apprise said it was not sent")


class Notifier:
    """Sends to every URL of a run; never raises; a failing URL is said once."""

    def __init__(
        self,
        run_id: str,
        urls: Sequence[str],
        say: Callable[[str], None] = print,
        events_path: Path | None = None,
        sender: Sender = apprise_send,
    ) -> None:
        self.run_id = run_id
        self.urls = list(urls)
        self.say = say
        self.events_path = events_path
        self.sender = sender
        self.failed: dict[str, int] = {}  # url -> failures so far
        self.sent: list[tuple[str, str]] = []  # (kind, title) of each notification sent to some URL
        self._hidden = sorted({p for u in self.urls for p in secrets.url_secrets(u)}, key=len, reverse=True)

    @classmethod
    def for_run(cls, run_path: Path, say: Callable[[str], None] = print) -> Notifier | None:
        urls = urls_of(run_path)
        if not urls:
            return None
        return cls(run_path.name, urls, say, run_path / "events.jsonl")

    def send(self, kind: str, title: str, body: str) -> bool:
        """To every URL, one after the other; True when at least one took it."""
        full_title = f"{TITLE}: {self.run_id}: {title}"
        took = 0
        for url in self.urls:
            try:
                sent, why = self.sender(url, full_title, body)
            except Exception as exc:  # a plugin's bug is no reason to touch the run
                sent, why = False, f"{type(exc).__name__}: {exc}"
            if sent:
                took += 1
            else:
                self._failed(url, why)
        if took:
            self.sent.append((kind, title))
            self.say(f"notify: {kind}: told {took} of {len(self.urls)} ({title})")
        return took > 0

    def send_in_background(self, kind: str, title: str, body: str) -> threading.Thread:
        """For a screen's handler: the network never holds it up."""
        thread = threading.Thread(target=self.send, args=(kind, title, body), daemon=True)
        thread.start()
        return thread

    def _failed(self, url: str, why: str) -> None:
        self.failed[url] = self.failed.get(url, 0) + 1
        if self.failed[url] > 1:
            return
        shown = secrets.masked_url(url)
        why = secrets.scrub(why, self._hidden)
        text = (
            f"notification to {shown} failed ({why}); the run is not affected, and later failures of this "
            "URL are not said"
        )
        self.say(f"notify: {text}")
        if self.events_path is not None:
            with contextlib.suppress(OSError):
                journal.append(self.events_path, "warning", message=text, hint=None)


def body_lines(**fields: Any) -> str:
    return "\n".join(f"{key.replace('_', ' ')}: {value}" for key, value in fields.items() if value)


class RunWatch:
    """The end runner's eye on a running run: each new event that calls for a notice is told.
    Events already in the journal when it starts (earlier attempts) only set the marks."""

    def __init__(self, run_path: Path, notifier: Notifier, best_eval: bool = False) -> None:
        from cockpit.money.notices import RunNotices

        self.notifier = notifier
        self.notices = RunNotices(best_eval)
        self.follower = journal.EventFollower(run_path / "events.jsonl")
        for item in self._new():
            self.notices.feed(item)

    def _new(self) -> list[dict[str, Any]]:
        try:
            return [item for item in self.follower.poll() if isinstance(item, dict)]
        except OSError:
            return []

    def poll(self) -> None:
        for item in self._new():
            for notice in self.notices.feed(item):
                self.notifier.send(notice.kind, notice.title, notice.body)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.follower.close()
