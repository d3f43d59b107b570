"""The training subprocess: torch, transformers, peft, bitsandbytes, trl, datasets.

It speaks only the JSON-lines protocol (cockpit.protocol.wire) on its real stdout, which
the launcher points at the run's events.jsonl; library output goes to backend.log.
It never imports textual, `screens` or `widgets`.
"""
