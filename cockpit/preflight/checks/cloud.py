"""The provider this box is rented from (cockpit.cloud): whether `cost.on_end: stop-instance` or
`destroy-instance` can stop its billing, with the provider's CLI and key found."""

from __future__ import annotations

import shutil
from collections.abc import Mapping

from cockpit import cloud
from cockpit.preflight.checks.base import CheckResult

TITLE = "Cloud provider"
THRESHOLD = "its CLI or API and a key, for cost.on_end: stop-instance | destroy-instance"


def check_provider(
    environ: Mapping[str, str] | None = None, which: cloud.providers.Which = shutil.which
) -> CheckResult:
    """pass: a provider with what its stop needs; warn: one without it; skip: none detected."""
    provider = cloud.detect(environ, which)
    if provider is None:
        return CheckResult(
            "host.provider",
            "host",
            TITLE,
            "skip",
            "none detected (no RunPod, Vast.ai or Lambda variables)",
            THRESHOLD,
            "stop-instance and destroy-instance need one; on this box give cost.on_end a shell command",
        )
    plans = {action: cloud.plan(action, environ, which) for action in cloud.INSTANCE_ACTIONS}
    usable = [action for action, p in plans.items() if p.ok]
    problems = sorted({problem for p in plans.values() for problem in p.problems})
    evidence = {"provider": provider.key, "instance_id": provider.instance_id, "usable": usable}
    value = f"{provider.describe()}; " + (
        f"{', '.join(usable)} available" if usable else "no action available"
    )
    if provider.key == "lambda" and usable == [cloud.DESTROY]:  # Lambda has no stopped state: not a fault
        problems = []
    if problems:
        return CheckResult(
            "host.provider", "host", TITLE, "warn", value, THRESHOLD, "; ".join(problems), evidence
        )
    return CheckResult("host.provider", "host", TITLE, "pass", value, THRESHOLD, evidence=evidence)
