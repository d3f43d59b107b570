"""A run on disk and its process: the run directory, the events journal, starting, commanding
and stopping the trainer, folding its status, ranks of several GPUs, the checkpoint disk guard."""
