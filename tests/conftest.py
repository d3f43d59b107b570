"""Shared fixtures: an isolated COCKPIT_HOME per test, one synthetic-model cache per session,
and helpers to run the real CLI and trainer as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Hermetic: what the caller's shell has set must not change what the tests see (each test that
# needs one of these sets it itself). tests/test_hermetic.py runs tests with them set.
CALLER_ENV = (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_ENDPOINT",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_HOME",
    "NO_COLOR",
    "FORCE_COLOR",
    "COLUMNS",
    "LINES",
    "COCKPIT_HOME",
    "COCKPIT_CACHE",
    "COCKPIT_CONFIG",
    "COCKPIT_TEST_AIDS",  # faults a test sets for its own trainer (train_backend.test_aids), never inherited
    "COCKPIT_TEST_HF_API",  # the hub's offline stand-in (cockpit.sync.hub), set by the tests that use it
    "FAKE_HUB_DIR",
    # the providers' variables (cockpit.cloud): a suite run on a rented box finds no provider unasked
    "RUNPOD_POD_ID",
    "CONTAINER_ID",
    "CONTAINER_API_KEY",
    "LAMBDA_API_KEY",
    "LAMBDA_INSTANCE_ID",
)
for _name in CALLER_ENV:
    os.environ.pop(_name, None)
# The commands the product prints read `cockpit ...` here whatever PATH holds, so that what the tests
# compare (and the snapshots) is the same on every machine; tests/test_cockpit_command.py checks the
# helper (cockpit.paths.cockpit_command) without it.
os.environ["COCKPIT_COMMAND"] = "cockpit"
# One compute thread per process: the suite runs one worker per core, each starting trainers, so
# torch's default (a thread per core in every process) oversubscribes the cores and its threads
# spin waiting for each other. Measured on the 2-core box beside the other workers: one tiny
# 8-step run took 48 s of CPU with the default, 19 s with one thread.
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

ROOT = Path(__file__).resolve().parent.parent
# bitsandbytes is the `gpu` extra: ./install.sh puts it in where an NVIDIA GPU is, so on a CPU box
# (CI) the tests of its 4-bit layers skip; they run on the GPU box (docs/measurements.md, "On rented GPUs")
BNB = "bitsandbytes is not installed (the gpu extra; ./install.sh adds it on a machine with an NVIDIA GPU)"
SUPPORT = Path(__file__).resolve().parent / "support"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# a small, fast training config on the shipped tiny model (CPU)
TINY = {
    "model": {"name": "synthetic:tiny"},
    "dataset": {"path": "demo"},
    "method": "lora",
    "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"},
    "training": {
        "max_length": 64,
        "micro_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "max_steps": 8,
        "learning_rate": 1e-3,
        "optimizer": "adamw_torch",
        "gradient_checkpointing": False,
        "logging_steps": 1,
    },
    "output": {"save_steps": 4, "checkpoints_kept": 2},
    "cost": {"price_per_hour": 2.0},
}


def has_cuda() -> bool:
    """Whether a CUDA GPU is visible (asked in a child: this process never imports torch)."""
    global _HAS_CUDA
    if _HAS_CUDA is None:
        probe = "import torch; print(torch.cuda.is_available())"
        # this probe is not one of a run's processes: keep it out of the import records
        quiet = {k: v for k, v in os.environ.items() if k != "COCKPIT_TEST_MODULES_DIR"}
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=quiet
        )
        _HAS_CUDA = out.stdout.strip().endswith("True")
    return _HAS_CUDA


_HAS_CUDA: bool | None = None


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cockpit-cache")


def offline_env(work: Path, cache: str) -> dict:
    """This environment, offline, with a private home and datasets cache under `work` and the model
    cache `cache`: for subprocesses that load a real model (SmolLM2) from the shared cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("COCKPIT_TEST_MODULES_DIR", "HF_TOKEN")}
    env.update(
        COCKPIT_HOME=str(work / "home"),
        COCKPIT_CACHE=cache,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_CACHE=str(work / "datasets"),
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture
def env(tmp_path, cache_dir, monkeypatch) -> dict:
    """Environment for subprocesses (and this process): private home, shared model cache."""
    modules = tmp_path / "modules"
    modules.mkdir()
    values = {
        "COCKPIT_HOME": str(tmp_path / "home"),
        "COCKPIT_CACHE": str(cache_dir),
        "COCKPIT_TEST_MODULES_DIR": str(modules),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(cache_dir / "datasets"),
        "PYTHONPATH": os.pathsep.join(
            p for p in [str(SUPPORT), str(ROOT), os.environ.get("PYTHONPATH", "")] if p
        ),
        "PYTHONUNBUFFERED": "1",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return dict(os.environ)


def write_config(path: Path, overrides: dict | None = None) -> Path:
    import copy

    import yaml

    cfg = copy.deepcopy(TINY)
    for dotted, value in (overrides or {}).items():
        node = cfg
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    path.write_text(yaml.safe_dump(cfg))
    return path


def cockpit(args: list[str], env: dict, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def cockpit_bg(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cockpit", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def events(run_path: Path) -> list[dict]:
    out = []
    for line in (run_path / "events.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def only_run(env: dict) -> Path:
    runs = [p for p in (Path(env["COCKPIT_HOME"]) / "runs").iterdir()]
    assert len(runs) == 1, runs
    return runs[0].resolve()


def wait_for(predicate, timeout: float = 120, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_event(run_path: Path, predicate, timeout: float = 120) -> dict:
    def find():
        if not (run_path / "events.jsonl").exists():
            return None
        for e in events(run_path):
            if predicate(e):
                return e
        return None

    return wait_for(find, timeout, what="an event")


def wait_run_dir(env: dict, timeout: float = 30) -> Path:
    root = Path(env["COCKPIT_HOME"]) / "runs"
    return wait_for(
        lambda: next(iter(root.iterdir()), None) if root.is_dir() else None, timeout, what="the run directory"
    ).resolve()


# --- scheduling: the longest work first, so that the two CI workers finish together -------------
# `-n auto --dist loadgroup --no-loadscope-reorder` (pyproject's addopts): a test marked
# `xdist_group(name)` goes to the worker that runs the rest of its group (a module whose tests
# share one real trainer run builds it once, not once per worker); every other test is its own
# unit. Units are handed out in collection order, a worker asking for more when it has two tests
# or fewer left, so the order below is the schedule: the costliest units first (the measured
# seconds of tests/durations.json, setup included), the many quick tests last, where they fill in
# whichever worker is free. Refresh the file after a suite run with --durations=0:
#   python -m pytest --durations=0 -q | tee /tmp/d.log; python tests/support/durations.py /tmp/d.log
DURATIONS = Path(__file__).resolve().parent / "durations.json"
QUICK_S = 0.5  # a test the file does not list


def pytest_collection_modifyitems(config, items):
    try:
        measured = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    units: dict[str, list] = {}
    for item in items:
        group = item.get_closest_marker("xdist_group")
        key = f"group:{group.args[0] if group.args else group.kwargs['name']}" if group else item.nodeid
        units.setdefault(key, []).append(item)
    # xdist names a grouped test `path::name@group`: the file keys it without the group
    cost = {
        key: sum(measured.get(i.nodeid.split("@")[0], QUICK_S) for i in members)
        for key, members in units.items()
    }
    ordered = sorted(units, key=lambda key: -cost[key])  # stable: equal costs keep collection order
    items[:] = [item for key in ordered for item in units[key]]


def unwritable_dir(tmp_path):
    """A folder nobody here may create files in: a 0500 folder, or, for root (whom modes do not stop),
    one under /sys; the test is skipped where neither refuses."""
    import os

    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir(mode=0o500)
        return folder / "home"
    folder = "/sys/cockpit-read-only-test"
    try:
        os.mkdir(folder)
    except OSError:
        return Path(folder)
    os.rmdir(folder)
    pytest.skip("no place here refuses a write")
