"""Secrets from the environment (HF_TOKEN, WANDB_API_KEY...): found once, kept out of everything
the cockpit writes or prints, and out of configs.

The trainer scrubs its events and Python-level output (train_backend.channel); the client scrubs
every line it prints (cockpit.cli.main wraps stdout and stderr); a config whose value holds a
secret's value is refused, since the config is saved in the run directory.

Values shorter than MIN_SECRET_CHARS are not scrubbed: a value of 1 to 3 characters protects
nothing (a few thousand guesses), and hiding it would star out every "1" of a step count. Values
of 4 to 7 characters are scrubbed where they stand alone (not inside a longer word or number), so
a 4-character token does not mangle every word that contains it; longer ones wherever they appear.
"""

from __future__ import annotations

import io
import os
import re
from functools import lru_cache
from typing import Any, TextIO
from urllib.parse import parse_qsl, unquote, urlsplit

SECRET_ENV_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY", re.IGNORECASE)
NOT_SECRET_NAME = re.compile(r"^TOKENIZERS?_", re.IGNORECASE)  # TOKENIZERS_PARALLELISM=false
NOT_SECRET_VALUE = {"true", "false", "yes", "no", "on", "off", "none", "null", "0", "1"}
MIN_SECRET_CHARS = 4
WHOLE_MATCH_BELOW = 8  # shorter values are scrubbed only where they stand alone
MASK = "***"


def secret_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """name -> value of the environment's secret-looking variables worth scrubbing."""
    env = os.environ if environ is None else environ
    return {
        k: v
        for k, v in env.items()
        if SECRET_ENV_NAME.search(k)
        and not NOT_SECRET_NAME.search(k)
        and len(v) >= MIN_SECRET_CHARS
        and v.strip().lower() not in NOT_SECRET_VALUE
    }


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """The secrets' values, longest first (a secret inside another is scrubbed with it)."""
    return sorted(set(secret_env(environ).values()), key=len, reverse=True)


@lru_cache(maxsize=64)
def _pattern(value: str) -> re.Pattern[str]:
    escaped = re.escape(value)
    if len(value) >= WHOLE_MATCH_BELOW:
        return re.compile(escaped)
    return re.compile(rf"(?<![A-Za-z0-9]){escaped}(?![A-Za-z0-9])")


def contains(text: str, secret: str) -> bool:
    return secret in text and _pattern(secret).search(text) is not None


def scrub(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value in text:
            text = _pattern(value).sub(MASK, text)
    return text


def secret_in_values(
    raw: Any, environ: dict[str, str] | None = None, prefix: str = ""
) -> tuple[str, str] | None:
    """(dotted key, variable name) of the first config value that holds a secret's value, or None."""
    named = secret_env(environ)
    if not named:
        return None
    stack: list[tuple[str, Any]] = [(prefix, raw)]
    while stack:
        key, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((f"{key}.{k}" if key else str(k), v) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            stack.extend((key, v) for v in node)
        elif isinstance(node, str):
            for name, value in named.items():
                if contains(node, value):
                    return key, name
    return None


# Apprise URLs whose host is a server of yours (a webhook's), not a token
SERVER_SCHEMES = {"json", "jsons", "form", "forms", "xml", "xmls", "http", "https", "mailto", "mailtos"}


def url_secrets(url: str) -> list[str]:
    """The parts of a notification URL (Apprise's `scheme://...`) that may be secret, longest first:
    the user and password, every path segment and query value, and the host unless it is a server
    (a name with a dot, an address, or a webhook scheme's). `tgram://BOT_TOKEN/CHAT_ID` gives both."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return [url] if len(url) >= MIN_SECRET_CHARS else []
    found = [parts.username or "", parts.password or ""]
    host_port = parts.netloc.rsplit("@", 1)[-1]  # as written: tgram's host:port is its bot token
    server = parts.scheme.lower() in SERVER_SCHEMES or "." in host_port or host_port.startswith("[")
    if host_port and not server and not host_port.lower().startswith("localhost"):
        found += [host_port, *host_port.split(":")]
    found += [unquote(segment) for segment in parts.path.split("/")]
    found += [value for _, value in parse_qsl(parts.query)]
    keep = {v for v in found if len(v) >= MIN_SECRET_CHARS and v.strip().lower() not in NOT_SECRET_VALUE}
    return sorted(keep, key=len, reverse=True)


def masked_url(url: str) -> str:
    """The URL with its secret parts (url_secrets) as ***: what records and screens show."""
    return scrub(url.strip(), url_secrets(url))


class ScrubbedOutput(io.TextIOBase):
    """A client's stdout or stderr that scrubs what it writes; anything else (isatty, fileno,
    encoding) is the wrapped stream's, so terminals are still recognised."""

    def __init__(self, inner: TextIO, secrets: list[str]):
        self._inner, self._secrets = inner, secrets

    def write(self, text: str) -> int:
        self._inner.write(scrub(text, self._secrets))
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
