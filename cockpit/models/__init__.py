"""What a model needs: its shape from config.json (`shape`, `shipped`), the memory model
(`memory`, `memory_report`) and the speed model (`speed`, `speed_multi`). Pure Python."""
