"""The GPU catalog: cards, their figures and sources, and the user's own cards."""
