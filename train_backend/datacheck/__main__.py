"""`python -m train_backend.datacheck`: the resolved config on stdin, the report on stdout."""

from __future__ import annotations

import sys
import time
import traceback

from train_backend.channel import Emitter, take_stdout

PROGRESS_EVERY_S = 1.0


def main() -> int:
    protocol_fd = take_stdout()
    emitter = Emitter(protocol_fd)
    try:
        import yaml

        from cockpit.config.load import config_from_dict
        from train_backend.datacheck.check import run_check

        cfg = config_from_dict(yaml.safe_load(sys.stdin.read()) or {})
        last = [0.0]

        def progress(fields: dict) -> None:
            now = time.monotonic()
            if now - last[0] >= PROGRESS_EVERY_S:
                last[0] = now
                emitter.emit("data_check_progress", **fields)

        emitter.emit("data_check", report=run_check(cfg, progress))
    except Exception as exc:  # a bug in the check, or a config it cannot read: still an answer
        traceback.print_exc()
        emitter.emit("data_check", report=None, error=f"{type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
