"""The OOM wizard: where the memory went and the ranked remedies."""
