"""After training: the samples a run wrote (before and after), chatting with what it trained, and
exporting it (merge, safetensors, GGUF, model card, push); and the money around the end: the
budget (cost.max_usd), the end command (cost.on_end) and its runner, the idle alarm
(cost.idle_minutes, cost.on_idle), the summary a run's end prints, and the runs list with the
disk it frees.

Plain Python, no torch and no textual: the model side runs in `train_backend.chat` and
`train_backend.export`, subprocesses; the process that runs on_end is
`python -m cockpit.finish.end_runner`.
"""
