"""Carry out a stop or destroy plan (cockpit.cloud.providers): the provider's CLI or its API.

The key goes to the CLI through its environment and to the API in a header, never on a command
line; what the CLI or the API answers is scrubbed of every secret of the environment before it is
said (cockpit.config.secrets).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cockpit.cloud.providers import InstancePlan
from cockpit.config import secrets

if TYPE_CHECKING:  # urllib.request is imported when an API is called: not by every `cockpit train`
    import urllib.request

ANSWER_CHARS = 2000  # of the CLI's or the API's answer, kept for the log


@dataclass(frozen=True)
class Outcome:
    ok: bool
    text: str  # what was done, and what still bills; or why it failed
    answer: str  # the CLI's output or the API's body, scrubbed and cut


Opener = Callable[["urllib.request.Request", float], Any]  # urllib.request.urlopen, or a test's


def carry_out(
    plan: InstancePlan,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
    opener: Opener | None = None,
) -> Outcome:
    """Do what `plan` says; never raises for the provider's refusal, an absent CLI or the network."""
    env = dict(os.environ if environ is None else environ)
    if not plan.ok:
        return Outcome(False, f"{plan.action} not done: {'; '.join(plan.problems)}", "")
    hidden = secrets.secret_values(env)
    if plan.http is not None:
        ok, answer = _call_api(plan, env, timeout_s, opener)
    else:
        ok, answer = _run_cli(plan, env, timeout_s)
    answer = secrets.scrub(answer, hidden).strip()[-ANSWER_CHARS:]
    if ok:
        text = f"{plan.action} done: {plan.does}; still billed: {plan.still_bills}"
    else:
        last = answer.splitlines()[-1] if answer else "no answer"
        text = f"{plan.action} FAILED ({last}): {plan.command_text()}"
    return Outcome(ok, text, answer)


def _run_cli(plan: InstancePlan, env: dict[str, str], timeout_s: float) -> tuple[bool, str]:
    for target, source in plan.env_from.items():
        if source in env and not env.get(target):
            env[target] = env[source]
    try:
        done = subprocess.run(
            plan.argv,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"no answer in {timeout_s:g} s"
    except OSError as exc:
        return False, f"{plan.argv[0]}: {exc.strerror or exc}"
    said = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        return False, f"{said}\nexit {done.returncode}".strip()
    return True, said


def _call_api(
    plan: InstancePlan, env: dict[str, str], timeout_s: float, opener: Opener | None
) -> tuple[bool, str]:
    import urllib.error
    import urllib.request

    assert plan.http is not None
    key = env.get(plan.http.credential, "")
    request = urllib.request.Request(
        plan.http.url,
        data=json.dumps(plan.http.body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    open_url: Opener = opener or (lambda req, t: urllib.request.urlopen(req, timeout=t))
    try:
        with open_url(request, timeout_s) as response:
            return True, response.read(ANSWER_CHARS * 2).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        body = exc.read(ANSWER_CHARS).decode("utf-8", "replace")
        return False, f"{body}\nHTTP {exc.code} {exc.reason}".strip()
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return False, f"{plan.http.url}: {reason}"
