"""Build the demo preference sets from the shipped demo data (cockpit/data/demo/train.jsonl).

Writes, relative to the repository root:

- ``cockpit/data/demo/preference.jsonl``: one pair a question, in chat turns: the prompt (the user's
  turn), the chosen answer (the demo's own, right) and a rejected one, corrupted: its last number
  (the result) changed to a wrong one, or, where it has no number, the answer to another question. What
  ``dataset.path: demo`` trains on under objective dpo or orpo.
- ``cockpit/data/demo/kto.jsonl``: the same answers unpaired for objective kto: each question once
  with its right answer (label true) and once with the corrupted one (label false).

Deterministic (fixed seed): running it twice writes the same bytes.

Usage: .venv/bin/python scripts/build_preference_demo.py
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

SEED = 4321
ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "cockpit" / "data" / "demo"
ROW = re.compile(r"^<s>\[INST\] (?P<q>.*?) \[/INST\] (?P<a>.*?) </s>$", re.S)
NUMBER = re.compile(r"\d+")


def questions() -> list[tuple[str, str]]:
    out = []
    for line in (DEMO / "train.jsonl").read_text(encoding="utf-8").splitlines():
        match = ROW.match(json.loads(line)["text"])
        if match:
            out.append((match["q"].strip(), match["a"].strip()))
    return out


def corrupted(answer: str, others: list[str], rng: random.Random) -> str:
    found = list(NUMBER.finditer(answer))
    if found:  # the result is the answer's last number: only it goes wrong
        last = found[-1]
        return answer[: last.start()] + str(int(last.group()) + rng.randint(1, 7)) + answer[last.end() :]
    wrong = [o for o in others if o != answer]
    return rng.choice(wrong)


def main() -> None:
    rng = random.Random(SEED)
    rows = questions()
    answers = [a for _, a in rows]
    pairs = []
    for question, answer in rows:
        prompt = [{"role": "user", "content": question}]
        rejected = corrupted(answer, answers, rng)
        pairs.append(
            {
                "prompt": prompt,
                "chosen": [{"role": "assistant", "content": answer}],
                "rejected": [{"role": "assistant", "content": rejected}],
            }
        )
    kto = []
    for pair in pairs:
        kto.append({"prompt": pair["prompt"], "completion": pair["chosen"], "label": True})
        kto.append({"prompt": pair["prompt"], "completion": pair["rejected"], "label": False})
    rng.shuffle(kto)
    for name, items in (("preference.jsonl", pairs), ("kto.jsonl", kto)):
        text = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
        (DEMO / name).write_text(text, encoding="utf-8")
        print(f"wrote {DEMO / name}: {len(items)} rows")


if __name__ == "__main__":
    main()
