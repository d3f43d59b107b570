"""What comes after training: export (merge, safetensors, GGUF, model card, push)."""
