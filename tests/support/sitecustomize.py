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
