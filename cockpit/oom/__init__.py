"""Out of memory: parsing the messages, the ranked remedies, and the relaunch from the last checkpoint."""
