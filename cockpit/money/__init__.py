"""Money: the budget, the idle watch and alarm, and the end runner (cost.on_end)."""
