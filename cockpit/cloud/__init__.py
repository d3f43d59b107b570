"""The cloud the box is rented from: which provider (RunPod, Vast.ai, Lambda), and its own way to
stop or destroy this instance (`cost.on_end: stop-instance | destroy-instance`).

`providers` finds the provider and plans the action (plain data, credentials named, never held);
`act` carries a plan out; `python -m cockpit.cloud.command ACTION` does both (what `cost.on_idle` runs).
"""

from cockpit.cloud.act import Outcome, carry_out
from cockpit.cloud.providers import (
    DESTROY,
    INSTANCE_ACTIONS,
    STOP,
    InstancePlan,
    Provider,
    detect,
    is_instance_action,
    plan,
)

__all__ = [
    "DESTROY",
    "INSTANCE_ACTIONS",
    "STOP",
    "InstancePlan",
    "Outcome",
    "Provider",
    "carry_out",
    "detect",
    "is_instance_action",
    "plan",
]
