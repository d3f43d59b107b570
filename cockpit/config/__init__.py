"""The run config: its schema with defaults (`schema`) and loading and validating a YAML file (`load`)."""
