"""Issue 43, finding 7: on a terminal 80 columns wide, every line a command prints is broken at a
word (never `set dataset.path in i` / `t`), a path stays whole, and a progress bar drawn in place
fits its row and is taken away when the export ends without finishing it."""

from __future__ import annotations

import io

from cockpit.cli import main as cli_main
from cockpit.plain import WrappedOutput
from cockpit.results.export import Progress

WIDTH = 80


class Terminal(io.StringIO):
    """What an 80-column terminal was sent."""

    def isatty(self) -> bool:
        return True


def words_whole(sent: str, printed: str) -> bool:
    return sent.split() == printed.split()


def test_a_long_line_is_broken_at_words_and_a_path_is_kept_whole():
    terminal = Terminal()
    out = WrappedOutput(terminal, width=lambda: WIDTH)
    path = "/home/someone/runs/20261207-041500-smollm2-135m/exports/final-merged-bf16-q8_0"
    line = (
        "wrote picked.yaml; set dataset.path in it, then start it: .venv/bin/cockpit train picked.yaml"
        f" (the merged model of the logits' check is in {path})"
    )
    out.write(line + "\n")
    out.write("a prompt without its end: ")
    assert terminal.getvalue().count("\n") >= 2 and "a prompt" not in terminal.getvalue()
    out.flush()
    printed = terminal.getvalue()
    assert words_whole(line + " a prompt without its end:", printed)
    assert all(len(row) <= WIDTH for row in printed.splitlines() if path not in row)
    assert any(path in row for row in printed.splitlines())  # on one row, whole


def test_the_cli_wraps_a_config_error_on_a_terminal(tmp_path, monkeypatch, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(
        "model: {name: 'synthetic:tiny'}\ntraining: {micro_batch_sise: 4}\ndataset: {path: demo}\n"
    )
    terminal = Terminal()
    monkeypatch.setattr(cli_main.sys, "stderr", terminal)
    monkeypatch.setattr(cli_main, "terminal_width", lambda stream: WIDTH if stream is terminal else None)
    monkeypatch.setattr("cockpit.plain.terminal_width", lambda stream: WIDTH if stream is terminal else None)
    assert cli_main.main(["estimate", str(config)]) != 0
    printed = terminal.getvalue()
    assert "unknown key 'training.micro_batch_sise'" in printed and len(printed.splitlines()) > 1
    assert all(len(row) <= WIDTH for row in printed.splitlines())


def test_a_progress_bar_fits_its_row_and_is_taken_away_when_left_unfinished(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr("cockpit.results.export.terminal_width", lambda stream: WIDTH)
    progress = Progress(terminal)
    message = "loading the base model's weights from the hub cache, shard by shard, then the adapter"
    progress.update({"stage": "load", "done": 0, "total": 3, "unit": "shards", "message": message})
    drawn = terminal.getvalue().split("\x1b[2K")[-1]
    assert 0 < len(drawn) < WIDTH and drawn.endswith("…")
    progress.clear()
    assert terminal.getvalue().endswith("\r\x1b[2K")
    progress.update({"stage": "load", "done": 3, "total": 3, "finished": True, "elapsed_s": 1.5})
    assert terminal.getvalue().endswith("done in 1.5 s\n")


def test_a_progress_lines_end_and_a_check_line_are_broken_at_words_on_the_terminal(monkeypatch):
    """The export's `check` line (`of the logi` / `ts'` at 80 columns in this walk) goes through
    the CLI's WrappedOutput like any other line, once the bar before it is taken away."""
    terminal = Terminal()
    monkeypatch.setattr("cockpit.results.export.terminal_width", lambda stream: WIDTH)
    progress = Progress(WrappedOutput(terminal, width=lambda: WIDTH))
    progress.tty = True
    said = (
        "merged vs base + adapter (bf16, cpu): RMS Δlogit 3.79e-03 of the logits' RMS over 39 positions "
        "of 3 inputs (tolerance 6e-02); the adapter itself moves them by 1.01e+00: passed"
    )
    progress.warning(said)
    rows = terminal.getvalue().split("\x1b[2K")[-1].splitlines()
    assert len(rows) > 1 and all(len(row) <= WIDTH for row in rows)
    assert " ".join(" ".join(rows).split()) == f"warning: {said}"


def test_the_data_checks_progress_fits_its_row_and_is_taken_away(monkeypatch):
    """`checking the data: ...` drawn in place on a terminal stayed behind the lines after it; now
    it is one row, cut to the width, and taken away when the check is done."""
    from cockpit.cli import data_commands

    terminal = Terminal()
    monkeypatch.setattr(data_commands.sys, "stderr", terminal)
    monkeypatch.setattr(data_commands, "terminal_width", lambda stream: WIDTH)
    monkeypatch.setattr(data_commands, "PROGRESS_AFTER_S", 0.0)
    progress = data_commands._Progress()
    source = "/data/" + "very-long-folder-name/" * 4 + "train.jsonl"
    progress({"source": source, "rows_read": 120000, "bytes_read": 2**30, "bytes_total": 2**31})
    drawn = terminal.getvalue().split("\r")[-1].replace("\x1b[K", "")
    assert drawn.startswith("checking the data: source") and len(drawn) < WIDTH and drawn.endswith("…")
    progress.done()
    assert terminal.getvalue().endswith("\r\x1b[K")
