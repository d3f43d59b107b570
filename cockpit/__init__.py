"""lora-cockpit: a terminal cockpit for LoRA/QLoRA fine-tuning on a rented GPU.

The core package imports neither textual nor torch at module level: the UI process
stays small and starts fast, and anything that needs torch runs in `train_backend`.
"""

__version__ = "0.1.0"
