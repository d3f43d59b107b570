"""Results: samples, chat, export, the model card, the runs list and the end summary."""
