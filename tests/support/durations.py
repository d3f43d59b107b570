"""Write tests/durations.json (seconds per test, setup and call together, the tests of 2 s or more)
from the `--durations=0` report of a pytest run; tests/conftest.py schedules the longest first.

  python tests/support/durations.py PYTEST_LOG
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)")
KEEP_S = 2.0


def main(log: str) -> int:
    seconds: dict[str, float] = {}
    for line in Path(log).read_text().splitlines():
        m = LINE.match(line.strip())
        if m:
            test = m.group(3).split("@")[0]  # without xdist's @group
            seconds[test] = seconds.get(test, 0.0) + float(m.group(1))
    kept = {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1]) if v >= KEEP_S}
    out = Path(__file__).resolve().parent.parent / "durations.json"
    out.write_text(json.dumps(kept, indent=0) + "\n")
    print(f"{out}: {len(kept)} tests of {KEEP_S:g} s or more, {sum(kept.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
