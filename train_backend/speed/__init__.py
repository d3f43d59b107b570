"""What `speed: auto` turns on in the trainer: fused LoRA layers and MLP block, unpacked
4-bit scales, host-memory checkpointing, and the host probe."""
