"""Is this box set up right: the check runner, the quick check before a run, the full
preflight, the probe subprocess client, and the checks themselves (`checks/`)."""
