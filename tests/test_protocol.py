"""The channel's framing: every fault is reported and none crashes the reader."""

from __future__ import annotations

import json
import math

from cockpit.protocol.wire import PROTOCOL_VERSION, Fault, LineDecoder, decode_line, encode, number
from cockpit.run.journal import EventFollower
from cockpit.run.state import RunState


def kinds(items) -> list[str]:
    return [i.kind if isinstance(i, Fault) else i["type"] for i in items]


def test_encode_is_one_versioned_line():
    line = encode("log", step=3, loss=1.5)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    msg = json.loads(line)
    assert msg["v"] == PROTOCOL_VERSION and msg["type"] == "log" and isinstance(msg["ts"], float)


def test_partial_lines_wait_for_their_end():
    decoder = LineDecoder()
    line = encode("phase", phase="training")
    assert decoder.feed(line[:5]) == []
    assert decoder.feed(line[5:-1]) == []
    assert kinds(decoder.feed(line[-1:] + encode("log", step=1)[:3])) == ["phase"]
    assert decoder.pending_bytes == 3


def test_non_json_line_is_reported_and_the_stream_goes_on():
    items = LineDecoder().feed(b"Loading checkpoint shards: 100%\n" + encode("log", step=1))
    assert kinds(items) == ["not_json", "log"]
    assert "Loading checkpoint" in items[0].preview


def test_overlong_line_is_skipped_even_across_feeds():
    decoder = LineDecoder(max_line_bytes=100)
    items = decoder.feed(b"x" * 80)
    items += decoder.feed(b"y" * 80)  # now over the limit without a newline
    items += decoder.feed(b"z" * 500 + b"\n" + encode("done", status="finished"))
    assert kinds(items) == ["overlong", "done"]


def test_overlong_complete_line_in_one_feed():
    items = LineDecoder(max_line_bytes=50).feed(b'{"v":1,"type":"log","pad":"' + b"a" * 100 + b'"}\n')
    assert kinds(items) == ["overlong"]


def test_not_an_object_no_type_other_version_bad_utf8():
    data = b"[1,2]\n" + b'{"v":1}\n' + b'{"v":99,"type":"log"}\n' + b"\xff\xfe\n"
    assert kinds(LineDecoder().feed(data)) == ["not_object", "no_type", "bad_version", "bad_utf8"]


def test_blank_lines_are_ignored():
    assert LineDecoder().feed(b"\n\n  \n") == []


def test_writer_dying_mid_line_is_reported_at_finish():
    decoder = LineDecoder()
    decoder.feed(encode("log", step=1) + b'{"v":1,"type":"lo')
    rest = decoder.finish()
    assert kinds(rest) == ["truncated"]
    assert decoder.finish() == []


def test_unknown_type_is_reported_not_fatal():
    state = RunState()
    state.apply(decode_line(encode("telemetry_v9", x=1).strip()))
    state.apply(decode_line(encode("log", step=2, total_steps=4, loss=1.0).strip()))
    assert state.step == 2
    assert any("unknown type 'telemetry_v9'" in n for n in state.notices)


def test_faults_reach_the_state_as_notices():
    state = RunState()
    for item in LineDecoder().feed(b"garbage\n"):
        state.apply(item)
    assert state.faults == 1 and "not_json" in state.notices[-1]


def test_non_finite_numbers_round_trip():
    msg = decode_line(encode("log", loss=float("nan"), grad_norm=float("inf")).strip())
    assert msg["loss"] == "NaN" and math.isnan(number(msg["loss"]))
    assert number(msg["grad_norm"]) == math.inf
    assert number(True) is None and number("x") is None


def test_follower_reads_history_then_appended_pieces(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(encode("hello", pid=1) + encode("phase", phase="training"))
    follower = EventFollower(path)
    assert kinds(follower.poll()) == ["hello", "phase"]
    line = encode("log", step=1)
    with open(path, "ab") as f:
        f.write(line[:10])
        f.flush()
        assert follower.poll() == []
        f.write(line[10:] + b"not json\n" + b'{"v":1,"type":"do')
    assert kinds(follower.poll()) == ["log", "not_json"]
    assert kinds(follower.finish()) == ["truncated"]
    follower.close()


def test_emitter_survives_a_full_disk_and_a_gone_reader(monkeypatch):
    import errno
    import os

    from train_backend.channel import Emitter

    read_fd, write_fd = os.pipe()
    emitter = Emitter(write_fd, secrets=["hf_secretvalue123"])
    real_write = os.write
    full = {"on": True}

    def write(fd, data):
        if fd == write_fd and full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    emitter.emit("log", step=1)  # lost, not fatal
    full["on"] = False
    emitter.emit("log", step=2, note="token hf_secretvalue123")
    assert emitter.dropped == 1 and not emitter.broken
    line = os.read(read_fd, 4096)
    assert b'"step":2' in line and b"hf_secretvalue123" not in line and b"***" in line
    os.close(read_fd)
    emitter.emit("log", step=3)  # EPIPE: the reader is gone
    assert emitter.broken
    os.close(write_fd)


def test_an_events_file_that_refuses_events_sends_them_to_the_fallback_and_asks_to_stop(
    tmp_path, monkeypatch
):
    """events.jsonl made immutable (`chattr +i`: EPERM) or replaced mid-run: the trainer went on
    'without events' and its record ended there. Now they go on in events-fallback.jsonl, which the
    readers read after it, and the run is asked to stop (with a checkpoint), once."""
    import errno
    import os

    from cockpit.run import journal
    from train_backend.channel import Emitter

    events, fallback = tmp_path / "events.jsonl", tmp_path / "events-fallback.jsonl"
    fd = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    emitter = Emitter(fd, secrets=[])
    lost = []
    emitter.keep_record(
        events, fallback, lambda why: (lost.append(why), emitter.emit("warning", message=why))
    )
    emitter.emit("log", step=1)
    real_write = os.write

    def immutable(to, data):
        if to == fd:
            raise OSError(errno.EPERM, "Operation not permitted")
        return real_write(to, data)

    monkeypatch.setattr(os, "write", immutable)
    emitter.emit("log", step=2)
    emitter.emit("done", status="stopped", step=2)
    assert lost == ["events.jsonl cannot be written (Operation not permitted)"] and not emitter.broken
    steps = [e.get("step") for e in journal.read_all(events) if e["type"] in ("log", "done")]
    assert steps == [1, 2, 2]  # read on from the fallback
    assert journal.fold(events).status == "stopped"
    monkeypatch.setattr(os, "write", real_write)
    os.chmod(events, 0o400)  # a client's record goes there too when the file refuses it
    monkeypatch.setattr(journal.os, "open", _refusing(events, journal.os.open))
    journal.append(events, "exit", reason="test")
    assert journal.last_event(events, "exit")["reason"] == "test"
    assert "exit" not in events.read_text()

    # another file put in its place: found by its identity, before the write that would be lost
    fd2 = os.open(tmp_path / "other.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
    moved, fallback2 = tmp_path / "b" / "events.jsonl", tmp_path / "b" / "events-fallback.jsonl"
    moved.parent.mkdir()
    emitter2 = Emitter(fd2, secrets=[])
    lost.clear()
    emitter2.keep_record(moved, fallback2, lost.append)
    moved.write_text("")  # not the file fd2 writes to
    emitter2.record._checked = -1e9
    emitter2.emit("log", step=3)
    assert lost == ["events.jsonl was replaced by another file"]
    assert '"step":3' in fallback2.read_text() and "replaced" in fallback2.read_text()


def _refusing(path, real_open):
    import errno

    def open_(name, flags, *args):
        if str(name) == str(path):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(name))
        return real_open(name, flags, *args)

    return open_


def test_one_money_format_for_the_picker_and_the_run_view():
    from cockpit import fmt

    assert [fmt.money(v) for v in (None, 0.004, 0.0, 0.62, 1234.5, float("nan"))] == [
        "-",
        "$0.0040",
        "$0.00",
        "$0.62",
        "$1,234",
        "-",
    ]
    # below a dollar two significant digits, so a larger cost never shows fewer: a 39-s demo at
    # $1.20/h beside a 27-s one (`cockpit runs`' column) was "$0.01" beside "$0.0091"
    assert [fmt.money(s * 1.2 / 3600) for s in (39, 27)] == ["$0.013", "$0.0090"]
    assert [fmt.money(v) for v in (0.0999, 0.05, 0.996, 1.234, 0.0000667)] == [
        "$0.10",
        "$0.050",
        "$1.00",
        "$1.23",
        "$0.0001",
    ]
    assert fmt.rate(1_000_000) == "1.00M" and fmt.rate(12_345) == "12.3k" and fmt.rate(150) == "150"
    assert fmt.gib(3 * fmt.GIB, 1) == "3.0 GiB" and fmt.gib(1.5 * fmt.GIB, 2, "", sign=True) == "+1.50"


def test_the_protocol_doc_table_is_generated_from_the_event_types():
    from conftest import ROOT

    from cockpit.protocol.events import markdown_table

    doc = (ROOT / "docs" / "protocol.md").read_text()
    generated = doc.split("<!-- events:begin -->\n", 1)[1].split("<!-- events:end -->", 1)[0]
    assert generated == markdown_table(), "run: python -m cockpit.protocol.events, paste between the marks"


def test_every_event_type_has_its_fields_declared_and_documented():
    from conftest import ROOT

    from cockpit.protocol.events import EVENTS, fields
    from cockpit.protocol.wire import EVENT_TYPES

    assert set(EVENTS) == EVENT_TYPES
    doc = (ROOT / "docs" / "protocol.md").read_text()
    for event_type in EVENTS:
        assert f"### `{event_type}`" in doc or f"`{event_type}`" in doc.split("## Events", 1)[1]
        assert all(meaning for _, meaning in fields(event_type).values()), event_type


def test_the_recorded_runs_carry_only_declared_fields():
    from conftest import FIXTURES

    from cockpit.protocol.events import undeclared

    seen = set()
    for line in (FIXTURES / "demo_run_events.jsonl").read_text().splitlines():
        event = json.loads(line)
        seen.add(event["type"])
        assert undeclared(event) == [], event
    assert {"hello", "log", "checkpoint", "done"} <= seen
    assert undeclared({"v": 1, "type": "log", "ts": 1.0, "step": 1, "lossy": 2}) == ["lossy"]
