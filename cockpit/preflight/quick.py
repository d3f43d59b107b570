"""The quick preflight a training start runs (`cockpit train`, `cockpit demo`): seconds, no torch.

What can be seen wrong before money is spent without loading torch: the GPUs as NVML reports
them (visible, memory errors, throttling, power cap, PCIe width, other processes, persistence
mode), usable CPU cores, RAM against the 4x VRAM rule and against the model, swap, the disks under
the model cache and the run's output (type, free space), and the hub when the model or the data
come from it. Bounded: NVML and the model's shape get `FACTS_WAIT_S`, the checks the rest of
`BUDGET_S`; what has not answered by then is reported as timed out, and the run starts anyway.
The torch side (driver vs torch's CUDA, bitsandbytes, bf16, matmul speed) is `cockpit preflight`'s.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit import paths
from cockpit.config.schema import TrainConfig
from cockpit.models import packaged
from cockpit.models import shipped as shapes
from cockpit.preflight.checks.base import STATUSES, CheckResult
from cockpit.telemetry import nvml_state
from cockpit.telemetry.nvml import NvmlSource, PynvmlSource

if TYPE_CHECKING:
    from cockpit.preflight.runner import Check

BUDGET_S = 2.5  # the whole start preflight, with margin under the 3 s a start may wait
FACTS_WAIT_S = 0.8  # NVML's answer and the model's shape
NVML_SOURCE: Callable[[], NvmlSource] = PynvmlSource  # tests put a FakeNvml here
# The checks (and the network's urllib behind them) are imported when the preflight runs, not with
# this module: `cockpit train --skip-preflight` reads NVML_SOURCE only, and its TUI starts sooner.


def nvml_checks() -> tuple[Callable[[nvml_state.NvmlState], CheckResult], ...]:
    """The GPU checks NVML answers alone, without the probe's load (idle figures say so themselves)."""
    from cockpit.preflight.checks import gpu as checks_gpu

    return (
        checks_gpu.check_memory_health,
        checks_gpu.check_throttle,
        checks_gpu.check_power_limit,
        checks_gpu.check_pcie_link,
        checks_gpu.check_processes,
        checks_gpu.check_persistence,
    )


@dataclass(frozen=True)
class StartPreflight:
    results: list[CheckResult]
    duration_s: float

    @property
    def problems(self) -> list[CheckResult]:
        """Failures first, then warnings."""
        bad = [r for r in self.results if r.status == "fail"]
        return bad + [r for r in self.results if r.status == "warn"]

    def summary(self) -> str:
        counts = {s: sum(r.status == s for r in self.results) for s in STATUSES}
        said = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
        verdict = "going on with the run" if self.problems else "all clear"
        return f"preflight (quick, {self.duration_s:.1f} s): {said or 'no checks'}; {verdict}"

    def lines(self) -> list[str]:
        """The summary, then one entry (with its fix) per failure or warning."""
        from cockpit.preflight.runner import result_line

        out = [self.summary()]
        for result in self.problems:
            out += result_line(result).splitlines()
        if self.problems:
            me = paths.cockpit_command()
            out.append(f"  (`{me} preflight` runs every check; --skip-preflight skips these)")
        return out


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0")


def model_storage(name: str) -> tuple[Path, bool]:
    """The cache whose room `name`'s weights need, and whether they need room in it: a synthetic
    model is built in cockpit's cache, a hub model downloaded into the hub's; a packaged model
    (`cockpit fetch`) is there already and a local folder stays where it is."""
    from cockpit.preflight import runner  # with the checks, when a preflight runs

    if shapes.is_synthetic(name):
        return paths.cache_root(), True
    return runner.default_paths()["cache"], _from_hub(name)


def _from_hub(name: str, demo_ok: bool = False) -> bool:
    """A name the trainer fetches from the hub: not synthetic, not a packaged model (`cockpit fetch`
    brings it from the package index into cockpit's cache), not the shipped demo, not a local path."""
    if shapes.is_synthetic(name) or packaged.is_packaged(name) or (demo_ok and name == "demo"):
        return False
    return not Path(name).expanduser().exists()


def hub_unneeded(cfg: TrainConfig) -> str | None:
    """Why this run needs nothing from the hub; None when it does."""
    if _offline():
        return "HF_HUB_OFFLINE is set: nothing is downloaded"
    if not _from_hub(cfg.model.name) and not _from_hub(cfg.dataset.path, demo_ok=True):
        return f"model ({cfg.model.name}) and dataset ({cfg.dataset.path}) are local"
    return None


def _skipped(check_id: str, group: str, title: str, why: str) -> Check:
    from cockpit.preflight import runner as preflight

    return preflight.Check(check_id, lambda: CheckResult(check_id, group, title, "skip", why), group, title)


def _facts(
    cfg: TrainConfig, nvml_source: Callable[[], NvmlSource], wait_s: float
) -> tuple[nvml_state.NvmlState, int | None]:
    """NVML's state and the model's 16-bit size, each given `wait_s` (a hung driver or a hub that
    does not answer leaves them unknown, not the start waiting)."""
    box: dict[str, Any] = {}

    def read_nvml() -> None:
        box["state"] = nvml_state.read_nvml(nvml_source())

    def model_size() -> None:
        from cockpit.models import shape as modelshape

        try:
            shape = modelshape.load_shape(cfg.model.name, cfg.model.revision or "main", wait_s)
            box["model_bytes"] = shape.params * 2  # 16-bit weights, as downloaded and loaded
        except Exception:
            box["model_bytes"] = None  # a shape the trainer cannot resolve either: it says why

    threads = [threading.Thread(target=fn, daemon=True) for fn in (read_nvml, model_size)]
    deadline = time.monotonic() + wait_s
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    state = box.get("state") or nvml_state.NvmlState(error=f"NVML did not answer within {wait_s:g} s")
    return state, box.get("model_bytes")


def start_plan(
    cfg: TrainConfig,
    state: nvml_state.NvmlState,
    model_bytes: int | None,
    dirs: dict[str, Path] | None = None,
    endpoint: str | None = None,
    hub_timeout_s: float = 2.0,
) -> list[Check]:
    """The checks (`runner.Check`): NVML's GPU checks, then the quick plan for this run's model and
    directories."""
    from cockpit.preflight import runner as preflight
    from cockpit.preflight.checks import gpu as checks_gpu

    visible = checks_gpu.check_visible(state)
    out = [preflight.Check("gpu.visible", lambda: visible, "gpu", visible.title)]
    if visible.status != "fail":
        out += [preflight.Check(fn.__name__, partial(fn, state), "gpu") for fn in nvml_checks()]
    cache, in_cache = model_storage(cfg.model.name)
    if dirs is None:
        dirs = {"cache": cache, "runs": Path(cfg.output.dir) if cfg.output.dir else paths.runs_root()}
    vram = [g["memory"]["total_bytes"] for g in state.gpus if (g.get("memory") or {}).get("total_bytes")]
    quick = preflight.plan(
        True,
        dirs,
        vram_bytes=max(vram) if vram else None,
        model_bytes=model_bytes,
        endpoint=endpoint,
        gpu_count=max(1, len(state.gpus)),
        hub_timeout_s=hub_timeout_s,
        model_in_cache=in_cache,
    )
    unneeded = hub_unneeded(cfg)
    if unneeded:
        quick = [
            _skipped(c.id, "network", "Model hub reachable", unneeded) if c.id == "network.hub" else c
            for c in quick
        ]
    return out + quick


def run_start_preflight(
    cfg: TrainConfig,
    *,
    nvml_source: Callable[[], NvmlSource] | None = None,
    dirs: dict[str, Path] | None = None,
    endpoint: str | None = None,
    budget_s: float = BUDGET_S,
) -> StartPreflight:
    """Run the start checks, all at once, within `budget_s`. Never raises: a start is never blocked,
    and a preflight that could not be planned says so as a warning."""
    started = time.monotonic()
    try:
        wait_s = min(FACTS_WAIT_S, budget_s / 3)
        state, model_bytes = _facts(cfg, nvml_source or NVML_SOURCE, wait_s)
        left_s = max(0.2, budget_s - (time.monotonic() - started))
        checks = start_plan(cfg, state, model_bytes, dirs, endpoint, hub_timeout_s=max(0.2, left_s * 0.8))
    except Exception as exc:
        problem = CheckResult(
            "preflight.start",
            "host",
            "Quick preflight",
            "warn",
            f"could not run: {type(exc).__name__}: {exc}",
            fix=f"run `{paths.cockpit_command()} preflight --no-ui` to see each check; report this error "
            "if it repeats",
        )
        return StartPreflight([problem], time.monotonic() - started)
    from cockpit.preflight import runner as preflight

    results = preflight.run_checks(checks, concurrency=len(checks), timeout_s=left_s)
    return StartPreflight(results, time.monotonic() - started)
