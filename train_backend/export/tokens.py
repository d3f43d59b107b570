"""What a chat template ends a turn with, and the Ollama Modelfile that speaks the same template.

The end token is found by rendering the template, not by guessing from names: an assistant turn
holding a sentinel is rendered, and the first special token after the sentinel is where the model
learnt to stop. That token is the eos of the generation_config, of the GGUF and of the Modelfile.
"""

from __future__ import annotations

SENTINELS = {"system": "@@SYSTEM-7f3a@@", "user": "@@USER-7f3a@@", "assistant": "@@ANSWER-7f3a@@"}


def render(tokenizer, messages: list[dict], generation_prompt: bool) -> str | None:
    """The template's text for these messages; None when the template refuses them (e.g. no system)."""
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
    except Exception:
        return None


def _turns(*roles: str) -> list[dict]:
    return [{"role": role, "content": SENTINELS[role]} for role in roles]


def template_end_tokens(tokenizer) -> list[str]:
    """The special tokens the template writes right after an assistant answer (usually one)."""
    if not getattr(tokenizer, "chat_template", None):
        return [tokenizer.eos_token] if tokenizer.eos_token else []
    text = render(tokenizer, _turns("user", "assistant"), generation_prompt=False)
    if text is None or SENTINELS["assistant"] not in text:
        return [tokenizer.eos_token] if tokenizer.eos_token else []
    after = text.split(SENTINELS["assistant"], 1)[1]
    specials = sorted(set(tokenizer.all_special_tokens), key=len, reverse=True)
    stripped = after.lstrip()
    for token in specials:
        if token and stripped.startswith(token):
            return [token]
    return [tokenizer.eos_token] if tokenizer.eos_token else []


def special_tokens(tokenizer) -> dict:
    """Ids and flags the GGUF and the generation_config carry."""
    ends = template_end_tokens(tokenizer)
    end_ids = [tokenizer.convert_tokens_to_ids(t) for t in ends]
    eos_ids = list(
        dict.fromkeys(end_ids + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []))
    )
    probe = tokenizer("a")["input_ids"]
    return {
        "bos": tokenizer.bos_token_id,
        "eos": end_ids[0] if end_ids else tokenizer.eos_token_id,
        "eos_ids": eos_ids,
        "eos_tokens": [tokenizer.convert_ids_to_tokens(i) for i in eos_ids],
        "unk": tokenizer.unk_token_id,
        "pad": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
        "add_bos": bool(probe) and tokenizer.bos_token_id is not None and probe[0] == tokenizer.bos_token_id,
        "add_eos": (
            tokenizer.eos_token_id is not None and len(probe) > 1 and probe[-1] == tokenizer.eos_token_id
        ),
        "chat_template": getattr(tokenizer, "chat_template", None),
    }


def _go(text: str) -> str:
    """Literal text inside a Go template: only `{{` needs care."""
    return text.replace("{{", '{{ "{{" }}')


def ollama_template(tokenizer) -> str | None:
    """The chat template as an Ollama (Go) template over .System, .Prompt and .Response, from the
    template's own renderings; None without a chat template."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    sys_tok, user_tok, answer_tok = SENTINELS["system"], SENTINELS["user"], SENTINELS["assistant"]
    plain = render(tokenizer, _turns("user"), generation_prompt=True)
    full = render(tokenizer, _turns("user", "assistant"), generation_prompt=False)
    if plain is None or full is None or user_tok not in plain or answer_tok not in full:
        return None
    before_user, after_user = plain.split(user_tok, 1)
    answer_end = full.split(answer_tok, 1)[1]
    # what the template puts after the answer, up to and including its end token (not the newline after)
    ends = template_end_tokens(tokenizer)
    if ends and ends[0] in answer_end:
        answer_end = answer_end[: answer_end.index(ends[0]) + len(ends[0])]
    no_system = f"{_go(before_user)}{{{{ .Prompt }}}}{_go(after_user)}"
    with_system = render(tokenizer, _turns("system", "user"), generation_prompt=True)
    body = no_system
    if with_system and sys_tok in with_system and user_tok in with_system:
        head, rest = with_system.split(sys_tok, 1)
        middle, tail = rest.split(user_tok, 1)
        body = (
            f"{{{{ if .System }}}}{_go(head)}{{{{ .System }}}}{_go(middle)}{{{{ .Prompt }}}}{_go(tail)}"
            f"{{{{ else }}}}{no_system}{{{{ end }}}}"
        )
    return f"{body}{{{{ .Response }}}}{_go(answer_end)}"


def modelfile(gguf_name: str, tokenizer, stops: list[str]) -> str:
    lines = [
        "# Ollama: ollama create NAME -f Modelfile && ollama run NAME",
        f"FROM ./{gguf_name}",
    ]
    template = ollama_template(tokenizer)
    if template is not None:
        lines.append(f'TEMPLATE """{template}"""')
    for stop in stops:
        lines.append(f'PARAMETER stop "{stop}"')
    return "\n".join(lines) + "\n"
