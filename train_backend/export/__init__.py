"""The export subprocess: merge an adapter into its base, write safetensors and GGUF (cockpit export)."""
