"""The chat backend: a run's base model with its adapter (or a whole model folder) on this machine's
device, answering conversations token by token over the JSON-lines channel.

    python -m train_backend.chat RUN_DIR --target PATH --kind adapter|model --style STYLE [--prefix P]

Started by `cockpit.results.chat_client`; the UI process never imports torch. Requests come one a line
on stdin (`chat` with `messages` and `max_new_tokens`, or `quit`); the answers are `chat_ready` once
loaded, then for each request `chat_token` pieces and one `chat_done` (docs/protocol.md). Library
output goes to stderr (the client points it at the run's chat.log).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m train_backend.chat")
    p.add_argument("run_dir")
    p.add_argument("--target", required=True, help="adapter folder, or a whole model's folder")
    p.add_argument("--kind", choices=("adapter", "model"), required=True)
    p.add_argument("--style", default="chat_template")
    p.add_argument("--prefix", default="")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    from train_backend.channel import Emitter, take_stdout

    emitter = Emitter(take_stdout())
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        model, tokenizer, ready = load(args)
    except Exception as exc:
        from train_backend.errors import classify, format_traceback

        verdict = classify(exc, "loading_model", args.run_dir)
        emitter.emit(
            "error",
            kind=verdict.kind,
            message=verdict.message,
            hint=verdict.hint,
            phase="loading_model",
            traceback=format_traceback(exc),
        )
        return verdict.exit_code
    emitter.emit("chat_ready", **ready)
    return serve(model, tokenizer, args, emitter, sys.stdin.buffer)


def load(args):
    from cockpit.config.load import load_config
    from cockpit.run.rundir import RunDir
    from train_backend import model as model_mod

    started = time.time()
    run = RunDir(Path(args.run_dir).resolve())
    cfg = load_config(run.config_path)
    device = model_mod.detect_device()
    if device.kind == "cpu" and cfg.method == "qlora":  # the 4-bit base needs CUDA: a 32-bit one here
        cfg.method = "lora"
    precision = model_mod.choose_precision(cfg, device)
    if args.kind == "model":
        cfg.model.name, cfg.model.revision = args.target, None
        cfg.method = "lora"  # a whole model in 16 (or 32) bits, no adapter
        base_path = args.target
    else:
        base_path = model_mod.resolve_model_path(cfg, precision, device)
    tokenizer_dir = args.target if _has_tokenizer(args.target) else base_path
    tokenizer = model_mod.load_tokenizer(cfg, tokenizer_dir)
    if cfg.method == "full" and args.kind == "adapter":
        cfg.method = "lora"
    model = model_mod.load_model(cfg, base_path, precision, device)
    if args.kind == "adapter":
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, args.target)
    model.eval()
    model.config.use_cache = True
    from train_backend.generation import stop_strings, stop_token_ids

    stops = [tokenizer.convert_ids_to_tokens(i) for i in stop_token_ids(tokenizer, model)]
    ready = {
        "base_model": cfg.model.name,
        "target": args.target,
        "kind": args.kind,
        "device": device.to_dict(),
        "precision": precision,
        "quantized": cfg.method == "qlora",
        "style": args.style,
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "stop_tokens": stops,
        "stop_strings": list(stop_strings(args.style, tokenizer)),
        "load_s": round(time.time() - started, 2),
    }
    return model, tokenizer, ready


def _has_tokenizer(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, n)) for n in ("tokenizer.json", "tokenizer_config.json"))


def serve(model, tokenizer, args, emitter, stdin) -> int:
    from cockpit.protocol.wire import Fault, LineDecoder
    from train_backend import generation

    decoder = LineDecoder()
    while True:
        chunk = stdin.readline()
        items = decoder.feed(chunk) if chunk else decoder.finish()
        for item in items:
            if isinstance(item, Fault):
                emitter.emit("warning", message=f"chat request: {item.describe()}", hint="")
                continue
            if item.get("type") == "quit":
                return 0
            if item.get("type") != "chat":
                emitter.emit("warning", message=f"chat request of unknown type {item.get('type')!r}", hint="")
                continue
            messages = item.get("messages")
            if not _valid(messages):
                emitter.emit(
                    "warning",
                    message="chat request: messages must be a list of {role, content} with the user's last",
                    hint="",
                )
                continue
            rendered = generation.render_chat(args.style, tokenizer, messages, args.prefix)
            answer = generation.generate(
                model,
                tokenizer,
                rendered,
                args.style,
                int(item.get("max_new_tokens") or 256),
                int(item.get("seed") or 0),
                on_text=lambda piece: emitter.emit("chat_token", text=piece),
            )
            emitter.emit(
                "chat_done",
                text=answer.text,
                finish=answer.finish,
                end_token=answer.end_token,
                new_tokens=answer.new_tokens,
                prompt_tokens=answer.prompt_tokens,
                seconds=answer.seconds,
                tokens_per_s=round(answer.new_tokens / answer.seconds, 1) if answer.seconds else None,
            )
        if not chunk:
            return 0


def _valid(messages) -> bool:
    return (
        isinstance(messages, list)
        and bool(messages)
        and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages)
        and all(m.get("role") in ("system", "user", "assistant") for m in messages)
        and messages[-1].get("role") == "user"
    )


if __name__ == "__main__":
    from train_backend.quick_exit import exit_now

    exit_now(main(sys.argv[1:]))
