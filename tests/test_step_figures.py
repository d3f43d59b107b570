"""speed.read_figures: at_log (train_backend/step_figures.py): a step's figures stay on the device until
the step is logged. The same run with each_micro_batch and with at_log logs the same numbers to the
bit, and inside an optimizer step the at_log trainer reads no tensor at all, where TRL's and HF's read
several each micro-batch (counted by the test aid count_reads); the speed model then lets the host's
launches overlap the device's work across forward and backward."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from conftest import cockpit, events, write_config

from cockpit.config.load import config_from_dotted
from cockpit.models.memory import Workload, workload_from_config
from cockpit.models.shape import load_shape
from cockpit.speed import model as speed_model
from train_backend import test_aids
from train_backend.step_figures import READS_FILE, FiguresAtLog, _mean_or_zero

MASKS = "transformers/masking_utils.py"
TRAINED = (
    "loss",
    "grad_norm",
    "learning_rate",
    "entropy",
    "mean_token_accuracy",
    "num_tokens",
    "trained_tokens",
)


def _run(tmp_path, env, read_figures: str):
    folder = tmp_path / read_figures
    folder.mkdir()
    env = {**env, "COCKPIT_HOME": str(folder / "home"), **test_aids.environ(count_reads=True)}
    config = write_config(
        folder / "c.yaml",
        {
            "speed.read_figures": read_figures,
            # packed rows: no attention mask, whose padding transformers' SDPA mask reads once a
            # forward (masking_utils._ignore_causal_mask_sdpa), with at_log as without
            "training.packing": True,
            "training.micro_batch_size": 2,
            "training.gradient_accumulation_steps": 3,
            "training.max_steps": 6,
            "training.logging_steps": 3,
            "output.save_steps": 6,
        },
    )
    proc = cockpit(["train", str(config), "--no-ui", "--skip-preflight"], env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = (folder / "home" / "runs").iterdir()
    state = json.loads((run / "checkpoints" / "checkpoint-6" / "trainer_state.json").read_text())
    history = [{k: e[k] for k in TRAINED if k in e} for e in state["log_history"] if "loss" in e]
    reads = [json.loads(line) for line in (run / READS_FILE).read_text().splitlines()]
    # a line per micro-batch: the reads since the one before, by file; the same step as the line before:
    # no optimizer step, log or batch fetch between them, only that micro-batch's forward and backward
    within = [b["reads"] for a, b in itertools.pairwise(reads) if a["step"] == b["step"]]
    return events(run), history, within


@pytest.mark.slow
def test_at_log_logs_the_same_figures_and_leaves_only_the_models_read_in_a_step(tmp_path, env):
    eager_events, eager, eager_reads = _run(tmp_path, env, "each_micro_batch")
    late_events, late, late_reads = _run(tmp_path, env, "at_log")
    assert [e["step"] for e in _steps(eager_events)] == [1, 3, 6] and set(TRAINED) <= set(eager[-1]), eager
    assert late == eager  # to the bit: loss, entropy, accuracy, tokens, the gradient norm
    fields = ("step", "loss", "grad_norm", "tokens_seen", "trained_tokens_seen")
    logs = [
        [{k: e[k] for k in fields} for e in evs if e["type"] == "log"] for evs in (eager_events, late_events)
    ]
    assert logs[0] == logs[1] and len(logs[0]) == len(eager) == 3
    # 6 steps of 3 micro-batches: 2 windows inside each step
    assert len(eager_reads) == len(late_reads) == 12
    # the model's forward reads the packed rows' position_ids once, to find where each sequence starts,
    # whichever way the figures are read (transformers' masking_utils); apart from it, TRL's metrics,
    # the token counts and HF's nan check read several times a micro-batch, and at_log never
    model_reads = [{MASKS: 1}] * 12
    assert [{k: n for k, n in r.items() if k == MASKS} for r in eager_reads] == model_reads, eager_reads
    assert all(sum(n for k, n in r.items() if k != MASKS) >= 4 for r in eager_reads), eager_reads
    assert late_reads == model_reads, late_reads
    plan = next(e for e in late_events if e["type"] == "speed_plan")
    (choice,) = [c for c in plan["choices"] if c["name"] == "step figures"]
    assert choice["value"] == "at logging steps" and choice["source"] == "auto"  # the default
    assert plan["read_figures"] == "at_log"  # what a bench records of the plan (bench/common.py)
    eager_plan = next(e for e in eager_events if e["type"] == "speed_plan")
    assert eager_plan["read_figures"] == "each_micro_batch"
    (choice,) = [c for c in eager_plan["choices"] if c["name"] == "step figures"]
    assert choice["value"] == "each micro-batch" and choice["source"] == "yours"


def _steps(evs: list[dict]) -> list[dict]:
    return [e for e in evs if e["type"] == "log"]


class _Loop:
    """What FiguresAtLog.training_step finds above it: transformers' Trainer state and the loss."""

    def __init__(self, loss: float):
        self.loss = torch.tensor(loss, dtype=torch.bfloat16)

    def training_step(self, model, inputs, num_items_in_batch=None):
        return self.loss


class _Trainer(FiguresAtLog, _Loop):
    def __init__(self, loss: float, read_figures: str = "at_log"):
        super().__init__(loss)
        self.cfg = config_from_dotted({"speed.read_figures": read_figures})
        self.args = SimpleNamespace(logging_nan_inf_filter=read_figures != "at_log")
        self.state = SimpleNamespace(global_step=7)
        self._globalstep_last_logged = 4
        self._tr_loss = torch.tensor(2.5)


@pytest.mark.parametrize("loss", [1.25, math.nan, math.inf, -math.inf])
def test_the_nan_filter_on_the_device_adds_what_hfs_adds(loss):
    trainer = _Trainer(loss)
    added = trainer.training_step(None, {})
    # HF Trainer's inner loop with logging_nan_inf_filter: a nan/inf step adds the average since the log
    tr_loss = trainer._tr_loss.clone()
    step = trainer.loss
    hf = tr_loss / (1 + 7 - 4) if bool(torch.isnan(step) or torch.isinf(step)) else step
    assert torch.equal(tr_loss + added, tr_loss + hf)
    eager = _Trainer(loss, "each_micro_batch")  # HF's own filter reads the loss: left as it is
    assert eager.training_step(None, {}) is eager.loss


def test_the_figures_on_the_device_read_as_trls_item_gives_them():
    trainer = _Trainer(1.0)
    entropy = torch.tensor(3.0, dtype=torch.float32) / torch.tensor(7)
    accuracy = torch.tensor(5) / torch.tensor(7)
    trainer._metrics = {
        "train": {
            "entropy": [0.5, _mean_or_zero(entropy * 7, torch.tensor(7))],
            "mean_token_accuracy": [
                _mean_or_zero(torch.tensor(5), torch.tensor(7)),
                _mean_or_zero(torch.tensor(0), torch.tensor(0)),
            ],
            "trained_tokens": [torch.tensor([40]).sum()],
        },
        "eval": {},
    }
    trainer._total_train_tokens = torch.tensor(96) + 31
    trainer._metrics["train"]["num_tokens"] = [trainer._total_train_tokens]
    trainer._read_figures()
    train = trainer._metrics["train"]
    assert train["entropy"] == [0.5, entropy.item()]
    assert train["mean_token_accuracy"] == [accuracy.item(), 0.0]
    assert train["trained_tokens"] == [40] and type(train["trained_tokens"][0]) is int
    assert trainer._total_train_tokens == 127 and train["num_tokens"] == [127]


def test_the_speed_model_overlaps_forward_and_backward_where_figures_wait_for_the_log():
    shape = load_shape("synthetic:tiny")
    w = Workload(shape=shape)
    # a forward the host binds, a backward the device binds: waiting between them costs the difference
    forward, backward = (0.15, 0.12), (0.15, 0.235)
    assert speed_model.micro_batch_s(w, forward, backward) == pytest.approx(0.15 + 0.235)
    late = replace(w, figures_at_log=True)
    assert speed_model.micro_batch_s(late, forward, backward) == pytest.approx(0.355)
    # both bound by the device: nothing to gain
    assert speed_model.micro_batch_s(late, (0.1, 0.2), (0.1, 0.4)) == pytest.approx(0.6)
    cfg = config_from_dotted({"speed.read_figures": "at_log"})
    assert workload_from_config(cfg, shape).figures_at_log
    assert not workload_from_config(
        config_from_dotted({"speed.read_figures": "at_log", "objective": "dpo"}), shape
    ).figures_at_log
    # the default reads them at the log; each_micro_batch, TRL's and HF's own reads, waits between
    assert workload_from_config(config_from_dotted({}), shape).figures_at_log
    eager = config_from_dotted({"speed.read_figures": "each_micro_batch"})
    assert not workload_from_config(eager, shape).figures_at_log


class _Accelerator:
    def __init__(self, processes: int):
        self.num_processes, self.device = processes, torch.device("cpu")

    def gather_for_metrics(self, tensor):
        return tensor.reshape(-1).repeat(self.num_processes)


@pytest.mark.parametrize(
    ("processes", "read_figures"), [(1, "at_log"), (2, "at_log"), (2, "each_micro_batch")]
)
def test_a_batchs_tokens_are_counted_as_trl_counts_them_without_a_read_where_asked(processes, read_figures):
    from train_backend.step_figures import _batch_tokens

    trainer = SimpleNamespace(
        accelerator=_Accelerator(processes), cfg=config_from_dotted({"speed.read_figures": read_figures})
    )
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    counted = _batch_tokens(trainer, {"attention_mask": mask})
    assert isinstance(counted, torch.Tensor) and int(counted) == 5 * processes  # on the device, summed
    width = _batch_tokens(trainer, {"position_ids": torch.zeros(1, 24, dtype=torch.long)})
    assert width == 24 * processes
    # one process: the host's own figure; several: gathered, left on the device only where at_log
    assert isinstance(width, int) == (processes == 1 or read_figures != "at_log")
    with pytest.raises(ValueError, match="attention_mask' or 'position_ids"):
        _batch_tokens(trainer, {"input_ids": mask})
