"""A run copied off the machine as it is written (`output.sync`), and rebuilt from that copy on
another (`cockpit restart --from`): docs/guide.md, "A run that survives losing the box"."""
