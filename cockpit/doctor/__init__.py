"""The doctor: rules over a window of telemetry and training events that name a bottleneck
and its fix. Pure Python."""
