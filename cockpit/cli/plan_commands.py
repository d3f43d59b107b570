"""`cockpit estimate`, `cards`, `pick` and `preflight`: the commands that size a planned run or
check the box before one starts. Heavy modules (the estimator, the catalog, the TUI) load inside
each command.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from cockpit import fmt
from cockpit.cli.args import dataset_text, workload_overrides
from cockpit.config import load as config_load
from cockpit.paths import cockpit_command
from cockpit.plain import output_width, wrapped
from cockpit.run.exit_codes import EXIT_USAGE

if TYPE_CHECKING:  # the commands import these when they run
    from cockpit.config.schema import TrainConfig
    from cockpit.models.memory import Part, Workload
    from cockpit.models.shape import ModelShape


def load_workload(args: argparse.Namespace) -> tuple[TrainConfig, ModelShape, Workload]:
    """(config, model shape, workload) from the config and flags.

    Raises ConfigError, modelshape.ShapeError (the model), estimate.EstimateError (the settings)."""
    from cockpit.config.model_fit import context_warning
    from cockpit.models import memory as est
    from cockpit.models import shape as modelshape

    cfg = config_load.load_config(args.config, workload_overrides(args), sets=args.overrides)
    shape = modelshape.load_shape(cfg.model.name, cfg.model.revision or "main")
    warning = context_warning(shape, cfg.training.max_length)
    if warning:
        print(f"config warning: {warning}", file=sys.stderr)
    return cfg, shape, est.workload_from_config(cfg, shape, args.trainer)


def cmd_estimate(args: argparse.Namespace) -> int:
    from cockpit.models import memory as est
    from cockpit.models import memory_report as estimate_report
    from cockpit.models import shape as modelshape

    try:
        cfg, shape, workload = load_workload(args)
        if args.inference:
            result = estimate_report.estimate_inference(shape, args.bits, args.context)
        else:
            result = est.estimate_memory(workload)
    except (modelshape.ShapeError, est.EstimateError) as exc:
        print(f"cannot estimate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    fits = None if args.vram is None else est.verdict(result, int(args.vram * fmt.GIB))
    if args.json:
        inputs = (
            {"model": shape.name, "bits": args.bits, "context": args.context}
            if args.inference
            else estimate_report.workload_inputs(workload)
        )
        data = estimate_report.to_dict(result, inputs)
        data["fits_vram"] = fits  # fits | tight | no | null
        print(json.dumps(data, indent=1))
        return 0
    what = "inference" if args.inference else f"{cfg.method} training ({args.trainer} trainer)"
    if not args.inference and cfg.objective != "sft":
        what = f"{cfg.method} {cfg.objective} ({args.trainer} trainer; reference: {workload.reference})"
    lines = [f"{shape.name}: {fmt.params(shape.params)} params ({shape.source}), {what}; an estimate:"]
    lines += estimate_part_lines(result.parts, output_width())
    lines.append(f"  {'peak device memory (as nvidia-smi)':<36} {_figure(result.peak_bytes)}")
    for band in getattr(result, "unsure", ()):
        lines.append(f"  {'  band top: + ' + band.key:<36} {_figure(band.bytes)}   {band.note}")
    if getattr(result, "unsure", ()):
        lines.append(f"  {'peak, top of the band':<36} {_figure(result.high_bytes)}   the fit counts this")
    lines.append(f"  {'peak while loading':<36} {_figure(result.load_peak_bytes)}")
    if fits is not None:
        words = {
            "fits": "fits",
            "tight": f"is TIGHT on (inside the {est.SAFETY_MARGIN:.0%} safety margin)",
            "no": "does NOT fit",
        }[fits]
        lines.append(f"{words} a {args.vram:g} GiB card ({args.vram - result.peak_gib:+.2f} GiB headroom)")
    print("\n".join(wrapped(lines, output_width())))
    return 0


def _figure(value: float) -> str:
    """A figure of the estimate's column: GiB, or MiB for a small part (8 wide, then the unit)."""
    return fmt.gib_or_mib(value, 8)


def estimate_part_lines(parts: Sequence[Part], width: int) -> list[str]:
    """One line per part: label, GiB, and its note wrapped under itself (or below the figure
    when the terminal leaves it less than 40 columns)."""
    import textwrap

    out = []
    for part in parts:
        head = f"  {part.label:<36} {_figure(part.bytes)}"
        room = width - len(head) - 3
        if room < 40:
            out.append(head)
            pad = "      "
            out.extend(textwrap.wrap(part.note, width - 6, initial_indent=pad, subsequent_indent=pad))
            continue
        notes = textwrap.wrap(part.note, room, break_on_hyphens=False) or [""]
        out.append(f"{head}   {notes[0]}")
        out.extend(" " * (len(head) + 3) + more for more in notes[1:])
    return out


def cmd_cards(args: argparse.Namespace) -> int:
    from cockpit.gpus import catalog
    from cockpit.models import memory as est
    from cockpit.models import shape as modelshape
    from cockpit.plan import cards_inputs, table
    from cockpit.plan import multi_rows as cards_multi
    from cockpit.plan.cards_text import table_text

    try:
        cfg, _shape, workload = load_workload(args)
        epochs = cfg.training.epochs if args.epochs is None else args.epochs
        size = cards_inputs.parse_dataset(_dataset_size(args), epochs, cfg.training.max_steps)
        counts = cards_multi.parse_gpu_counts(args.gpus)
        cards = table.card_table(workload, catalog.load_catalog(), size, args.budget, gpu_counts=counts)
    except (modelshape.ShapeError, est.EstimateError) as exc:
        print(f"cannot estimate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except cards_inputs.CardsError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except catalog.CatalogError as exc:
        print(f"card catalog: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(cards.to_dict(), indent=1) if args.json else table_text(cards, output_width()))
    return 0


def cmd_pick(args: argparse.Namespace) -> int:
    import datetime as dt

    from cockpit.gpus import catalog
    from cockpit.plan import cards_inputs

    cfg = config_load.load_config(args.config, workload_overrides(args), sets=args.overrides)
    from cockpit.cli.data_commands import config_tokens

    report = None
    try:
        dataset = dataset_text(args)
        if not dataset:  # the config's dataset, counted by the data check (cached)
            dataset, report = config_tokens(args)
        cards_catalog = catalog.load_catalog()
    except cards_inputs.CardsError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    except catalog.CatalogError as exc:
        print(f"card catalog: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from screens.picker.app import PickerApp  # the TUI, only on this branch

    app = PickerApp(
        cfg,
        catalog=cards_catalog,
        clock=dt.datetime.now,
        trainer=args.trainer,
        dataset=dataset,
        epochs=args.epochs,
        budget=args.budget,
        multi=args.multi,
        data_report=report,
        data_loader=_data_loader(cfg),
        data_source=args.config or "the default config",
    )
    app.run()
    for path in app.written:
        print(f"wrote {path}; set dataset.path in it, then start it: {cockpit_command()} train {path}")
    return 0


def _dataset_size(args: argparse.Namespace) -> str:
    """--tokens or --samples x --mean-tokens; else the config's dataset, counted by the data check."""
    given = dataset_text(args)
    if given:
        return given
    from cockpit.cli.data_commands import config_tokens

    return config_tokens(args)[0]


def _data_loader(cfg: TrainConfig) -> Callable[[], dict[str, Any] | None]:
    """The picker's `d` without a report in hand: the data check of the config's dataset."""

    def load() -> dict[str, Any] | None:
        from cockpit.datacheck.cache import cached_check

        return cached_check(cfg).report

    return load


def cmd_preflight(args: argparse.Namespace) -> int:
    from cockpit.preflight.checks.base import exit_code
    from cockpit.preflight.full import run_preflight
    from cockpit.preflight.runner import report, result_line

    model_bytes = None
    unsized = None
    if args.model:
        from cockpit.models import shape as modelshape
        from cockpit.preflight.checks.base import UnsizedModel

        try:
            model_bytes = (
                modelshape.load_shape(args.model).params * 2
            )  # the 16-bit weights to download and load
        except modelshape.HubUnavailable as exc:
            # the hub is what the preflight checks: run it all, with the model's checks saying why
            print(
                f"--model: {exc} Running every check without its size: RAM and disk for it are not judged.",
                file=sys.stderr,
            )
            fix = f"{modelshape.OFFLINE_FIX} Then run the preflight again to judge RAM and disk for it."
            unsized = UnsizedModel(args.model, exc.cause, fix)
        except modelshape.ShapeError as exc:  # a malformed id, a missing path, a 404: the flag is wrong
            print(f"--model: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if not (args.json or args.no_ui) and sys.stdout.isatty():
        from cockpit.preflight.full import full_preflight
        from screens.preflight.app import PreflightApp  # the TUI, only on this branch

        session = full_preflight(
            args.quick, model_bytes, args.multi, unsized_model=unsized, model_name=args.model
        )
        app = PreflightApp(session, quick=args.quick)
        code = app.run()
        if app.last_export is not None:
            print(f"report written to {app.last_export}")
        return 2 if code is None else code  # None: the app died; no verdict is a failure
    say = (lambda r: None) if args.json else (lambda r: print(result_line(r), flush=True))
    results, meta = run_preflight(
        args.quick,
        on_result=say,
        model_bytes=model_bytes,
        multi=args.multi,
        unsized_model=unsized,
        model_name=args.model,
    )
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
