"""Textual widgets the screens are built from: plots, panels, progress lines.

Each widget draws from plain data handed to it (a list of points, rows of text) and
never reads a run or a session itself; its colours come from component classes that
the app's stylesheet sets.
"""
