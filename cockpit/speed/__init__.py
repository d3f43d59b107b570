"""Speed: the speed model, FLOPs and MFU, the batch split and the `speed: auto` planner."""
