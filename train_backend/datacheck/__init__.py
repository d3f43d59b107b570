"""The data check (`cockpit data`, and before `cockpit train` makes a run directory): the dataset
read as the trainer will read it, streamed in bounded memory, with the model's tokenizer alone.

    python -m train_backend.datacheck < resolved-config.yaml

prints `data_check_progress` messages and one `data_check` message holding the report
(docs/data.md says what it checks, in what order, and each message).
"""

REPORT_VERSION = 1  # the report's shape (check.py for SFT, pairs.py for the preference objectives)
