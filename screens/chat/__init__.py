"""The chat screen: `cockpit chat RUN` on a terminal."""
