"""Build the built-in demo assets of lora-cockpit.

Writes, relative to the repository root:

- ``cockpit/data/demo/train.jsonl``: instruction examples with a single ``"text"`` field in the
  llama-2 format of ``mlabonne/guanaco-llama2-1k`` (``<s>[INST] question [/INST] answer </s>``),
  the dataset used by the source article.
- ``cockpit/data/demo/chat.jsonl``: 40 examples of the same content in ``{"messages": [...]}`` chat
  format, some with a system message.
- ``cockpit/data/tokenizer/``: a small byte-level BPE tokenizer (1024 tokens) trained on those texts,
  loadable offline with ``transformers.AutoTokenizer`` and carrying a llama-2 style chat template.

The cockpit must be able to run a complete fine-tuning demo without network access, so the data and
the tokenizer are generated here from small fact tables and templates instead of being downloaded.
The facts are deliberately simple and repetitive so that a tiny model visibly learns them within
about 60 optimizer steps. Everything is deterministic (fixed seed, sorted iteration), so running the
script twice produces byte-identical files.

Usage: /work/venv/bin/python scripts/build_demo_assets.py
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

SEED = 1234
ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT / "cockpit" / "data" / "demo"
TOKENIZER_DIR = ROOT / "cockpit" / "data" / "tokenizer"

NUM_CHAT_EXAMPLES = 40
MIN_TRAIN_EXAMPLES = 300
MIN_WORDS, MAX_WORDS = 15, 60

VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0, 1, 2, 3 in this order
INSTRUCTION_TOKENS = ["[INST]", "[/INST]"]
# Ordinary (non-special) added tokens take the last ids, so the BPE model itself gets the rest.
BPE_VOCAB_SIZE = VOCAB_SIZE - len(INSTRUCTION_TOKENS)
MODEL_MAX_LENGTH = 4096

# Llama-2 chat format, matching the "text" field of train.jsonl for a single turn. A user turn
# already ends with "[/INST]", which is exactly where the assistant's answer starts, so
# add_generation_prompt needs to add nothing. The {% generation %} markers let
# return_assistant_tokens_mask (used by TRL's assistant-only loss) find the assistant tokens.
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system_message = messages[0]['content'] -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set system_message = none -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{%- if loop.first and system_message is not none -%}"
    "{%- set content = '<<SYS>>\\n' + system_message.strip() + '\\n<</SYS>>\\n\\n'"
    " + message['content'].strip() -%}"
    "{%- else -%}"
    "{%- set content = message['content'].strip() -%}"
    "{%- endif -%}"
    "{{- bos_token + '[INST] ' + content + ' [/INST]' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{%- generation -%}"
    "{{- ' ' + message['content'].strip() + ' ' + eos_token -}}"
    "{%- endgeneration -%}"
    "{%- else -%}"
    "{{- raise_exception('Only system, user and assistant roles are supported, in that order.') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

SYSTEM_PROMPTS = [
    "You are a helpful assistant. Answer in one short sentence.",
    "You are a concise tutor who gives short, correct answers.",
    "You are an assistant that knows about GPUs and LoRA fine-tuning.",
]

# Prepended to questions that would otherwise make an example too short to be a useful sample.
LEAD_INS = [
    "Here is a quick question for you.",
    "Please answer in one short sentence.",
    "I am studying for a quiz tomorrow.",
    "Help me check my notes, please.",
    "I want to make sure I remember this correctly.",
    "Could you help me with something simple?",
]


class Pair(NamedTuple):
    question: str
    answer: str


Template = tuple[str, str]

# ---------------------------------------------------------------------------------------------------
# Fact tables
# ---------------------------------------------------------------------------------------------------

CAPITALS = {
    "Argentina": "Buenos Aires",
    "Australia": "Canberra",
    "Austria": "Vienna",
    "Brazil": "Brasilia",
    "Canada": "Ottawa",
    "Chile": "Santiago",
    "China": "Beijing",
    "Egypt": "Cairo",
    "Finland": "Helsinki",
    "France": "Paris",
    "Germany": "Berlin",
    "Greece": "Athens",
    "India": "New Delhi",
    "Ireland": "Dublin",
    "Italy": "Rome",
    "Japan": "Tokyo",
    "Kenya": "Nairobi",
    "Mexico": "Mexico City",
    "Norway": "Oslo",
    "Peru": "Lima",
    "Poland": "Warsaw",
    "Portugal": "Lisbon",
    "Spain": "Madrid",
    "Sweden": "Stockholm",
    "Thailand": "Bangkok",
    "Turkey": "Ankara",
    "the United Kingdom": "London",
    "the United States": "Washington, D.C.",
}

OPPOSITES = {
    "hot": "cold",
    "big": "small",
    "fast": "slow",
    "up": "down",
    "light": "dark",
    "open": "closed",
    "early": "late",
    "happy": "sad",
    "full": "empty",
    "old": "new",
    "strong": "weak",
    "high": "low",
    "wet": "dry",
    "hard": "soft",
    "near": "far",
    "loud": "quiet",
    "thick": "thin",
    "rich": "poor",
    "long": "short",
    "true": "false",
    "inside": "outside",
    "first": "last",
}

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]

COLOUR_MIXES = {
    ("red", "blue"): "purple",
    ("red", "yellow"): "orange",
    ("blue", "yellow"): "green",
    ("red", "white"): "pink",
    ("black", "white"): "grey",
    ("blue", "orange"): "brown",
}

# name -> (memory in GB, memory type)
GPUS = {
    "RTX 3060": (12, "GDDR6"),
    "RTX 3090": (24, "GDDR6X"),
    "RTX 4080": (16, "GDDR6X"),
    "RTX 4090": (24, "GDDR6X"),
    "T4": (16, "GDDR6"),
    "L4": (24, "GDDR6"),
    "A10G": (24, "GDDR6"),
    "L40S": (48, "GDDR6"),
    "V100 32GB": (32, "HBM2"),
    "A100 40GB": (40, "HBM2"),
    "A100 80GB": (80, "HBM2e"),
    "H100 SXM": (80, "HBM3"),
    "H200": (141, "HBM3e"),
}

# (question paraphrases, answer); every paraphrase becomes one example.
LORA_FACTS: list[tuple[list[str], str]] = [
    (
        [
            "What does gradient checkpointing do during fine-tuning?",
            "Why would you turn on gradient checkpointing when training a model?",
            "How does gradient checkpointing save GPU memory?",
        ],
        "Gradient checkpointing saves memory by recomputing activations in the backward pass instead "
        "of storing them all.",
    ),
    (
        [
            "What is QLoRA?",
            "Can you explain what QLoRA means in fine-tuning?",
            "How is QLoRA different from plain LoRA?",
        ],
        "QLoRA trains LoRA adapters on top of a base model that is frozen and quantized to 4 bits.",
    ),
    (
        [
            "What is LoRA in the context of fine-tuning?",
            "How does LoRA fine-tuning work?",
            "What does a LoRA adapter learn?",
        ],
        "LoRA freezes the base weights and trains two small low-rank matrices whose product is added "
        "to each target layer.",
    ),
    (
        [
            "Why does LoRA use less memory than full fine-tuning?",
            "How does LoRA save GPU memory compared to full fine-tuning?",
        ],
        "LoRA only keeps gradients and optimizer states for the small adapter matrices, not for the "
        "frozen base model.",
    ),
    (
        [
            "What does the LoRA rank r control?",
            "What happens when you increase the LoRA rank?",
        ],
        "The rank r sets the width of the adapter matrices, so a higher rank means more trainable "
        "parameters and more capacity.",
    ),
    (
        [
            "What is lora_alpha used for?",
            "How does lora_alpha affect a LoRA adapter?",
        ],
        "The adapter output is scaled by lora_alpha divided by r, so alpha controls how strongly the "
        "adapter changes the model.",
    ),
    (
        [
            "What are target modules in LoRA?",
            "Which layers does LoRA usually adapt?",
        ],
        "Target modules are the layers that receive adapters, usually the attention projections and "
        "often the MLP projections too.",
    ),
    (
        [
            "What is NF4 quantization?",
            "Which 4-bit data type does QLoRA use?",
        ],
        "NF4 is the 4-bit NormalFloat data type that QLoRA uses to store the frozen base weights.",
    ),
    (
        [
            "What does gradient accumulation do?",
            "Why use gradient accumulation when fine-tuning on a small GPU?",
        ],
        "Gradient accumulation sums gradients over several small batches before each optimizer step to "
        "simulate a larger batch.",
    ),
    (
        [
            "How do you compute the effective batch size?",
            "What is the effective batch size in fine-tuning?",
        ],
        "The effective batch size is the per-device batch size times the accumulation steps times the "
        "number of GPUs.",
    ),
    (
        [
            "What does merging a LoRA adapter mean?",
            "Why would you merge a LoRA adapter into the base model?",
        ],
        "Merging adds the adapter weights into the base weights, so the model runs without extra "
        "adapter layers at inference.",
    ),
    (
        [
            "What is a paged optimizer?",
            "Why does QLoRA use paged optimizers?",
        ],
        "A paged optimizer moves optimizer states to CPU memory when the GPU runs short, which avoids "
        "out of memory crashes.",
    ),
    (
        [
            "Why train in bf16 instead of fp16?",
            "What is the advantage of bf16 training?",
        ],
        "The bf16 format has the same exponent range as fp32, so training rarely overflows and needs no "
        "loss scaling.",
    ),
    (
        [
            "What does LoRA dropout do?",
            "Why set lora_dropout when training an adapter?",
        ],
        "LoRA dropout randomly drops inputs to the adapter during training, which helps against "
        "overfitting on small datasets.",
    ),
    (
        [
            "What learning rate is typical for LoRA fine-tuning?",
            "Should LoRA use a higher learning rate than full fine-tuning?",
        ],
        "LoRA usually works with a higher learning rate than full fine-tuning, often around 2e-4.",
    ),
]

# ---------------------------------------------------------------------------------------------------
# Templates per kind: (question, answer) format strings
# ---------------------------------------------------------------------------------------------------

ADD_TEMPLATES: list[Template] = [
    ("What is {a} plus {b}?", "{a} plus {b} is {c}."),
    ("Can you add {a} and {b} for me and tell me the result?", "Adding {a} and {b} gives {c}."),
    (
        "If you have {a} apples and someone gives you {b} more, how many apples do you have?",
        "You have {c} apples.",
    ),
]
SUB_TEMPLATES: list[Template] = [
    ("What is {a} minus {b}?", "{a} minus {b} is {c}."),
    ("If you take {b} away from {a}, what number is left?", "Taking {b} away from {a} leaves {c}."),
    ("You have {a} coins and spend {b} of them. How many coins are left?", "You have {c} coins left."),
]
MUL_TEMPLATES: list[Template] = [
    ("What is {a} times {b}?", "{a} times {b} is {c}."),
    ("Can you multiply {a} by {b} and tell me the answer?", "{a} multiplied by {b} is {c}."),
    ("There are {a} boxes with {b} pens in each box. How many pens are there?", "There are {c} pens."),
]
UNIT_TEMPLATES: list[Template] = [
    ("How many {small} are in {n} {big}?", "There are {m} {small} in {n} {big}."),
    ("Convert {n} {big} to {small}.", "{n} {big} is equal to {m} {small}."),
    ("If something measures {n} {big}, how many {small} is that?", "That is {m} {small}."),
]
CAPITAL_TEMPLATES: list[Template] = [
    ("What is the capital of {country}?", "The capital of {country} is {capital}."),
    ("Which city is the capital of {country}?", "{capital} is the capital of {country}."),
    ("Name the capital city of {country}.", "The capital city of {country} is {capital}."),
]
OPPOSITE_TEMPLATES: list[Template] = [
    ("What is the opposite of {word}?", "The opposite of {word} is {other}."),
    (
        "Give me a word that means the opposite of {word}.",
        "A word that means the opposite of {word} is {other}.",
    ),
    ("Which word is the antonym of {word}?", "The antonym of {word} is {other}."),
]
DAY_AFTER_TEMPLATES: list[Template] = [
    ("What day comes after {x}?", "The day after {x} is {y}."),
    ("If today is {x}, what day is tomorrow?", "If today is {x}, tomorrow is {y}."),
]
DAY_BEFORE_TEMPLATES: list[Template] = [
    ("What day comes before {x}?", "The day before {x} is {y}."),
    ("If today is {x}, what day was yesterday?", "If today is {x}, yesterday was {y}."),
]
MONTH_AFTER_TEMPLATES: list[Template] = [
    ("Which month comes after {x}?", "The month after {x} is {y}."),
    ("What month follows {x} in the calendar?", "{y} follows {x} in the calendar."),
]
MONTH_BEFORE_TEMPLATES: list[Template] = [
    ("Which month comes before {x}?", "The month before {x} is {y}."),
    ("What month is right before {x} in the calendar?", "{y} comes right before {x} in the calendar."),
]
COLOUR_TEMPLATES: list[Template] = [
    ("What colour do you get when you mix {x} and {y}?", "Mixing {x} and {y} makes {z}."),
    (
        "If I mix {x} paint with {y} paint, what colour will it be?",
        "Mixing {x} paint with {y} paint gives {z}.",
    ),
    ("Which colour comes from combining {x} and {y}?", "Combining {x} and {y} gives {z}."),
]
GPU_TEMPLATES: list[Template] = [
    ("How much memory does the {gpu} have?", "The {gpu} has {mem} GB of {kind} memory."),
    ("What kind of memory does the {gpu} GPU use?", "The {gpu} uses {kind} memory, {mem} GB in total."),
    ("How many gigabytes of VRAM does the {gpu} card have?", "The {gpu} card has {mem} GB of {kind} VRAM."),
]

# (bigger unit, smaller unit, factor)
UNITS = [
    ("kilometers", "meters", 1000),
    ("meters", "centimeters", 100),
    ("kilograms", "grams", 1000),
    ("hours", "minutes", 60),
    ("minutes", "seconds", 60),
    ("days", "hours", 24),
    ("weeks", "days", 7),
    ("liters", "milliliters", 1000),
]


def fill(templates: list[Template], rng: random.Random, **values: object) -> Pair:
    """Pick one template pair and format both sides with the same values."""
    question, answer = rng.choice(templates)
    return Pair(question.format(**values), answer.format(**values))


def arithmetic_pairs(rng: random.Random, count: int) -> list[Pair]:
    pairs = []
    for _ in range(count):
        op = rng.choice(["add", "sub", "mul"])
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        if op == "add":
            pairs.append(fill(ADD_TEMPLATES, rng, a=a, b=b, c=a + b))
        elif op == "sub":
            a, b = max(a, b) + rng.randint(1, 8), min(a, b)
            pairs.append(fill(SUB_TEMPLATES, rng, a=a, b=b, c=a - b))
        else:
            pairs.append(fill(MUL_TEMPLATES, rng, a=a, b=b, c=a * b))
    return pairs


def unit_pairs(rng: random.Random, count: int) -> list[Pair]:
    pairs = []
    for _ in range(count):
        big, small, factor = rng.choice(UNITS)
        n = rng.randint(2, 9)
        pairs.append(fill(UNIT_TEMPLATES, rng, n=n, big=big, small=small, m=n * factor))
    return pairs


def capital_pairs(rng: random.Random) -> list[Pair]:
    # Two phrasings per country so each fact is seen more than once per epoch.
    pairs = []
    for country in sorted(CAPITALS):
        for question, answer in rng.sample(CAPITAL_TEMPLATES, 2):
            values = {"country": country, "capital": CAPITALS[country]}
            pairs.append(Pair(question.format(**values), answer.format(**values)))
    return pairs


def opposite_pairs(rng: random.Random) -> list[Pair]:
    # Both directions, so "hot -> cold" and "cold -> hot" are both in the data.
    pairs = []
    for word in sorted(OPPOSITES):
        pairs.append(fill(OPPOSITE_TEMPLATES, rng, word=word, other=OPPOSITES[word]))
        pairs.append(fill(OPPOSITE_TEMPLATES, rng, word=OPPOSITES[word], other=word))
    return pairs


def calendar_pairs(rng: random.Random) -> list[Pair]:
    pairs = []
    for names, after, before in (
        (DAYS, DAY_AFTER_TEMPLATES, DAY_BEFORE_TEMPLATES),
        (MONTHS, MONTH_AFTER_TEMPLATES, MONTH_BEFORE_TEMPLATES),
    ):
        for i, name in enumerate(names):
            pairs.append(fill(after, rng, x=name, y=names[(i + 1) % len(names)]))
            pairs.append(fill(before, rng, x=name, y=names[i - 1]))
    return pairs


def colour_pairs(rng: random.Random) -> list[Pair]:
    pairs = []
    for (x, y), z in sorted(COLOUR_MIXES.items()):
        pairs.append(fill(COLOUR_TEMPLATES, rng, x=x, y=y, z=z))
        pairs.append(fill(COLOUR_TEMPLATES, rng, x=y, y=x, z=z))
    return pairs


def gpu_pairs() -> list[Pair]:
    # Every GPU with every phrasing: these are the facts the demo chat is most likely asked about.
    pairs = []
    for gpu in sorted(GPUS):
        mem, kind = GPUS[gpu]
        for question, answer in GPU_TEMPLATES:
            values = {"gpu": gpu, "mem": mem, "kind": kind}
            pairs.append(Pair(question.format(**values), answer.format(**values)))
    return pairs


def lora_pairs() -> list[Pair]:
    return [Pair(question, answer) for questions, answer in LORA_FACTS for question in questions]


def word_count(pair: Pair) -> int:
    return len(pair.question.split()) + len(pair.answer.split())


def lengthen(pair: Pair, rng: random.Random) -> Pair:
    """Prepend lead-ins to short questions until the example has at least MIN_WORDS words."""
    lead_ins = rng.sample(LEAD_INS, len(LEAD_INS))
    while word_count(pair) < MIN_WORDS:
        pair = Pair(f"{lead_ins.pop()} {pair.question}", pair.answer)
    return pair


def build_pairs(rng: random.Random) -> list[Pair]:
    """All demo question/answer pairs, deduplicated by question and shuffled."""
    generators: list[Callable[[], list[Pair]]] = [
        lambda: arithmetic_pairs(rng, 90),
        lambda: unit_pairs(rng, 40),
        lambda: capital_pairs(rng),
        lambda: opposite_pairs(rng),
        lambda: calendar_pairs(rng),
        lambda: colour_pairs(rng),
        lambda: gpu_pairs(),
        lambda: lora_pairs(),
    ]
    seen: set[str] = set()
    pairs = []
    for generate in generators:
        for pair in generate():
            # Deduplicate before lengthening, so a lead-in cannot disguise a repeated question.
            if pair.question in seen:
                continue
            seen.add(pair.question)
            pairs.append(lengthen(pair, rng))
    rng.shuffle(pairs)
    return pairs


def llama2_text(pair: Pair) -> str:
    return f"<s>[INST] {pair.question} [/INST] {pair.answer} </s>"


def chat_record(pair: Pair, system: str | None) -> dict[str, list[dict[str, str]]]:
    messages = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": pair.question})
    messages.append({"role": "assistant", "content": pair.answer})
    return {"messages": messages}


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def tokenizer_corpus(texts: list[str]) -> Iterator[str]:
    """Yield the pieces of text that lie between the marker tokens.

    At encode time <s>, </s>, [INST] and [/INST] are split off before BPE runs, so training BPE on the
    pieces in between (and not on the markers themselves) matches what the model will see.
    """
    markers = re.compile("|".join(re.escape(t) for t in ["<s>", "</s>", *INSTRUCTION_TOKENS]))
    for text in texts:
        for piece in markers.split(text):
            if piece:
                yield piece


def train_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(tokenizer_corpus(texts), trainer=trainer)
    # Added (not special) tokens: they are always matched as one token, but stay visible when
    # decoding with skip_special_tokens=True.
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=False) for t in INSTRUCTION_TOKENS])

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        add_bos_token=False,
        add_eos_token=False,
        model_max_length=MODEL_MAX_LENGTH,
        padding_side="right",
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast) -> None:
    # Start from an empty folder so no file of an earlier layout (e.g. chat_template.jinja) lingers.
    shutil.rmtree(TOKENIZER_DIR, ignore_errors=True)
    # save_jinja_files=False keeps the chat template inside tokenizer_config.json.
    tokenizer.save_pretrained(TOKENIZER_DIR, save_jinja_files=False)
    # transformers 5 writes its new class name; the generic name also loads in transformers 4.
    config_path = TOKENIZER_DIR / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def check_tokenizer(train_texts: list[str], chat_records: list[dict[str, list[dict[str, str]]]]) -> None:
    """Reload the saved tokenizer the way the cockpit does and fail loudly if its layout is off."""
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR, local_files_only=True)
    assert isinstance(tokenizer, PreTrainedTokenizerFast), type(tokenizer)
    assert len(tokenizer) == VOCAB_SIZE, len(tokenizer)
    for token, expected_id in zip(SPECIAL_TOKENS, range(len(SPECIAL_TOKENS)), strict=True):
        assert tokenizer.convert_tokens_to_ids(token) == expected_id, token
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 3)
    for token in ["<s>", "</s>", *INSTRUCTION_TOKENS]:
        ids = tokenizer(token)["input_ids"]
        assert len(ids) == 1, (token, ids)

    lengths = []
    for text in train_texts:
        ids = tokenizer(text)["input_ids"]
        # Exactly the bos/eos the text holds: nothing added, nothing lost, and a lossless round trip.
        assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id, text
        assert ids.count(tokenizer.bos_token_id) == 1 and ids.count(tokenizer.eos_token_id) == 1, text
        assert tokenizer.decode(ids) == text, text
        lengths.append(len(ids))
    for record in chat_records:
        rendered = tokenizer.apply_chat_template(record["messages"], tokenize=False)
        assert rendered == render_chat(record), rendered

    mean = sum(lengths) / len(lengths)
    print(f"train.jsonl token lengths: min {min(lengths)}, mean {mean:.1f}, max {max(lengths)}")


def render_chat(record: dict[str, list[dict[str, str]]]) -> str:
    """Render a chat record as text the same way CHAT_TEMPLATE does (the tokenizer does not exist yet)."""
    messages = record["messages"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    user, assistant = messages[-2]["content"], messages[-1]["content"]
    if system is not None:
        user = f"<<SYS>>\n{system}\n<</SYS>>\n\n{user}"
    return f"<s>[INST] {user} [/INST] {assistant} </s>"


def main() -> None:
    rng = random.Random(SEED)
    pairs = build_pairs(rng)
    assert len(pairs) >= MIN_TRAIN_EXAMPLES, len(pairs)
    for pair in pairs:
        assert MIN_WORDS <= word_count(pair) <= MAX_WORDS, pair

    train_texts = [llama2_text(pair) for pair in pairs]
    write_jsonl(DEMO_DIR / "train.jsonl", [{"text": text} for text in train_texts])

    # Same content as train.jsonl, so a chat-format run learns the same facts; every third one
    # carries a system message so the template's <<SYS>> branch is exercised.
    chat_pairs = rng.sample(pairs, NUM_CHAT_EXAMPLES)
    chat_records = [
        chat_record(pair, SYSTEM_PROMPTS[i // 3 % len(SYSTEM_PROMPTS)] if i % 3 == 0 else None)
        for i, pair in enumerate(chat_pairs)
    ]
    write_jsonl(DEMO_DIR / "chat.jsonl", chat_records)

    tokenizer = train_tokenizer(train_texts + [render_chat(record) for record in chat_records])
    save_tokenizer(tokenizer)
    check_tokenizer(train_texts, chat_records)

    print(f"wrote {len(train_texts)} train examples, {len(chat_records)} chat examples")
    print(f"wrote tokenizer with {len(tokenizer)} tokens to {TOKENIZER_DIR.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
