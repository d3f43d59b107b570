"""The preflight checks, one module per area; `base` holds the result type and exit codes."""
