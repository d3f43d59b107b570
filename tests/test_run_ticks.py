"""The run app's ticks (screens/run/messages.py): a tick still queued gives way to the next one,
which carries what it brought, so a burst behind a busy screen is drawn once and nothing is lost."""

from __future__ import annotations

import threading
import time

from support.pilot import (
    events_until_step,
    fake_samples,
    make_app,
    running,
    scripted,
    shown,
    wait_for,
)

from screens.run.messages import RunUpdated
from screens.run.telemetry_feed import WatchNews


def test_a_queued_tick_gives_way_to_the_next_and_hands_it_what_it_brought():
    first, second = fake_samples(count=2)
    older = RunUpdated(["0:00:01 a"], ["log a"], None, telemetry=WatchNews(first, [], [first]))
    newer = RunUpdated(["0:00:02 b"], None, 4.0, events=False, telemetry=WatchNews(second, [], [second]))
    assert older.can_replace(newer)
    assert newer.lines == ["0:00:01 a", "0:00:02 b"] and newer.log_tail == ["log a"]
    assert newer.events and newer.watch_late_s == 4.0 and not newer.rewound
    assert newer.telemetry.sample is second and newer.telemetry.samples == [first, second]


def test_a_tick_after_a_rewind_drops_the_lines_from_before_it():
    older = RunUpdated(["0:01:00 later"], telemetry=None)
    newer = RunUpdated(["0:00:01 again"], rewound=True)
    assert older.can_replace(newer)
    assert newer.lines == ["0:00:01 again"] and newer.rewound
    news_only = RunUpdated([], events=False, telemetry=WatchNews(None, [], [], "the watch failed"))
    assert RunUpdated(["x"]).can_replace(news_only) and news_only.events and news_only.lines == ["x"]


def test_a_tick_does_not_replace_another_message():
    from screens.run.messages import HistoryLoaded

    assert not RunUpdated(["x"]).can_replace(HistoryLoaded([]))


async def test_ticks_that_pile_up_behind_a_busy_screen_are_drawn_once_with_every_line(tmp_path):
    session = scripted(tmp_path, events_until_step(10))
    app = make_app(session)
    posted: list[RunUpdated] = []
    post = app.post_message

    def counting_post(message):
        if isinstance(message, RunUpdated):
            posted.append(message)
        return post(message)

    app.post_message = counting_post
    later = events_until_step(30)[len(events_until_step(10)) :]
    async with running(app) as pilot:
        await shown(pilot, app)
        drawn_before, posted_before = app.run_view.updates_shown, len(posted)

        def feed():
            for item in later:
                session.feed([item])
                time.sleep(0.005)

        feeder = threading.Thread(target=feed)
        feeder.start()
        time.sleep(0.4)  # the screen is busy (the UI thread blocked): the follow worker reads on
        feeder.join()
        piled_up = len(posted) - posted_before
        await wait_for(pilot, lambda: app.run_view.query_one("#progress").step == 30)
        await pilot.pause()
        drawn = app.run_view.updates_shown - drawn_before
        events_log = [strip.text.rstrip() for strip in app.run_view.query_one("#events").lines]
    assert piled_up >= 3 and drawn < piled_up  # the burst was drawn once, not tick by tick
    # every line once: none lost with the ticks that gave way, none written twice
    assert sum("checkpoint: step 25" in line for line in events_log) == 1
