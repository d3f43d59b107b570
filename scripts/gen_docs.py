"""Writes the generated parts of the docs from their one source: docs/config.md's key table from the
config schema, docs/protocol.md's field table from the event types. `make docs` runs it; the tests
fail while a generated part is out of date (tests/test_config_doc.py, tests/test_protocol.py).

    python scripts/gen_docs.py          # rewrite what changed, say which
    python scripts/gen_docs.py --check  # exit 1 if anything would change
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cockpit.config.schema import reference_table  # noqa: E402
from cockpit.protocol.events import markdown_table  # noqa: E402

# file -> (the name of its marks, what goes between them)
GENERATED = {
    "docs/config.md": ("config", reference_table),
    "docs/protocol.md": ("events", markdown_table),
}


def between_marks(text: str, mark: str, body: str) -> str:
    begin, end = f"<!-- {mark}:begin -->\n", f"<!-- {mark}:end -->"
    head, rest = text.split(begin, 1)
    return head + begin + body + end + rest.split(end, 1)[1]


def main(check: bool) -> int:
    stale = []
    for name, (mark, table) in GENERATED.items():
        path = ROOT / name
        text = path.read_text()
        new = between_marks(text, mark, table())
        if new != text:
            stale.append(name)
            if not check:
                path.write_text(new)
    verb = "out of date" if check else "written"
    print("\n".join(f"{name}: {verb}" for name in stale) or "the generated docs are up to date")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
