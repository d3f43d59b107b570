"""`cockpit samples` and `cockpit chat`: what a run's training changed, and trying it.

Neither imports torch or textual here: the chat's model runs in `train_backend.chat`, a subprocess,
and the chat screen is imported only when it opens.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from cockpit.fmt import quoted
from cockpit.plain import output_width
from cockpit.run import rundir
from cockpit.run.exit_codes import EXIT_FAILED, EXIT_USAGE

if TYPE_CHECKING:  # the commands import what they use when they run: their parsers are built at
    # every start of the CLI (`cockpit train` included, whose process draws the live view)
    from cockpit.results import targets
    from cockpit.results.chat_client import ChatSession, Done
    from cockpit.run.state import RunState


def cmd_samples(args: argparse.Namespace) -> int:
    from cockpit.results import samples as samples_mod

    run = rundir.find(args.run)
    state = samples_mod.read_state(run)
    book = samples_mod.collect(state.samples)
    if args.json:
        print(
            json.dumps(
                {"run": run.run_id, "status": state.status, **book.to_json()}, indent=1, ensure_ascii=False
            )
        )
        return 0
    if not book.prompts:
        print(samples_mod.no_samples_reason(state), file=sys.stderr)
        return EXIT_FAILED
    print(samples_mod.text_report(book, output_width()))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """`cockpit compare RUN RUN ...`: final figures, the config difference, the losses side by side."""
    from cockpit.plain import wrapped
    from cockpit.results import compare

    runs = [rundir.find(spec) for spec in args.runs]
    if len({r.path for r in runs}) < 2:
        print("cockpit compare: name at least two different runs (id, prefix or path)", file=sys.stderr)
        return EXIT_USAGE
    curves = [compare.curves_of(run) for run in runs]
    if args.json:
        report = compare.report(curves, args.by, args.rows)
        print(json.dumps(report, indent=1, ensure_ascii=False, default=str))
        return 0
    if args.no_ui or not sys.stdout.isatty():
        print("\n".join(wrapped(compare.text_lines(curves, args.by, args.rows), output_width())))
        return 0
    from screens.compare.app import run_compare_app

    return run_compare_app(curves, args.by)


def cmd_chat(args: argparse.Namespace) -> int:
    from cockpit.results import samples as samples_mod
    from cockpit.results import targets
    from cockpit.results.chat_client import ChatError, ChatSession, ready_line

    run = rundir.find(args.run)
    state = samples_mod.read_state(run)
    try:
        target = targets.resolve(run, state, args.checkpoint, args.model)
    except targets.TargetError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    if target.note:
        print(target.note, file=sys.stderr)
    session = ChatSession.for_run(run, state, target, max_new_tokens=args.max_new_tokens)
    headless = args.prompt is not None or args.no_ui or not sys.stdin.isatty() or not sys.stdout.isatty()
    if not headless:
        from screens.chat.app import ChatApp  # the only place the chat screen is imported

        return ChatApp(session, run.run_id).run() or 0
    try:
        print(f"loading {_what(run, target, state)} ...", file=sys.stderr, flush=True)
        ready = session.start()
        print(ready_line(ready), file=sys.stderr, flush=True)
        if args.prompt is not None:
            return 0 if _answer(session, args.prompt) else EXIT_FAILED
        return repl(session)
    except ChatError as exc:
        print(f"chat: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 0
    finally:
        session.close()


def _what(run: rundir.RunDir, target: targets.ChatTarget, state: RunState) -> str:
    if target.kind == "model":
        return f"the model in {target.path}"
    base = (state.model or {}).get("name") or "the base model"
    return f"{base} with the adapter {target.label} of {run.run_id}"


def _answer(session: ChatSession, text: str) -> Done | None:
    from cockpit.results.chat_client import Token

    done = None
    for piece in session.ask(text):
        if isinstance(piece, Token):
            sys.stdout.write(piece.text)
            sys.stdout.flush()
        else:
            done = piece
    sys.stdout.write("\n")
    sys.stdout.flush()
    if done is not None:
        rate = f", {done.tokens_per_s} tokens/s" if done.tokens_per_s else ""
        ended = f"; ended by {done.end_token}" if done.end_token else ""
        print(
            f"[{done.finish}: {done.new_tokens} tokens in {done.seconds} s{rate}{ended}]",
            file=sys.stderr,
            flush=True,
        )
    return done


def repl(session: ChatSession, stdin: TextIO | None = None) -> int:
    """Plain lines: a turn per line; /reset starts over, /quit (or end of input) leaves."""
    stdin = stdin or sys.stdin
    print("type a message; /reset starts a new conversation, /quit (or Ctrl-D) leaves", file=sys.stderr)
    while True:
        print("> ", end="", file=sys.stderr, flush=True)
        line = stdin.readline()
        if not line:
            print("", file=sys.stderr)
            return 0
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            return 0
        if text == "/reset":
            session.reset()
            print("(new conversation)", file=sys.stderr)
            continue
        _answer(session, text)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("samples", help="the answers to eval.prompts: base model, each checkpoint, the end")
    sp.add_argument("run", nargs="?", help="run id, prefix or path (default: the newest)")
    sp.add_argument("--json", action="store_true", help="every prompt with every answer, as JSON")

    sp = sub.add_parser(
        "compare", help="runs side by side: loss and eval by step, tokens or dollars; config difference"
    )
    sp.add_argument("runs", nargs="+", metavar="RUN", help="two or more: run id, prefix or path")
    sp.add_argument(
        "--by", choices=compare_axes(), default="step", help="the x axis: step, tokens or usd (default: step)"
    )
    sp.add_argument("--rows", type=int, default=9, metavar="N", help="points in the text table (default 9)")
    sp.add_argument("--json", action="store_true", help="every run's points, figures, config difference")
    sp.add_argument("--no-ui", action="store_true", help="the text table even on a terminal")

    sp = sub.add_parser("chat", help="talk to a run's model: base + adapter, or a merged model folder")
    sp.add_argument("run", nargs="?", help="run id, prefix or path (default: the newest)")
    sp.add_argument("--checkpoint", metavar="N", help="a checkpoint's step, or 'best' (by eval loss)")
    sp.add_argument("--model", metavar="DIR", help="a whole (merged) model folder instead of the adapter")
    sp.add_argument("--prompt", help="one question: print the answer and exit")
    sp.add_argument(
        "--max-new-tokens",
        type=_tokens,
        default=256,
        metavar="N",
        help="longest answer in tokens (default 256)",
    )
    sp.add_argument(
        "--no-ui", action="store_true", help="a plain prompt on the terminal instead of the screen"
    )


def compare_axes() -> tuple[str, ...]:
    return ("step", "tokens", "usd")  # cockpit.results.compare.AXES, without its imports at every start


def _tokens(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 32768:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: give a number of tokens from 1 to 32768, e.g. 256")
    return value
