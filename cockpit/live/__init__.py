"""Watching a run: the session that follows it, the folded run state, replay, the watch that
joins telemetry and the doctor, and the headless (`--no-ui`) view."""
