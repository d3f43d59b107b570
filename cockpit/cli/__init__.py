"""The command line: argument parsing, the commands, and the lazy start of the TUI (the one
composition root that reaches up into `screens`)."""
