"""The Textual app and its screens, each `name.py` with its `name.tcss` beside it.

Screens read the cockpit core (`cockpit.run.state`, `cockpit.live.session`, `cockpit.fmt`)
and never import torch; `cockpit.cli.main` is the only module that imports them.
"""
