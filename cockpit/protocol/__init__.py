"""The JSON-lines protocol between the cockpit and the trainer: the wire format (`wire`) and
the event types (`events`)."""
