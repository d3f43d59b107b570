"""The live view's own CPU (issue 16, item 17). What it repaints per tick: the GPU and host panels
repaint the rows whose text changed and nothing when none did; a new learning rate in the loss
plot's subtitle repaints its bottom border row, not the whole plot; a tick with nothing new
repaints, restyles and lays out nothing. What it imports at start: not the OOM wizard and its
remedies until a run runs out of memory, nor the preflight checks with --skip-preflight."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

from support.pilot import (
    EVENTS,
    LAST_TS,
    ScriptedWatch,
    event,
    events_until_step,
    fake_samples,
    gpu_events,
    running,
    screen_text,
    scripted,
    shown,
    wait_for,
)
from textual.app import App, ComposeResult
from textual.dom import DOMNode
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets._footer import FooterKey

from cockpit.fmt import GIB
from cockpit.telemetry.gpu import GpuSample
from cockpit.telemetry.sampler import HostSample, Sample
from screens.run.app import CockpitApp
from screens.run.telemetry_feed import SeriesBook
from widgets.footer import Footer
from widgets.gpu_panel import GpuPanel, GpuView
from widgets.host_panel import HostPanel
from widgets.loss_plot import DOT_BITS, LossPlot, braille_cells


class Panels(App):
    CSS = "LossPlot { height: 10; border: round white; } GpuPanel, HostPanel { height: auto; }"

    def compose(self) -> ComposeResult:
        yield GpuPanel(id="gpus")
        yield HostPanel(id="host")
        yield LossPlot(id="plot")


def host(disk_read: float) -> HostSample:
    return HostSample(
        cpu_pct=50.0, ram_used_bytes=8 * GIB, ram_total_bytes=64 * GIB, disk_read_bytes_s=disk_read
    )


def gpu_sample(ts: float, power_w: float) -> Sample:
    gpu = GpuSample(0, util_pct=99.0, mem_used_bytes=60 * GIB, mem_total_bytes=80 * GIB, power_w=power_w)
    return Sample(ts, [gpu], host(1e6))


def record_refreshes(widget, calls: list) -> None:
    real = widget.refresh

    def refresh(*regions, **kwargs):
        calls.append((regions, kwargs))
        return real(*regions, **kwargs)

    widget.refresh = refresh


def gpu_run_app(tmp_path, steps: int) -> CockpitApp:
    """The run view of a scripted GPU run at `steps`, its clock stopped at the run's last event."""
    session = scripted(tmp_path, gpu_events(events_until_step(steps)))
    watch = ScriptedWatch(fake_samples(4))
    return CockpitApp(session, watch=watch, poll_interval_s=0.02, clock=lambda: LAST_TS)


def record_layouts(monkeypatch) -> list[str]:
    """The widgets that ask for a layout pass from now on (`Widget#id`, in order)."""
    layouts: list[str] = []
    real_refresh = Widget.refresh

    def refresh(self, *regions, layout=False, **kwargs):
        if layout:
            layouts.append(f"{type(self).__name__}#{self.id}")
        return real_refresh(self, *regions, layout=layout, **kwargs)

    monkeypatch.setattr(Widget, "refresh", refresh)
    return layouts


async def test_a_host_reading_repaints_only_its_changed_row_and_the_same_one_nothing():
    app = Panels()
    async with app.run_test(size=(100, 24)) as pilot:
        panel = app.query_one(HostPanel)
        panel.show(host(1e6), None, False)
        await pilot.pause()
        calls: list = []
        record_refreshes(panel, calls)
        panel.show(host(1e6), None, False)  # the host is read every other sample: the same figures
        assert calls == []
        panel.show(host(5e6), None, False)  # the disk rate is on the second row only
        assert calls == [((Region(0, 1, panel.size.width, 1),), {})]
        await pilot.pause()
        assert "read 5.0 MB/s" in panel.render_line(1).text


async def test_a_new_gpu_sample_repaints_the_rows_that_changed():
    app = Panels()
    async with app.run_test(size=(100, 24)) as pilot:
        panel, book = app.query_one(GpuPanel), SeriesBook()
        first = gpu_sample(1000.0, 600.0)
        panel.show(GpuView(first, book, None, compact=False))
        await pilot.pause()
        calls: list = []
        record_refreshes(panel, calls)
        panel.show(GpuView(gpu_sample(1000.5, 640.0), book, None, compact=False))  # power only
        (regions, _kwargs), *more = calls
        assert not more and all(region.height == 1 for region in regions)
        assert 0 < len(regions) < 3  # rows of the panel's three, not all of them
        await pilot.pause()
        assert "power 640 W" in panel.render_line(2).text


async def test_a_new_learning_rate_repaints_the_plot_border_not_the_plot():
    app = Panels()
    async with app.run_test(size=(100, 24)) as pilot:
        plot = app.query_one(LossPlot)
        losses = [(step, 3.0 - step / 10) for step in range(1, 11)]
        lrs = [(step, 1e-3 * (1 - step / 20)) for step in range(1, 11)]
        plot.plot(losses, lrs)
        await pilot.pause()
        calls: list = []
        record_refreshes(plot, calls)
        plot.plot(losses, [*lrs[:-1], (10, 4e-4)])  # the same losses, a new "now" learning rate
        full = [kwargs for regions, kwargs in calls if not regions]
        assert full == []  # no repaint of the whole plot
        border_row = plot.outer_size.height - 1 - plot.content_offset.y
        assert any(
            region.y == border_row and region.height == 1 for regions, _ in calls for region in regions
        )
        await pilot.pause()
        assert str(plot.border_subtitle).endswith("now 4.00e-04")


def test_the_run_screen_imports_the_oom_wizard_only_when_a_run_runs_out_of_memory():
    code = "import sys, screens.run.app; print(sorted(m for m in sys.modules if 'oom' in m))"
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['cockpit.run.oom_messages']"  # the event text's parser


def test_a_start_with_skip_preflight_imports_no_check_no_urllib_and_no_dialog():
    """What `cockpit train --skip-preflight` imports before the first screen: the machine check
    reads NVML through quick.NVML_SOURCE, which must not pull every preflight check (and urllib
    behind the network one); the stop question and the preflight notice come when shown."""
    code = (
        "import sys, cockpit.cli.main, screens.run.app, cockpit.live.watch\n"
        "from cockpit.preflight import machine_fit, quick\n"
        "names = ('cockpit.preflight.runner', 'cockpit.preflight.checks.gpu', 'urllib.request',\n"
        "         'screens.confirm', 'screens.preflight.notice', 'cockpit.cli.plan_commands',\n"
        "         'cockpit.results.chat_client', 'cockpit.results.targets')\n"
        "print(sorted(n for n in names if n in sys.modules))"
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_a_tick_with_nothing_new_repaints_restyles_and_lays_out_nothing(tmp_path, monkeypatch):
    """The 2 Hz tick of a run whose state, clock and sample did not move: no widget refreshed (no
    repaint, no layout pass), no class set (each restyles the node and its children), no footer
    rebuilt. Counted, not timed: a redundant update that comes back fails here."""
    session = scripted(tmp_path, gpu_events(events_until_step(30)))
    watch = ScriptedWatch(fake_samples(4))
    app = CockpitApp(session, watch=watch, poll_interval_s=0.02, clock=lambda: LAST_TS + 5.0)
    async with running(app) as pilot:
        await shown(pilot, app)
        view = app.run_view
        await wait_for(pilot, lambda: view.telemetry_shown > 0)
        await pilot.pause(0.3)
        view.show([])  # whatever the follow thread had not drawn yet
        view.show_telemetry(view.sample, watch.findings, [])
        await pilot.pause()
        counted: list[str] = []

        def counting(name, real):
            def wrapper(self, *args, **kwargs):
                counted.append(f"{name} {type(self).__name__}#{self.id}")
                return real(self, *args, **kwargs)

            return wrapper

        monkeypatch.setattr(Widget, "refresh", counting("refresh", Widget.refresh))
        monkeypatch.setattr(DOMNode, "update_node_styles", counting("restyle", DOMNode.update_node_styles))
        monkeypatch.setattr(type(view), "refresh_bindings", counting("bindings", type(view).refresh_bindings))
        for _tick in range(3):  # what on_run_updated does when nothing is new
            view.show([])
            view.show_telemetry(view.sample, watch.findings, [])
            view.show_watch_late(None)
        assert counted == []
        before = len(view.query_one("#events").lines)
        view.show(["0:00:31 a new line"])  # and a tick that has news still draws it
        assert any(name.startswith("refresh EventLog") for name in counted)
        await pilot.pause()
        assert len(view.query_one("#events").lines) > before


async def test_a_new_event_line_lays_out_nothing_and_the_log_stays_at_its_end(tmp_path, monkeypatch):
    """A line written to the events panel grows its virtual size only: the panel's size comes from
    the layout around it, so no layout pass of the screen (a RichLog asks for one at every line,
    ~10 ms of CPU at 100x30), but its scrollbar follows (shown once the lines overflow, its thumb
    at the end) and the newest line stays in view."""
    app = gpu_run_app(tmp_path, steps=30)
    async with running(app) as pilot:
        await shown(pilot, app)
        view = app.run_view
        log = view.query_one("#events")
        for n in range(log.size.height + 4):  # more lines than the panel holds: a scrollbar
            view.show([f"0:00:{n:02d} filler {n}"])
        await pilot.pause(0.2)
        assert log.show_vertical_scrollbar and log.scroll_y == log.max_scroll_y
        layouts = record_layouts(monkeypatch)
        for n in range(3):
            view.show([f"0:01:0{n} newest {n}"])
            assert log.scroll_y == log.max_scroll_y  # at once: not a frame later, the log drawn twice
            await pilot.pause(0.1)
        assert layouts == []
        assert log.scroll_y == log.max_scroll_y > 0
        assert log.vertical_scrollbar.window_virtual_size == log.virtual_size.height == len(log.lines)
        assert "newest 2" in screen_text(app)


async def test_a_status_that_offers_the_same_keys_leaves_the_footer_as_it_is(tmp_path, monkeypatch):
    """starting -> running offers the same keys: the footer is not rebuilt (each rebuild makes
    and restyles a widget per key). paused offers Resume instead of Pause: then it is."""
    training = next(i for i, e in enumerate(EVENTS) if e.get("phase") == "training")
    session = scripted(tmp_path, EVENTS[:training])
    app = CockpitApp(session, poll_interval_s=0.02, clock=lambda: LAST_TS + 5.0)
    async with running(app) as pilot:
        await shown(pilot, app)
        view = app.run_view
        await wait_for(pilot, lambda: "p Pause" in screen_text(app))
        assert view.status == "starting"
        rebuilt: list[str] = []
        real = type(view).refresh_bindings

        def refresh_bindings(self):
            rebuilt.append(self.status)
            return real(self)

        monkeypatch.setattr(type(view), "refresh_bindings", refresh_bindings)
        session.feed(events_until_step(3)[training:])
        await wait_for(pilot, lambda: view.status == "running")
        await pilot.pause()
        assert rebuilt == [] and "p Pause" in screen_text(app)
        ts = EVENTS[40]["ts"]
        session.feed([event("paused", ts, step=3)])
        await wait_for(pilot, lambda: "p Resume" in screen_text(app))
        assert rebuilt == ["paused"]


class KeysApp(App):
    """Three focusable panels and a key that is enabled only while the second has the focus."""

    BINDINGS: ClassVar = [("a", "alpha", "Alpha"), ("b", "beta", "Beta")]
    ENABLE_COMMAND_PALETTE = False

    def compose(self) -> ComposeResult:
        yield Focusable(id="one")
        yield Focusable(id="two")
        yield Focusable(id="three")
        yield Footer()

    def action_alpha(self) -> None: ...

    def action_beta(self) -> None: ...


class Focusable(Widget, can_focus=True):
    BINDINGS: ClassVar = [("c", "gamma", "Gamma")]

    def check_action(self, action: str, parameters) -> bool | None:
        return self.id == "two" or None  # elsewhere: shown, disabled

    def action_gamma(self) -> None: ...


async def test_the_footer_styles_each_key_once_and_rebuilds_only_when_its_keys_change(monkeypatch):
    """Textual's footer rebuilt every key (a widget, styled) at each bindings change, focus moving
    included, and restyled each key twice more after mounting it (compact by default, then bound
    to the footer's `compact`): a fifth of the run screen's start-up CPU."""
    restyled: list[str] = []
    real = App.update_styles

    def update_styles(self, node, animate=True):
        restyled.append(type(node).__name__)
        return real(self, node, animate)

    monkeypatch.setattr(App, "update_styles", update_styles)
    app = KeysApp()
    async with app.run_test(size=(80, 10)) as pilot:
        await pilot.pause()
        footer = app.query_one(Footer)
        keys = list(footer.query(FooterKey))
        assert [key.key for key in keys] == ["c", "a", "b"] and not footer.compact
        assert not any(key.has_class("-compact") for key in keys)
        assert "FooterKey" not in restyled
        assert keys[0].has_class("-disabled")  # the first panel has the focus

        app.query_one("#three").focus()  # the bindings change, the keys on offer do not
        await pilot.pause()
        await pilot.pause()
        assert list(footer.query(FooterKey)) == keys  # the same widgets: not rebuilt

        app.query_one("#two").focus()  # Gamma is enabled there: a new key
        await pilot.pause()
        await pilot.pause()
        rebuilt = list(footer.query(FooterKey))
        assert rebuilt[0] is not keys[0] and not rebuilt[0].has_class("-disabled")

        footer.compact = True  # still bound: the keys follow their footer
        await pilot.pause()
        assert all(key.has_class("-compact") for key in footer.query(FooterKey))


def reference_cells(points, columns, rows, steps=None, values=None):
    """braille_cells point by point, as it was before the in-order path: every point scaled."""
    dots_w, dots_h = columns * 2, rows * 4
    steps_of, values_of = [s for s, _ in points], [v for _, v in points]
    first, last = steps or (min(steps_of), max(steps_of))
    low, high = values or (min(values_of), max(values_of))
    clamp_x = min(steps_of) < first or max(steps_of) > last
    xs = [round((s - first) * (dots_w - 1) / (last - first)) if last != first else 0 for s in steps_of]
    xs = [min(dots_w - 1, max(0, x)) for x in xs] if clamp_x and last != first else xs
    ys = [round((high - v) * (dots_h - 1) / (high - low)) if high != low else dots_h // 2 for v in values_of]
    ys = [min(dots_h - 1, max(0, y)) for y in ys] if values is not None and high != low else ys
    cells = [[0] * columns for _ in range(rows)]

    def fill(x, y_from, y_to):
        for y in range(round(min(y_from, y_to)), round(max(y_from, y_to)) + 1):
            cells[y // 4][x // 2] |= DOT_BITS[y % 4][x % 2]

    previous = None
    for x, group in itertools.groupby(zip(xs, ys), key=lambda p: p[0]):
        run = [y for _, y in group]
        if previous is not None:
            x0, y0 = previous
            for column in range(min(x0, x), max(x0, x) + 1):
                t_a = min(1.0, max(0.0, (column - 0.5 - x0) / (x - x0)))
                t_b = min(1.0, max(0.0, (column + 0.5 - x0) / (x - x0)))
                fill(column, y0 + (run[0] - y0) * t_a, y0 + (run[0] - y0) * t_b)
        fill(x, min(run), max(run))
        previous = (x, run[-1])
    return cells


def test_a_long_run_in_step_order_plots_the_same_dots_as_point_by_point():
    """The loss plot takes a run's points in step order column by column (bisection), not point
    by point: the same dots, on shared axes and clamped ranges too."""
    rng = random.Random(7)
    for n in (1, 2, 7, 300, 5000):
        steps = sorted(rng.sample(range(3 * n + 10), n))
        points = [(s, rng.random() * 4 + (1.0 if rng.random() < 0.1 else 0.0)) for s in steps]
        for columns, rows in ((48, 7), (9, 2), (95, 11)):
            assert braille_cells(points, columns, rows) == reference_cells(points, columns, rows)
            axis, scale = (steps[0] + 2, steps[-1] - 2), (1.0, 3.0)  # narrower than the points
            if axis[0] < axis[1]:
                assert braille_cells(points, columns, rows, axis, scale) == reference_cells(
                    points, columns, rows, axis, scale
                )
    flat = [(s, 2.0) for s in range(50)]
    assert braille_cells(flat, 10, 3) == reference_cells(flat, 10, 3)
    out_of_order = [(s % 17, float(s % 5)) for s in range(60)]  # a restart from a checkpoint
    assert braille_cells(out_of_order, 12, 3) == reference_cells(out_of_order, 12, 3)


def test_a_panel_row_draws_as_rich_renders_it():
    """line_strip builds a row's segments straight from its spans (the panels' rows, twice a
    second); on random rows, overlapping spans and cut rows included (those go through rich), it
    draws every cell in the style rich's Text.render gives it."""
    from rich.console import Console
    from rich.style import Style
    from rich.text import Text
    from textual.strip import Strip

    from widgets.styled import line_strip

    def through_rich(text, width, base, console):
        line = Text(style=base, no_wrap=True, end="")
        line.append_text(text)
        line.truncate(width, overflow="ellipsis")
        return Strip(line.render(console), line.cell_len).extend_cell_length(width, base)

    def cells(strip):
        return [(ch, segment.style) for segment in strip for ch in segment.text]

    console, rng = Console(), random.Random(0)
    styles = [Style(color="red"), Style(bold=True), Style(color="#808080", dim=True), Style.null(), None]
    base = Style(color="white", bgcolor="#101010")
    for _ in range(2000):
        text = Text()
        for _ in range(rng.randint(0, 6)):
            piece = "".join(rng.choice("ab █▁▃⣿ 12.3%") for _ in range(rng.randint(0, 12)))
            text.append(piece, rng.choice(styles))
        if rng.random() < 0.2:
            text.stylize(Style(italic=True), 0, rng.randint(0, 10))
        if rng.random() < 0.2:
            text.style = rng.choice(styles[:4])
        width = rng.randint(5, 60)
        drawn = cells(line_strip(text, width, base, console))
        assert drawn == cells(through_rich(text, width, base, console))


async def test_a_new_phase_repaints_the_header_line_without_a_layout(tmp_path, monkeypatch):
    """The phase line (1fr of the header's one row) and a status label of the same width do not
    change the header's layout: a new text repaints them, no layout pass of the screen; a status
    of another width lays the header out again."""
    app = gpu_run_app(tmp_path, steps=3)
    async with running(app) as pilot:
        await shown(pilot, app)
        view = app.run_view
        layouts = record_layouts(monkeypatch)
        for n in range(3):
            view._set_text("#phase", f"loading the model: shard {n + 1} of 3")
            await pilot.pause()
        status = view._texts["#status"]
        view._set_text("#status", "x" * len(status))  # as wide as the status it replaces
        assert layouts == []
        assert "shard 3 of 3" in screen_text(app)
        view._set_text("#status", status + "  ")
        assert layouts == ["Static#status"]
