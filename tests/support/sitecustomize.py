"""Test aid: every Python process started with this folder on PYTHONPATH records, at exit,
which top-level modules it imported (to prove the import boundaries on real runs)."""

import atexit
import os
import sys

_out = os.environ.get("COCKPIT_TEST_MODULES_DIR")
if _out:

    def _record() -> None:
        role = "trainer" if "train_backend" in sys.modules else "client"
        if any(arg.endswith("synthetic") or "train_backend.synthetic" in arg for arg in sys.argv):
            role = "builder"
        names = sorted({name.split(".")[0] for name in list(sys.modules)})
        with open(os.path.join(_out, f"{role}-{os.getpid()}.txt"), "w") as f:
            f.write("\n".join(names))

    atexit.register(_record)

# COCKPIT_TEST_CLOCK_STEP=PATH:SECONDS: the trainer's wall clock is stepped by SECONDS once PATH exists,
# as NTP steps it; its monotonic clock is not (tests/test_finish_cost_e2e.py)
_step = os.environ.get("COCKPIT_TEST_CLOCK_STEP")
if _step and "train_backend" in getattr(sys, "orig_argv", ()):
    import time as _time

    _trigger, _by = _step.rsplit(":", 1)
    _real_time, _seen = _time.time, {"at": 0.0, "stepped": False}

    def _stepped_time() -> float:
        now = _time.monotonic()
        if not _seen["stepped"] and now - _seen["at"] >= 0.2:
            _seen["at"], _seen["stepped"] = now, os.path.exists(_trigger)
        return _real_time() + (float(_by) if _seen["stepped"] else 0.0)

    _time.time = _stepped_time
