"""The data check, client side: run `train_backend.datacheck` in a subprocess (`client.py`), keep
its reports (`cache.py`), the run's time and cost from its tokens (`run_cost.py`), and the report
as plain text (`text.py`)."""
