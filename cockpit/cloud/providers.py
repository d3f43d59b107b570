"""Which provider this box is rented from, and how to stop or destroy it: plain data, no side effect.

Each provider is found by what it puts in the environment of its machines:

- RunPod: `RUNPOD_POD_ID` (the pod) and `RUNPOD_API_KEY` (a key scoped to the pod), with
  `runpodctl` installed in its images. `runpodctl stop pod ID` stops the GPU's billing; the pod's
  volume disk bills on until `runpodctl remove pod ID`.
- Vast.ai: `CONTAINER_ID` (the instance) and `CONTAINER_API_KEY`; the `vastai` CLI (`pip install
  vastai`) reads its key from `VAST_API_KEY`, which is set from `CONTAINER_API_KEY` for it.
  `vastai stop instance ID` leaves the disk billed; `vastai destroy instance ID` ends the billing
  and deletes the instance's data.
- Lambda: no stopped state (an instance bills until it is terminated), and no variable of its own:
  `LAMBDA_API_KEY` (made in its console) and `LAMBDA_INSTANCE_ID` (its console's instance page)
  say it; destroy-instance terminates it through its API
  (`POST /api/v1/instance-operations/terminate`, the key as a Bearer token).

A plan names credentials by their variable, never by value: it can be printed, logged and recorded.
`cockpit.cloud.act` carries it out.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

STOP = "stop-instance"
DESTROY = "destroy-instance"
INSTANCE_ACTIONS = (STOP, DESTROY)
LAMBDA_API_DEFAULT = "https://cloud.lambdalabs.com/api/v1"

Which = Callable[[str], "str | None"]  # shutil.which, or a test's


def is_instance_action(command: str | None) -> bool:
    return command is not None and command.strip() in INSTANCE_ACTIONS


@dataclass(frozen=True)
class Provider:
    """The provider found from the environment; credentials by name only."""

    key: str  # runpod | vast | lambda
    name: str  # RunPod, Vast.ai, Lambda
    instance_id: str | None
    id_variable: str  # where the instance's id comes from
    credential: str | None  # the variable (or file) that holds the key, None when none was found
    credential_wanted: str  # what to set when none was found
    cli: str | None = None  # the CLI's path, for the providers driven by one
    cli_name: str | None = None
    cli_install: str = ""

    def describe(self) -> str:
        parts = [f"{self.name} {self.noun()} {self.instance_id or '(id unknown)'}"]
        if self.cli_name:
            parts.append(f"{self.cli_name} {'at ' + self.cli if self.cli else 'NOT FOUND on PATH'}")
        parts.append(
            f"key from {self.credential}" if self.credential else f"no key ({self.credential_wanted})"
        )
        return ", ".join(parts)

    def noun(self) -> str:
        return "pod" if self.key == "runpod" else "instance"


@dataclass(frozen=True)
class HttpCall:
    """An API call: POST `url` with `body` (JSON), the key of `credential` as a Bearer token."""

    url: str
    body: dict[str, object]
    credential: str


@dataclass(frozen=True)
class InstancePlan:
    """What `stop-instance` or `destroy-instance` does on this box, or why it cannot."""

    action: str
    provider: Provider | None
    argv: list[str] = field(default_factory=list)  # the CLI's command, when it is one
    http: HttpCall | None = None  # the API call, when it is one
    env_from: dict[str, str] = field(default_factory=dict)  # variable set for the CLI <- variable read
    does: str = ""  # what it does, in words
    still_bills: str = ""  # what bills on after it
    problems: list[str] = field(default_factory=list)  # why it cannot be done here; empty: it can

    @property
    def ok(self) -> bool:
        return not self.problems

    def command_text(self) -> str:
        """The CLI's command or the API call, as a person would type it (no key in it)."""
        if self.http is not None:
            return f"POST {self.http.url} {self.http.body} (Bearer ${self.http.credential})"
        return " ".join(self.argv)

    def before_line(self, when: str) -> str:
        """What will happen `when`, and what still bills: said before the run starts."""
        if not self.ok:
            return f"{when}: {self.action} cannot run here: {'; '.join(self.problems)}"
        done = f"{self.does} (`{self.command_text()}`)"
        return f"{when}: {self.action}: {done}; still billed after: {self.still_bills}"


# ---------------------------------------------------------------- detection


def detect(environ: Mapping[str, str] | None = None, which: Which = shutil.which) -> Provider | None:
    """The provider whose variables this environment holds, or None."""
    env = os.environ if environ is None else environ
    if env.get("RUNPOD_POD_ID"):
        return Provider(
            "runpod",
            "RunPod",
            env["RUNPOD_POD_ID"],
            "RUNPOD_POD_ID",
            _first_credential(env, ("RUNPOD_API_KEY",), ("~/.runpod/config.toml", "~/.runpod.yaml")),
            "RUNPOD_API_KEY, or `runpodctl config --apiKey KEY`",
            which("runpodctl"),
            "runpodctl",
            "RunPod's images ship it; elsewhere see https://github.com/runpod/runpodctl",
        )
    if env.get("CONTAINER_ID") and (env.get("CONTAINER_API_KEY") or env.get("VAST_CONTAINERLABEL")):
        return Provider(
            "vast",
            "Vast.ai",
            env["CONTAINER_ID"],
            "CONTAINER_ID",
            _first_credential(
                env,
                ("VAST_API_KEY", "CONTAINER_API_KEY"),
                ("~/.config/vastai/vast_api_key", "~/.vast_api_key"),
            ),
            "CONTAINER_API_KEY or VAST_API_KEY",
            which("vastai"),
            "vastai",
            "pip install vastai",
        )
    if env.get("LAMBDA_API_KEY") or env.get("LAMBDA_INSTANCE_ID"):
        return Provider(
            "lambda",
            "Lambda",
            env.get("LAMBDA_INSTANCE_ID") or None,
            "LAMBDA_INSTANCE_ID",
            "LAMBDA_API_KEY" if env.get("LAMBDA_API_KEY") else None,
            "LAMBDA_API_KEY (an API key from the Lambda console)",
        )
    return None


def _first_credential(env: Mapping[str, str], names: tuple[str, ...], files: tuple[str, ...]) -> str | None:
    for name in names:
        if env.get(name):
            return name
    home = env.get("HOME")
    for name in files:
        path = Path(home, name.removeprefix("~/")) if home else Path(name).expanduser()
        if path.is_file():
            return str(path)
    return None


# ---------------------------------------------------------------- plans


def plan(action: str, environ: Mapping[str, str] | None = None, which: Which = shutil.which) -> InstancePlan:
    """What `action` (stop-instance or destroy-instance) does on this box, or why it cannot."""
    env = os.environ if environ is None else environ
    provider = detect(env, which)
    if action not in INSTANCE_ACTIONS:
        raise ValueError(f"{action!r} is not one of {', '.join(INSTANCE_ACTIONS)}")
    if provider is None:
        return InstancePlan(
            action,
            None,
            problems=[
                "no provider detected: none of RUNPOD_POD_ID (RunPod), CONTAINER_ID with CONTAINER_API_KEY "
                "(Vast.ai), LAMBDA_API_KEY (Lambda) is set. On another box give cost.on_end a shell "
                "command instead (e.g. 'sudo shutdown -h now'; most providers bill a stopped box's disk)"
            ],
        )
    build = {"runpod": _runpod, "vast": _vast, "lambda": _lambda}[provider.key]
    made = build(action, provider, env)
    problems = list(made.problems)
    if provider.cli_name and provider.cli is None:
        problems.append(f"{provider.cli_name} is not on PATH ({provider.cli_install})")
    if provider.credential is None:
        problems.append(f"no {provider.name} API key: set {provider.credential_wanted}")
    if not provider.instance_id:
        problems.append(f"{provider.id_variable} is not set: the {provider.noun()}'s id is needed")
    return InstancePlan(
        made.action, provider, made.argv, made.http, made.env_from, made.does, made.still_bills, problems
    )


def _runpod(action: str, p: Provider, env: Mapping[str, str]) -> InstancePlan:
    pod = p.instance_id or "$RUNPOD_POD_ID"
    cli = p.cli or "runpodctl"
    if action == STOP:
        return InstancePlan(
            action,
            p,
            [cli, "stop", "pod", pod],
            does=f"stops RunPod pod {pod}: its GPU stops billing",
            still_bills=(
                f"the pod's volume disk (storage) until the pod is removed: `runpodctl remove pod {pod}`, "
                "or cost.on_end: destroy-instance"
            ),
        )
    return InstancePlan(
        action,
        p,
        [cli, "remove", "pod", pod],
        does=(
            f"removes RunPod pod {pod}: its billing ends, and its disks are deleted with the run directory "
            "(copy off what you keep first: export.to on a network volume)"
        ),
        still_bills="nothing of the pod (a network volume, when one is attached, bills on)",
    )


def _vast(action: str, p: Provider, env: Mapping[str, str]) -> InstancePlan:
    instance = p.instance_id or "$CONTAINER_ID"
    cli = p.cli or "vastai"
    # vastai reads VAST_API_KEY; the instance's own key is CONTAINER_API_KEY
    env_from = {"VAST_API_KEY": "CONTAINER_API_KEY"} if p.credential == "CONTAINER_API_KEY" else {}
    if action == STOP:
        return InstancePlan(
            action,
            p,
            [cli, "stop", "instance", instance],
            env_from=env_from,
            does=f"stops Vast.ai instance {instance}: its GPU stops billing",
            still_bills=(
                f"the instance's disk (storage) until it is destroyed: `vastai destroy instance {instance}`, "
                "or cost.on_end: destroy-instance"
            ),
        )
    return InstancePlan(
        action,
        p,
        [cli, "destroy", "instance", instance],
        env_from=env_from,
        does=(
            f"destroys Vast.ai instance {instance}: its billing ends, and its data is deleted with the run "
            "directory (copy off what you keep first)"
        ),
        still_bills="nothing of the instance",
    )


def _lambda(action: str, p: Provider, env: Mapping[str, str]) -> InstancePlan:
    instance = p.instance_id or "$LAMBDA_INSTANCE_ID"
    if action == STOP:
        return InstancePlan(
            action,
            p,
            problems=[
                "Lambda has no stopped state (an instance bills until it is terminated): use "
                "destroy-instance, which terminates it and deletes its local disk"
            ],
        )
    base = (env.get("LAMBDA_API_URL") or LAMBDA_API_DEFAULT).rstrip("/")
    return InstancePlan(
        action,
        p,
        http=HttpCall(
            f"{base}/instance-operations/terminate", {"instance_ids": [instance]}, "LAMBDA_API_KEY"
        ),
        does=(
            f"terminates Lambda instance {instance}: its billing ends, and its local disk is deleted with "
            "the run directory (copy off what you keep first: a persistent filesystem survives)"
        ),
        still_bills="nothing of the instance (a persistent filesystem, when one is attached, bills on)",
    )
