"""`python -m cockpit.cloud.command stop-instance|destroy-instance`: stop or destroy this instance through
its provider, saying what is done and what still bills (the command `cost.on_idle` runs for them).

Exit 0 done, 1 failed, 2 not possible here (no provider, no CLI, no key) or bad usage.
"""

from __future__ import annotations

import sys
import time

from cockpit.cloud import act, providers


def say(text: str) -> None:
    print(f"[cockpit {time.strftime('%H:%M:%S')}] {text}", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in providers.INSTANCE_ACTIONS:
        print(__doc__, file=sys.stderr)
        return 2
    planned = providers.plan(argv[0])
    if not planned.ok:
        say(f"{planned.action} cannot run here: {'; '.join(planned.problems)}")
        return 2
    say(f"{planned.action}: {planned.does}: {planned.command_text()}")
    outcome = act.carry_out(planned)
    if outcome.answer:
        say(f"{planned.provider.name if planned.provider else 'provider'} answered: {outcome.answer}")
    say(outcome.text)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
