"""Choosing a card and a step shape: the GPU catalog, what fits which card, the card table of
the picker and `cockpit cards`, and the `speed: auto` plan. Pure Python."""
