"""The preflight screen, its export dialog, and the notice shown over a run."""
