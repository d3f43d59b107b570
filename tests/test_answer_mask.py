"""The answers' tokens, found from the turn boundaries for any chat template: on four real template
families (Llama-2 `[INST]`, ChatML, Llama-3, Mistral) exactly the assistant's tokens and its
end-of-turn train, over several turns, with a system turn, and never from an empty answer.

The templates run on the shipped tokenizer (the mask depends on the template, not the
vocabulary), their special tokens added as single tokens; ChatML also runs on the fetched
SmolLM2 tokenizer when it is in the cache. Each expected answer is written out by hand."""

from __future__ import annotations

import pytest

from cockpit.models import packaged
from train_backend.answer_mask import IGNORE, end_of_turn, resolve_train_on, tokenize_with_mask
from train_backend.errors import DataError

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}"
)
# SmolLM2-Instruct's own (a default system turn when the conversation has none)
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)
# Qwen3-like: the turns after the last user turn get an empty think block, so a prefix ending at
# an earlier answer renders it apart from the whole conversation (the fallback finds it)
THINK_TEMPLATE = (
    "{%- set ns = namespace(last=0) -%}{%- for m in messages -%}{%- if m['role'] == 'user' -%}"
    "{%- set ns.last = loop.index0 -%}{%- endif -%}{%- endfor -%}{%- for m in messages -%}"
    "{{- '<|im_start|>' + m['role'] + '\n' -}}{%- if m['role'] == 'assistant' and loop.index0 > ns.last -%}"
    "{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}{{- m['content'] + '<|im_end|>\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)

SYSTEM = {"role": "system", "content": "Be brief."}
TALK = [
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello! How are you?"},
    {"role": "user", "content": "Fine, and you?"},
    {"role": "assistant", "content": "Good."},
]
WITH_EMPTY = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "Again?"},
    {"role": "assistant", "content": "Yes."},
]
# what each template trains of TALK's two answers, and of WITH_EMPTY's one
EXPECTED = {
    "llama2": ([" Hello! How are you? </s>", " Good. </s>"], [" Yes. </s>"]),  # the space: the answer's
    "chatml": (["Hello! How are you?<|im_end|>", "Good.<|im_end|>"], ["Yes.<|im_end|>"]),
    "smollm2": (["Hello! How are you?<|im_end|>", "Good.<|im_end|>"], ["Yes.<|im_end|>"]),
    "llama3": (["Hello! How are you?<|eot_id|>", "Good.<|eot_id|>"], ["Yes.<|eot_id|>"]),
    "mistral": (["Hello! How are you?</s>", "Good.</s>"], ["Yes.</s>"]),
}
TEMPLATES = list(EXPECTED)


def shipped():
    from transformers import AutoTokenizer

    from train_backend.model import shipped_tokenizer_dir

    return AutoTokenizer.from_pretrained(shipped_tokenizer_dir())


def with_template(template: str, specials: list[str], **roles) -> object:
    tokenizer = shipped()
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    for name, token in roles.items():
        setattr(tokenizer, name, token)
    tokenizer.chat_template = template
    return tokenizer


@pytest.fixture(scope="module")
def tokenizers() -> dict:
    made = {
        "llama2": shipped(),  # its own template: Llama-2's [INST] with <<SYS>>
        "chatml": with_template(
            CHATML_TEMPLATE, ["<|im_start|>", "<|im_end|>"], bos_token="<|im_start|>", eos_token="<|im_end|>"
        ),
        "llama3": with_template(
            LLAMA3_TEMPLATE,
            ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
            bos_token="<|begin_of_text|>",
            eos_token="<|eot_id|>",
        ),
        "mistral": with_template(MISTRAL_TEMPLATE, []),
    }
    if packaged.is_fetched("smollm2-135m"):
        from transformers import AutoTokenizer

        made["smollm2"] = AutoTokenizer.from_pretrained(str(packaged.model_dir("smollm2-135m")))
    return made


def pick(tokenizers: dict, name: str):
    if name not in tokenizers:
        pytest.skip("smollm2-135m is not in the model cache; fetch it once with: cockpit fetch smollm2-135m")
    return tokenizers[name]


def trained_runs(tokenizer, sample) -> list[str]:
    """The text of each run of consecutive trained tokens, read from the tokens' own offsets."""
    offsets = tokenizer(sample.text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    runs: list[list[int]] = []
    for index, trained in enumerate(sample.trained):
        if trained and runs and runs[-1][1] == index:
            runs[-1][1] = index + 1
        elif trained:
            runs.append([index, index + 1])
    return [sample.text[offsets[a][0] : offsets[b - 1][1]] for a, b in runs]


def chat(tokenizer, turns, max_length=512, train_on="answers"):
    return tokenize_with_mask(tokenizer, {"messages": turns}, "messages", train_on, max_length)


@pytest.mark.parametrize("name", TEMPLATES)
def test_exactly_the_answers_and_their_end_of_turn_train(tokenizers, name):
    tokenizer = pick(tokenizers, name)
    turns = TALK if name == "mistral" else [SYSTEM, *TALK]  # Mistral's template refuses a system turn
    sample = chat(tokenizer, turns)
    assert trained_runs(tokenizer, sample) == EXPECTED[name][0]
    # the tokens are the ones the trainer trains on without a mask (TRL tokenizes the template so)
    unmasked = tokenizer.apply_chat_template(turns, tokenize=True, return_dict=True)
    assert sample.input_ids == unmasked["input_ids"]
    assert sample.labels == [t if k else IGNORE for t, k in zip(sample.input_ids, sample.trained)]
    assert not sample.truncated_answer and sample.length == len(sample.input_ids)


@pytest.mark.parametrize("name", TEMPLATES)
def test_without_a_system_turn(tokenizers, name):
    tokenizer = pick(tokenizers, name)
    assert trained_runs(tokenizer, chat(tokenizer, TALK)) == EXPECTED[name][0]


@pytest.mark.parametrize("name", TEMPLATES)
def test_an_empty_answer_trains_nothing_not_even_its_end_of_turn(tokenizers, name):
    tokenizer = pick(tokenizers, name)
    assert trained_runs(tokenizer, chat(tokenizer, WITH_EMPTY)) == EXPECTED[name][1]


@pytest.mark.parametrize("name", ["llama3", "mistral"])
def test_the_templates_special_tokens_are_single_tokens(tokenizers, name):
    tokenizer = tokenizers[name]
    marker = {"llama3": "<|eot_id|>", "mistral": "</s>"}[name]
    assert len(tokenizer(marker, add_special_tokens=False)["input_ids"]) == 1
    assert end_of_turn(tokenizer) == marker


def test_a_template_that_renders_a_prefix_apart_is_found_by_the_turns_text(tokenizers):
    tokenizer = with_template(THINK_TEMPLATE, ["<|im_start|>", "<|im_end|>"], eos_token="<|im_end|>")
    sample = chat(tokenizer, [SYSTEM, *TALK])
    assert sample.text.count("<think>") == 1  # only the last answer has the block
    # the block is what the model writes after the generation prompt, as the template has it
    expected = ["Hello! How are you?<|im_end|>", "<think>\n\n</think>\n\nGood.<|im_end|>"]
    assert trained_runs(tokenizer, sample) == expected


def test_an_answer_that_repeats_the_question_is_found_after_the_question(tokenizers):
    tokenizer = tokenizers["mistral"]
    echo = [{"role": "user", "content": "Fine"}, {"role": "assistant", "content": "Fine"}]
    sample = chat(tokenizer, echo)
    assert trained_runs(tokenizer, sample) == ["Fine</s>"]
    assert sample.text.index("Fine") < sample.spans[0][0]


def test_prompt_completion_strings_train_the_completion_and_the_eos(tokenizers):
    tokenizer = tokenizers["llama2"]
    row = {"prompt": "Translate to French: cat ->", "completion": " chat"}
    sample = tokenize_with_mask(tokenizer, row, "prompt_completion", "auto", 512)
    assert sample.text == "Translate to French: cat -> chat</s>"
    assert trained_runs(tokenizer, sample) == [" chat</s>"]
    everything = tokenize_with_mask(tokenizer, row, "prompt_completion", "all", 512)
    assert everything.input_ids == sample.input_ids and everything.trained_tokens == len(sample.input_ids) - 1


def test_prompt_completion_turns_train_only_the_completion(tokenizers):
    tokenizer = tokenizers["chatml"]
    row = {"prompt": TALK[:3], "completion": [TALK[3]]}
    sample = tokenize_with_mask(tokenizer, row, "prompt_completion", "answers", 512)
    assert trained_runs(tokenizer, sample) == ["Good.<|im_end|>"]  # the prompt's earlier answer: context


def test_max_length_cutting_an_answer_is_said_and_cutting_every_answer_trains_nothing(tokenizers):
    tokenizer = tokenizers["chatml"]
    whole = chat(tokenizer, TALK)
    last_answer = max(i for i, trained in enumerate(whole.trained) if trained)
    cut = chat(tokenizer, TALK, max_length=last_answer)
    assert cut.truncated_answer and not cut.answers_cut_off
    assert cut.answer_tokens_cut == 1 and cut.trained_tokens == whole.trained_tokens - 1
    first_answer = whole.trained.index(True)
    gone = chat(tokenizer, TALK, max_length=first_answer)
    assert gone.answers_cut_off and gone.trained_tokens == 0 and len(gone.input_ids) == first_answer
    assert gone.answer_tokens_cut == whole.trained_tokens and gone.length == whole.length


def test_all_trains_every_token_but_the_first(tokenizers):
    tokenizer = tokenizers["llama3"]
    sample = chat(tokenizer, [SYSTEM, *TALK], train_on="all")
    assert sample.trained == [False] + [True] * (len(sample.input_ids) - 1)
    assert sample.labels[0] == IGNORE and sample.labels[1:] == sample.input_ids[1:]


def test_answers_on_plain_text_is_refused_with_the_fix():
    assert resolve_train_on("auto", "text") == "all" and resolve_train_on("auto", "tokens") == "all"
    assert resolve_train_on("auto", "messages") == "answers"
    assert resolve_train_on("auto", "prompt_completion") == "answers"
    for fmt in ("text", "tokens"):
        with pytest.raises(DataError) as info:
            resolve_train_on("answers", fmt)
        assert "dataset.train_on: all" in str(info.value) and "'messages'" in str(info.value)


def test_a_template_that_refuses_a_partial_conversation_is_found_by_the_turns_text():
    refusing = "{% if messages[-1]['role'] != 'assistant' %}{{ raise_exception('no answer') }}{% endif %}"
    specials = ["<|im_start|>", "<|im_end|>"]
    tokenizer = with_template(refusing + CHATML_TEMPLATE, specials, eos_token="<|im_end|>")
    sample = chat(tokenizer, [SYSTEM, *TALK])
    assert trained_runs(tokenizer, sample) == ["Hello! How are you?<|im_end|>", "Good.<|im_end|>"]
