"""`cockpit`: the command line, and the one place that reaches up into the TUI (lazily).

Importing this module pulls in neither torch nor textual; `--no-ui` paths never do.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from importlib import resources
from pathlib import Path

from cockpit import __version__, config, config_load, rundir, supervisor
from cockpit.headless import EXIT_DETACHED, EXIT_FAILED, EXIT_USAGE

DEMO_CONFIG = "demo.yaml"


def demo_config_path() -> str:
    return str(resources.files("cockpit") / "data" / "demo" / DEMO_CONFIG)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cockpit", description="A terminal cockpit for LoRA/QLoRA fine-tuning.")
    p.add_argument("--version", action="version", version=f"lora-cockpit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def with_ui(sp):
        sp.add_argument(
            "--no-ui", action="store_true", help="headless: live status on a terminal, plain lines otherwise"
        )
        sp.add_argument(
            "--log-every",
            type=float,
            default=10.0,
            metavar="S",
            help="plain output: seconds between step lines (0: every log event)",
        )

    def with_oom(sp):
        sp.add_argument(
            "--on-oom",
            choices=("ask", "auto", "stop"),
            default="stop",
            help="--no-ui, after an out-of-memory error: ask which remedy to apply (on a terminal), apply "
            "the best one that keeps the results and relaunch (auto, at most 3 times), or stop (default)",
        )
        sp.add_argument(
            "--emulate-vram",
            type=_vram_gib,
            metavar="GIB",
            help="behave as on a GPU with this much memory, e.g. 24GiB (sets emulate_vram_gib; CUDA only)",
        )

    sp = sub.add_parser("init", help="write a commented config template")
    sp.add_argument("path", nargs="?", default="cockpit.yaml")
    sp.add_argument("--force", action="store_true", help="overwrite an existing file")

    for name, text in (
        ("train", "validate CONFIG and start a run"),
        ("demo", "train the shipped tiny model"),
    ):
        sp = sub.add_parser(name, help=text)
        if name == "train":
            sp.add_argument("config", help="YAML config (cockpit init writes one)")
        sp.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            dest="overrides",
            help="override a config key, e.g. --set training.max_steps=50 (repeatable)",
        )
        sp.add_argument("--check", action="store_true", help="validate the config and exit")
        with_oom(sp)
        sp.add_argument(
            "--skip-preflight",
            action="store_true",
            help="start without the quick preflight (GPU via NVML, host, disks, hub: ~1 s)",
        )
        with_ui(sp)

    sp = sub.add_parser("estimate", help="predict peak GPU memory of a config, in parts (no GPU needed)")
    _workload_args(sp)
    sp.add_argument("--vram", type=float, metavar="GIB", help="say whether it fits a card of this many GiB")
    sp.add_argument("--inference", action="store_true", help="inference instead: weights + KV cache")
    sp.add_argument("--bits", type=int, choices=(4, 8, 16), default=4, help="with --inference")
    sp.add_argument("--context", type=int, default=4096, help="with --inference: tokens of context")
    sp.add_argument("--json", action="store_true")

    sp = sub.add_parser("cards", help="every card for a run: fit, peak, speed, time and cost (no GPU needed)")
    _workload_args(sp)
    _run_size_args(sp)
    sp.add_argument("--json", action="store_true", help="the table as JSON, with every input stated")
    sp.add_argument("--gpus", default="1", metavar="COUNTS", help="rows of N GPUs per card: 1,2,4,8 or multi")

    sp = sub.add_parser("pick", help="the card picker: edit the run, compare every card, write a config")
    _workload_args(sp)
    _run_size_args(sp)
    sp.add_argument("--multi", action="store_true", help="start with the 2x/4x/8x GPU rows shown (key g)")

    sp = sub.add_parser("preflight", help="is this box healthy and set up right? (GPU, host, disk, network)")
    sp.add_argument(
        "--quick", action="store_true", help="skip the disk speed probe, the download and big probes"
    )
    sp.add_argument("--json", action="store_true", help="print the report as JSON (after the checks)")
    sp.add_argument(
        "--no-ui", action="store_true", help="plain lines as checks finish (so is output to a non-terminal)"
    )
    sp.add_argument(
        "--model", help="the planned model (shape or hub id): judge RAM, disk and download for it"
    )
    sp.add_argument("--multi", action="store_true", help="with several GPUs: peer access and NCCL all-reduce")

    sp = sub.add_parser("runs", help="list runs with their status")
    sp.add_argument("--json", action="store_true")

    sp = sub.add_parser("attach", help="replay a run's history and follow it live")
    sp.add_argument("run", nargs="?", help="run id, prefix or path (default: the newest)")
    with_ui(sp)

    sp = sub.add_parser("replay", help="play a recorded run into the live view, labelled as a replay")
    sp.add_argument("run", nargs="?", help="run id, prefix or path (default: the newest)")
    sp.add_argument(
        "--speed",
        type=float,
        default=1.0,
        metavar="X",
        help="10 plays ten times as fast as recorded; 0 as fast as possible (default: 1)",
    )
    sp.add_argument("--no-ui", action="store_true", help="headless: the recorded lines, each with its time")
    sp.add_argument(
        "--log-every",
        type=float,
        default=10.0,
        metavar="S",
        help="recorded seconds between step lines (0: every log event)",
    )

    sp = sub.add_parser(
        "restart", help="start the trainer again in a run's directory, from its last checkpoint"
    )
    sp.add_argument("run", nargs="?")
    with_ui(sp)
    with_oom(sp)

    sp = sub.add_parser("stop", help="stop a run: checkpoint, then SIGTERM, then SIGKILL")
    sp.add_argument("run", nargs="?")
    sp.add_argument(
        "--timeout",
        type=float,
        default=supervisor.STOP_GRACE_S,
        help="seconds to wait for the graceful stop before SIGTERM",
    )
    sp.add_argument(
        "--term-timeout",
        type=float,
        default=supervisor.TERM_GRACE_S,
        help="seconds to wait after SIGTERM before SIGKILL",
    )
    for name, text in (
        ("save", "save a checkpoint now"),
        ("pause", "pause after the current step"),
        ("resume", "resume a paused run"),
    ):
        sp = sub.add_parser(name, help=text)
        sp.add_argument("run", nargs="?")
    return p


# flags that stand for config keys, for the commands about one run's needs (estimate, cards, pick)
WORKLOAD_FLAGS = {
    "model": "model.name",
    "method": "method",
    "seq": "training.max_length",
    "batch": "training.micro_batch_size",
    "accum": "training.gradient_accumulation_steps",
    "checkpointing": "training.gradient_checkpointing",
    "lora_r": "lora.r",
    "targets": "lora.target_modules",
    "optimizer": "training.optimizer",
}


def _workload_args(sp: argparse.ArgumentParser) -> None:
    """The run to estimate: a config and/or flags, each a shortcut for one config key."""
    sp.add_argument("config", nargs="?", help="YAML config (default: every key at its default)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides")
    sp.add_argument(
        "--model", help="model.name: synthetic:<arch> (a shipped shape), a folder with config.json, a hub id"
    )
    sp.add_argument("--method", help="method: qlora, lora or full")
    sp.add_argument("--seq", metavar="TOKENS", help="training.max_length")
    sp.add_argument("--batch", metavar="N", help="training.micro_batch_size")
    sp.add_argument("--accum", metavar="N", help="training.gradient_accumulation_steps")
    sp.add_argument(
        "--checkpointing", action=argparse.BooleanOptionalAction, help="training.gradient_checkpointing"
    )
    sp.add_argument("--lora-r", metavar="R", help="lora.r")
    sp.add_argument("--targets", metavar="NAMES", help="lora.target_modules: q_proj,v_proj or all-linear")
    sp.add_argument("--optimizer", help="training.optimizer, e.g. paged_adamw_8bit")
    sp.add_argument(
        "--trainer",
        choices=("trl", "hf"),
        default="trl",
        help="trl: what cockpit runs (default); hf: a plain HF Trainer + peft script",
    )


def _run_size_args(sp: argparse.ArgumentParser) -> None:
    """How much the run trains on, for time and cost (training.max_steps, when set, wins)."""
    sp.add_argument("--tokens", metavar="N", help="dataset tokens, e.g. 5M or 250k")
    sp.add_argument("--samples", metavar="N", help="dataset samples (with --mean-tokens)")
    sp.add_argument("--mean-tokens", metavar="N", help="mean tokens per sample (with --samples)")
    sp.add_argument("--epochs", type=float, help="passes over the dataset (default: training.epochs)")
    sp.add_argument("--budget", type=float, metavar="USD", help="flag the fastest card within this cost")


def _workload_overrides(args) -> list[str]:
    """--set items, then the flags as `key=value` (the flags win)."""
    out = list(args.overrides)
    for dest, key in WORKLOAD_FLAGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if isinstance(value, bool):
            value = str(value).lower()
        elif dest == "targets" and value.strip() != "all-linear":
            value = "[" + ",".join(t for t in re.split(r"[\s,]+", value) if t) + "]"
        out.append(f"{key}={value}")
    return out


def _load_workload(args):
    """(config, model shape, workload) from the config and flags.

    Raises ConfigError, modelshape.ShapeError (the model), estimate.EstimateError (the settings)."""
    from cockpit import estimate as est
    from cockpit import modelshape

    cfg = config_load.load_config(args.config, _workload_overrides(args))
    shape = modelshape.load_shape(cfg.model.name, cfg.model.revision or "main")
    return cfg, shape, est.workload_from_config(cfg, shape, args.trainer)


def _dataset_text(args) -> str:
    """--tokens, or --samples x --mean-tokens, as the picker's dataset field reads it."""
    from cockpit.cards import CardsError

    if (args.samples is None) != (args.mean_tokens is None):
        example = "--samples 9846 --mean-tokens 350"
        raise CardsError("dataset", f"give --samples together with --mean-tokens, e.g. {example}")
    if args.tokens is not None and args.samples is not None:
        raise CardsError("dataset", "give --tokens or --samples with --mean-tokens, not both")
    return f"{args.samples}x{args.mean_tokens}" if args.samples is not None else args.tokens or ""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return EXIT_USAGE
    handler = globals()[f"cmd_{args.command}"]
    try:
        return handler(args)
    except config.ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except rundir.RunNotFound as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except supervisor.NotRunning as exc:
        print(
            f"{exc}. `cockpit runs` shows its status; `cockpit restart` continues from its last checkpoint.",
            file=sys.stderr,
        )
        return EXIT_FAILED


def cmd_init(args) -> int:
    path = Path(args.path)
    if path.exists() and not args.force:
        print(f"{path} exists; use --force to overwrite", file=sys.stderr)
        return EXIT_USAGE
    path.write_text(config.template(), encoding="utf-8")
    print(f"wrote {path}; edit it, then: cockpit train {path}")
    return 0


def cmd_train(args) -> int:
    cfg = config_load.load_config(args.config, args.overrides)
    return _start(cfg, args)


def cmd_demo(args) -> int:
    cfg = config_load.load_config(demo_config_path(), args.overrides)
    return _start(cfg, args)


def _vram_gib(text: str) -> float:
    """`24GiB`, `24G`, `24` (GiB) or `24576MiB` -> GiB."""
    match = re.fullmatch(r"\s*([\d.]+)\s*(GiB|G|MiB|M)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give GiB as nvidia-smi counts them (MiB / 1024), e.g. 24GiB or 24576MiB"
        )
    number = float(match.group(1))
    return number / 1024 if match.group(2) in ("MiB", "M") else number


def _start(cfg: config.TrainConfig, args) -> int:
    if args.emulate_vram is not None:
        cfg.emulate_vram_gib = args.emulate_vram
    if args.check:
        print("config OK")
        return 0
    config_load.with_absolute_paths(cfg)
    problems = []
    if not args.skip_preflight:  # warn before money is spent; never block the start
        from cockpit.preflight_start import run_start_preflight

        checked = run_start_preflight(cfg)
        problems = checked.problems
        if args.no_ui:
            print("\n".join(checked.lines()), flush=True)
    run = rundir.create(
        Path(cfg.output.dir) if cfg.output.dir else None, cfg.model.name, config.dump_config(cfg)
    )
    proc = supervisor.launch(run)
    print(f"run {run.run_id} started (trainer pid {proc.pid}); directory {run.path}", file=sys.stderr)
    return _show(run, proc, args, preflight_problems=problems)


def _show(run: rundir.RunDir, proc, args, replay: bool = False, preflight_problems=()) -> int:
    from cockpit.session import RunSession

    session = RunSession(run, proc=proc, replay=replay)
    if args.no_ui:
        from cockpit.headless import follow

        code = follow(session, log_every_s=args.log_every)
        while (session := _relaunch_after_oom(run, session.state, args)) is not None:
            code = follow(session, log_every_s=args.log_every)  # the relaunched trainer
        return code
    from cockpit.watch import LiveWatch
    from screens.app import CockpitApp  # the only place the TUI is imported

    watch = None
    if not replay:  # a live trainer: sample its GPUs and host now; the app stops the watch on exit
        pid = proc.pid if proc is not None else (run.read_trainer() or {}).get("pid")
        watch = LiveWatch(pid).start()
    app = CockpitApp(session, watch=watch, preflight_problems=list(preflight_problems))
    code = app.run() or 0
    if app.relaunched is not None:  # the OOM wizard started a new trainer: follow it
        return _show(run, app.relaunched, args)
    if code == EXIT_DETACHED and not replay:
        run_id = run.run_id
        print(f"detached; training goes on. Watch: cockpit attach {run_id}   Stop: cockpit stop {run_id}")
    return code


def _relaunch_after_oom(run: rundir.RunDir, state, args):
    """--on-oom ask|auto after a headless run that ran out of memory: a session on the relaunched
    trainer, or None."""
    if getattr(args, "on_oom", "stop") == "stop":
        return None
    from cockpit.relaunch import headless_on_oom

    args.oom_relaunches = getattr(args, "oom_relaunches", 0) + 1
    return headless_on_oom(run, state, args.on_oom, args.oom_relaunches)


def cmd_attach(args) -> int:
    run = rundir.find(args.run)
    return _show(run, None, args, replay=not supervisor.is_alive(run))


def cmd_replay(args) -> int:
    from cockpit.replay import ReplaySession

    run = rundir.find(args.run)
    try:
        session = ReplaySession(run, speed=args.speed)
    except ValueError as exc:
        print(f"--speed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.no_ui:
        from cockpit.headless import follow

        # plain lines, each stamped with its recorded time: a live status line would take "now"
        # from the wall clock
        return follow(session, log_every_s=args.log_every, force_terminal=False)
    from screens.app import CockpitApp

    return CockpitApp(session, watch=session.watch).run() or 0


def cmd_restart(args) -> int:
    run = rundir.find(args.run)
    if supervisor.is_alive(run):
        print(f"run {run.run_id} is still running; attach with: cockpit attach {run.run_id}", file=sys.stderr)
        return EXIT_USAGE
    if supervisor.run_status(run).state == "finished":
        print(
            f"run {run.run_id} finished: nothing to continue. Its adapter is in {run.final_dir}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    config_load.load_config(run.config_path)  # still valid?
    if args.emulate_vram is not None:
        from cockpit.relaunch import apply_changes

        apply_changes(run, {"emulate_vram_gib": args.emulate_vram}, "--emulate-vram")
    checkpoints = run.complete_checkpoints()
    start = f"from {checkpoints[-1].name}" if checkpoints else "from the start (no complete checkpoint)"
    proc = supervisor.launch(run)
    print(f"run {run.run_id} restarted {start} (trainer pid {proc.pid})", file=sys.stderr)
    return _show(run, proc, args)


def cmd_estimate(args) -> int:
    from cockpit import estimate as est
    from cockpit import modelshape

    try:
        cfg, shape, workload = _load_workload(args)
        if args.inference:
            result = est.estimate_inference(shape, args.bits, args.context)
            workload = None
        else:
            result = est.estimate_memory(workload)
    except (modelshape.ShapeError, est.EstimateError) as exc:
        print(f"cannot estimate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    fits = None if args.vram is None else est.verdict(result, int(args.vram * est.GIB))
    if args.json:
        inputs = (
            est.workload_inputs(workload)
            if workload
            else {"model": shape.name, "bits": args.bits, "context": args.context}
        )
        data = est.to_dict(result, inputs)
        data["fits_vram"] = fits  # fits | tight | no | null
        print(json.dumps(data, indent=1))
        return 0
    what = "inference" if args.inference else f"{cfg.method} training ({args.trainer} trainer)"
    print(f"{shape.name}: {shape.params / 1e9:.2f}B params ({shape.source}), {what}; an estimate:")
    for part in result.parts:
        print(f"  {part.label:<36} {part.bytes / est.GIB:8.2f} GiB   {part.note}")
    print(f"  {'peak device memory (as nvidia-smi)':<36} {result.peak_gib:8.2f} GiB")
    print(f"  {'peak while loading':<36} {result.load_peak_bytes / est.GIB:8.2f} GiB")
    if fits is not None:
        words = {
            "fits": "fits",
            "tight": f"is TIGHT on (inside the {est.SAFETY_MARGIN:.0%} safety margin)",
            "no": "does NOT fit",
        }[fits]
        print(f"{words} a {args.vram:g} GiB card ({args.vram - result.peak_gib:+.2f} GiB headroom)")
    return 0


def cmd_cards(args) -> int:
    from cockpit import cards, cards_multi, catalog, modelshape
    from cockpit import estimate as est
    from cockpit.cards_text import table_text

    try:
        cfg, _shape, workload = _load_workload(args)
        epochs = cfg.training.epochs if args.epochs is None else args.epochs
        size = cards.parse_dataset(_dataset_text(args), epochs, cfg.training.max_steps)
        counts = cards_multi.parse_gpu_counts(args.gpus)
        table = cards.card_table(workload, catalog.load_catalog(), size, args.budget, gpu_counts=counts)
    except (modelshape.ShapeError, est.EstimateError) as exc:
        print(f"cannot estimate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except cards.CardsError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except catalog.CatalogError as exc:
        print(f"card catalog: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(table.to_dict(), indent=1) if args.json else table_text(table))
    return 0


def cmd_pick(args) -> int:
    import datetime as dt

    from cockpit import cards, catalog

    cfg = config_load.load_config(args.config, _workload_overrides(args))
    try:
        dataset = _dataset_text(args)
        cards_catalog = catalog.load_catalog()
    except cards.CardsError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except catalog.CatalogError as exc:
        print(f"card catalog: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from screens.picker_app import PickerApp  # the TUI, only on this branch

    app = PickerApp(
        cfg,
        catalog=cards_catalog,
        clock=dt.datetime.now,
        trainer=args.trainer,
        dataset=dataset,
        epochs=args.epochs,
        budget=args.budget,
        multi=args.multi,
    )
    app.run()
    for path in app.written:
        print(f"wrote {path}; set dataset.path in it, then start it: cockpit train {path}")
    return 0


def cmd_preflight(args) -> int:
    from cockpit.checks import exit_code
    from cockpit.preflight import report
    from cockpit.preflight_run import result_line, run_preflight

    model_bytes = None
    if args.model:
        from cockpit import modelshape

        try:
            model_bytes = (
                modelshape.load_shape(args.model).params * 2
            )  # the 16-bit weights to download and load
        except modelshape.ShapeError as exc:
            print(f"--model: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if not (args.json or args.no_ui) and sys.stdout.isatty():
        from cockpit.preflight_run import full_preflight
        from screens.preflight_app import PreflightApp  # the TUI, only on this branch

        app = PreflightApp(full_preflight(args.quick, model_bytes, args.multi), quick=args.quick)
        code = app.run()
        if app.last_export is not None:
            print(f"report written to {app.last_export}")
        return 2 if code is None else code  # None: the app died; no verdict is a failure
    say = (lambda r: None) if args.json else (lambda r: print(result_line(r), flush=True))
    results, meta = run_preflight(args.quick, on_result=say, model_bytes=model_bytes, multi=args.multi)
    code = exit_code(results)
    if args.json:
        print(json.dumps(report(results, meta), indent=1))
    else:
        counts = {s: sum(r.status == s for r in results) for s in ("pass", "warn", "fail", "skip")}
        print(
            f"preflight: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail, "
            f"{counts['skip']} skipped in {meta['duration_s']} s"
        )
    return code


def cmd_runs(args) -> int:
    rows = []
    for run in rundir.all_runs():
        status = supervisor.run_status(run)
        rows.append(
            {
                "run": run.run_id,
                "status": status.state,
                "step": status.step,
                "total_steps": status.total_steps,
                "detail": status.detail,
                "path": str(run.path),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print("no runs yet; start one with: cockpit demo")
        return 0
    width = max(len(r["run"]) for r in rows)
    for r in rows:
        steps = f"{r['step']}/{r['total_steps'] or '?'}"
        print(f"{r['run']:<{width}}  {r['status']:<8}  {steps:>11}  {r['detail']}")
    return 0


def cmd_stop(args) -> int:
    run = rundir.find(args.run)
    outcome = supervisor.stop(
        run, grace_s=args.timeout, term_s=args.term_timeout, say=lambda t: print(t, file=sys.stderr)
    )
    print(f"{run.run_id}: {outcome}")
    return 0 if outcome in ("stopped", "terminated", "killed", "not running") else EXIT_FAILED


def _send(args, name: str) -> int:
    run = rundir.find(args.run)
    supervisor.send_command(run, name)
    print(f"sent {name} to {run.run_id}; `cockpit attach {run.run_id}` shows the answer")
    return 0


def cmd_save(args) -> int:
    return _send(args, "save")


def cmd_pause(args) -> int:
    return _send(args, "pause")


def cmd_resume(args) -> int:
    return _send(args, "resume")
