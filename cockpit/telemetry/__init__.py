"""GPU (NVML) and host (psutil) telemetry: the sampler, its history file, the recorder that
writes it beside the trainer, and the watchdog that keeps a stuck driver call from freezing it."""
