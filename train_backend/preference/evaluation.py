"""The preference run's eval: TRL's own evaluate over the held-out rows (the loss of the objective,
and for pairs the reward accuracy: how often the chosen answer's reward beats the rejected one's),
before step 1, every eval.steps and at the end; `eval` (for the best checkpoint) and
`preference_eval` events."""

from __future__ import annotations

import time

from train_backend.evaluation import Evaluator
from train_backend.preference.metrics import figures


class PreferenceEvaluator(Evaluator):
    """Evaluator whose eval pass is the trainer's evaluate on the held-out rows; the samples are the
    base's (the init_from adapter's model, where there is one) and the trained model's answers."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        # the model before training is the init_from adapter's, not the bare base
        self.base_without_adapter = not self.cfg.init_from

    def run_eval(self, step: int, stage: str) -> float | None:
        if self.evaluation is None or self.trainer is None:
            return None
        self.emitter.emit("busy", what="eval", step=step)
        started = time.perf_counter()
        control, model = self.trainer.control, self.trainer.model
        wanted, training = (control.should_log, control.should_save), model.training
        metrics = self.trainer.evaluate()
        # evaluate() logs its metrics, and on_log clears should_log: the step's own log (and save),
        # due after this callback, would be skipped; and it leaves the model in eval mode, where TRL's
        # log() files the step's training figures as eval ones
        self.trainer.control.should_log = self.trainer.control.should_log or wanted[0]
        self.trainer.control.should_save = self.trainer.control.should_save or wanted[1]
        if training:
            model.train()
        loss = metrics.get("eval_loss")
        loss = self.aids.eval_loss(
            self.passes, float(loss) if isinstance(loss, (int, float)) else float("nan")
        )
        self.passes += 1
        self.tracker.add(step, loss)
        if self.early is not None and stage != "final":  # eval.early_stop_patience, on the objective's loss
            self.early.feed(step, loss)
        best = self.tracker.best()
        best_ckpt = self.tracker.best_checkpoint([p.name for p in self.trainer_checkpoints()])
        took = round(time.perf_counter() - started, 3)
        rows = len(self.evaluation.input_ids)
        self.emitter.emit(
            "eval",
            step=step,
            stage=stage,
            eval_loss=round(loss, 6) if loss == loss else loss,
            eval_samples=rows,
            eval_tokens=None,
            eval_s=took,
            best_step=best[0] if best else None,
            best_eval_loss=round(best[1], 6) if best else None,
            best_checkpoint=best_ckpt[0] if best_ckpt else None,
            **(self.early.event_fields() if self.early is not None and stage != "final" else {}),
        )
        self.emitter.emit(
            "preference_eval",
            step=step,
            stage=stage,
            objective=self.cfg.objective,
            eval_loss=round(loss, 6) if loss == loss else None,
            eval_rows=rows,
            eval_s=took,
            **figures(metrics, "eval_"),
        )
        return loss
