"""The end of a run and the money around it: the budget (cost.max_usd), the end command
(cost.on_end) and its runner, the idle alarm (cost.idle_minutes, cost.on_idle), the summary
a run's end prints, and the runs list with the disk it frees. Pure logic, no torch, no textual;
the process that runs on_end is `python -m cockpit.finish.end_runner`.
"""
