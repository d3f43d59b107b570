"""The events panel breaks a path too long for it after a `/`, not inside a name (walkthrough
item 2: the `done` line's `/tmp/wh3/runs/20261203-090715-tin` / `y/final` at 80x24)."""

from __future__ import annotations

from textual.app import App, ComposeResult

from cockpit.plain import fold_paths
from widgets.event_log import EventLog

DONE = "  done: step 88, adapter at /tmp/wh3/runs/20261203-090715-tiny/final (loss 0.9123)"


class Log(App):
    CSS = "EventLog { width: 32; height: 10; scrollbar-size-vertical: 1; }"

    def compose(self) -> ComposeResult:
        yield EventLog(id="events", max_lines=100)


async def test_a_path_longer_than_the_panel_breaks_after_a_slash():
    app = Log()
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.query_one(EventLog)
        await pilot.pause()
        log.write(DONE)
        log.write("a line that wraps at its spaces as it always did, " * 2)
        await pilot.pause()
        rows = [strip.text.rstrip() for strip in log.lines]
        width = log.scrollable_content_region.width
        assert all(len(row) <= width for row in rows)
        path_rows = [row for row in rows if "/" in row or "tiny" in row]
        assert path_rows == ["/tmp/wh3/runs/", "20261203-090715-tiny/final"]
        # every character of the line is on screen, in order
        assert "".join(rows).replace(" ", "").startswith(DONE.replace(" ", ""))


def test_only_a_line_with_a_word_longer_than_the_panel_is_wrapped_here():
    assert fold_paths(DONE, 60) == DONE  # rich wraps it at its spaces
    assert fold_paths("naïve /a/very/long/path/with/no/room/at/all", 10) == (
        "naïve /a/very/long/path/with/no/room/at/all"  # not ASCII: left to rich
    )
    assert fold_paths("x" * 25, 10) == "x" * 10 + "\n" + "x" * 10 + "\n" + "x" * 5  # no `/`: at the width
    assert fold_paths("go /one/two\nthen /three/four/five", 7) == "go\n/one/\ntwo\nthen\n/three/\nfour/\nfive"


def test_a_figure_stays_with_its_unit():
    """At 80x24 the events panel broke `checkpoint: step 25 (12.9` / `MiB, 0.057 s)` (walkthrough):
    rich wraps at any space. A line that would be broken between a figure and its unit is wrapped
    here, the figure and its unit on one row."""
    line = "0:00:33 checkpoint: step 25 (12.9 MiB, 0.057 s) in /tmp/wh5/runs/x/checkpoints"
    for width in range(20, len(line)):
        rows = fold_paths(line, width).split("\n")
        assert all(len(row) <= width for row in rows), (width, rows)
        assert not any(row.endswith(("12.9", "0.057")) for row in rows), (width, rows)
        assert "".join(rows).replace(" ", "") == line.replace(" ", "")  # every character, in order
    assert fold_paths("loss 1.2 at step 4", 40) == "loss 1.2 at step 4"  # it fits: left alone
    assert fold_paths("took 4 steps and 3 seconds to say so", 12) == "took 4 steps and 3 seconds to say so"


async def test_lines_are_wrapped_again_when_the_panel_narrows():
    """A RichLog wraps a line once: at 60x20 with the GPU strip hidden, lines written for the wider
    panel were cut at its edge (`0:00:33 check` / `step 25 (0.01`), and the scrollbar's arrival
    took a column from lines already written."""
    app = Log()
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.query_one(EventLog)
        await pilot.pause()
        said = [
            f"{i:02d} checkpoint: step {i} (12.9 MiB, 0.057 s) in /tmp/wh5/runs/x/checkpoints"
            for i in range(12)
        ]
        for line in said:
            log.write(line)
        await pilot.pause()
        assert log.scrollable_content_region.width < 32  # the scrollbar came after the first lines
        for width in (32, 24):
            log.styles.width = width
            await pilot.pause()
            await pilot.pause()
            room = log.scrollable_content_region.width
            rows = [strip.text.rstrip() for strip in log.lines]
            assert all(len(row) <= room for row in rows), (room, rows)
            assert "".join(rows).replace(" ", "") == "".join(said).replace(" ", "")  # nothing lost
        log.clear()
        log.write("after a clear")
        log.styles.width = 30
        await pilot.pause()
        await pilot.pause()
        assert [strip.text.rstrip() for strip in log.lines] == ["after a clear"]
