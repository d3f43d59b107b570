"""The doctor's single-GPU rules, each `rule(window, state) -> Finding | None` (cockpit.doctor.window).

The article's checklist (section 6.3, slow training) is the source of the first rules: GPU util
below 70% means a CPU or disk bottleneck, fp32 where bf16 runs, DataLoader num_workers left at 0,
SATA instead of NVMe. A rule that lacks its evidence stays quiet.
"""

from __future__ import annotations

from statistics import fmean
from typing import Any

from cockpit import fmt
from cockpit.doctor import step_rules
from cockpit.doctor.window import (
    Finding,
    Observation,
    Window,
    bytes_text,
    field,
    gpu_at,
    mean_of,
    phrase,
    pids_on,
)

LOW_UTIL_PCT = 70.0  # the article: GPU util steadily below 70% is a CPU/disk bottleneck
CPU_SATURATED_PCT = 90.0  # trainer CPU (100 = one core), or the host's CPU over all cores
DISK_READ_HIGH_BYTES_S = 50e6  # a tokenised text dataset reads KB/s; 50 MB/s means streaming from disk
MEM_FULL_SHARE = 0.95  # device memory used over total
DIP_SHARE_OF_MEAN = 0.5  # a dip: util below half its window mean...
MIN_DIPS = 2  # ...at least twice in the window (one is a checkpoint save or an eval)
MIN_WORKING_UTIL_PCT = 30.0  # dips of a GPU that hardly works say nothing
HARD_THROTTLE = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake")
THROTTLE_APPEAR_SHARE = 0.5  # throttling hurts long before it is the rule
THROTTLE_KEEP_SHARE = 0.25
POWER_CAP_CLOCK_SHARE = 0.8  # sw_power_cap counts when SM clock < 80% of max...
POWER_CAP_MIN_UTIL_PCT = 80.0  # ...while the GPU is busy (a power cap at idle is normal)
POWER_LIMIT_SHARE = 0.95  # power limit below 95% of the card's default: capped by the provider
# ...but not while the card draws this share of an unlowered limit: sw_power_cap is then the card at
# its rated power, clocking down as every card of its model does under that load (NVML sets it when
# the draw reaches the limit; an H200 under two processes' bf16 matmuls ran 1504 of 1980 MHz in the
# 2026-12-02 bench), nothing a provider can fix
POWER_AT_LIMIT_SHARE = 0.9
# the host's CPU saturated (CPU_SATURATED_PCT of every usable core), at least half of its cores taken by
# processes other than the trainer and its children: the machine, not the run, is the bottleneck
OTHERS_CORE_SHARE = 0.5
BUSY_UTIL_PCT = 20.0  # a GPU this busy while no run of ours trains is used by someone else
IDLE_UTIL_PCT = 5.0
IDLE_WINDOW_S = 300.0
IDLE_APPEAR_SHARE = 0.95  # "idle for the whole window", a stray sample forgiven
IDLE_KEEP_SHARE = 0.8  # the alarm goes within a minute of the GPU working again

NOT_TRAINING = ("paused", "finished", "stopped", "failed")  # or no run at all (status None)


def _cpu_saturated(o: Observation) -> bool:
    trainer = o.trainer_cpu_smooth
    host = field(o.host, "cpu_pct")
    return (trainer is not None and trainer >= CPU_SATURATED_PCT) or (
        host is not None and host >= CPU_SATURATED_PCT
    )


def _training(o: Observation) -> bool:
    return o.training


def _stepping(o: Observation) -> bool:
    return o.stepping


def _gpu_waits(o: Observation) -> bool:
    """Training, the GPU below 70% (its mean over one recorded bin, cockpit.doctor.window)."""
    util = o.util_smooth
    return o.training and util is not None and util < LOW_UTIL_PCT


def input_bound(window: Window, state: Any) -> Finding | None:
    """GPU util < 70% (window mean) while training, with the trainer's CPU saturated
    (>= 90% of one core: a single-threaded loader) or the host's CPU >= 90% busy. When the trainer
    measures its data wait (cockpit.doctor.step_rules), that measurement decides instead: a busy CPU
    with little data wait is a GPU-underfed or CPU-bound run, where more workers do not help."""
    if step_rules.measured(state) is not None:
        return step_rules.input_bound_measured(window, state)

    def starved(o: Observation) -> bool:
        return _gpu_waits(o) and _cpu_saturated(o)

    if not window.stepped_enough() or not window.held(starved, during=_stepping):  # not the warm-up
        return None
    training = [o for o in window if o.stepping]
    util = mean_of(o.trainer_util for o in training)
    if util is None or util >= LOW_UTIL_PCT:
        return None
    trainer_cpu = mean_of(field(o.host, "trainer_cpu_pct") for o in training)
    host_cpu = mean_of(field(o.host, "cpu_pct") for o in training)
    cores = field(window.observations[-1].host, "cpu_count_usable")
    workers = (field(state, "plan") or {}).get("dataloader_num_workers")
    evidence = phrase(
        [
            f"GPU util {util:.0f}% (mean of {window.span_text(_stepping)} of steps)",
            f"trainer CPU {trainer_cpu:.0f}% of one core" if trainer_cpu is not None else None,
            f"host CPU {host_cpu:.0f}%" + (f" ({cores} cores usable)" if cores else "")
            if host_cpu is not None
            else None,
            f"dataloader_num_workers {workers}" if workers is not None else None,
        ]
    )
    suggested = max(1, cores // 2) if cores else 4
    return Finding(
        rule="input_bound",
        severity="warn",
        title="Input-bound: the GPU waits for data",
        evidence=evidence,
        fix=f"Raise training.dataloader_num_workers (e.g. to {suggested}) and pre-tokenise the dataset; "
        "the article's rule: about half the cores.",
        since_ts=window.first_ts(starved),
    )


def slow_disk(window: Window, state: Any) -> Finding | None:
    """Disk reads >= 50 MB/s while training with GPU util < 70%: the input comes from disk."""

    def reading(o: Observation) -> bool:
        rate = field(o.host, "disk_read_bytes_s")
        return _gpu_waits(o) and rate is not None and rate >= DISK_READ_HIGH_BYTES_S

    if not window.held(reading, during=_training):
        return None
    training = [o for o in window if o.training]
    rate = mean_of(field(o.host, "disk_read_bytes_s") for o in training) or 0.0
    util = mean_of(o.trainer_util for o in training) or 0.0
    return Finding(
        rule="slow_disk",
        severity="warn",
        title="Disk-bound: the GPU waits for reads from disk",
        evidence=f"disk reads {rate / 1e6:.0f} MB/s, GPU util {util:.0f}% "
        f"(means of {window.span_text(_training)} of training)",
        fix="Copy the dataset and model to a local NVMe disk (a SATA disk reads ~500 MB/s at best), "
        "or raise training.dataloader_num_workers.",
        since_ts=window.first_ts(reading),
    )


def _capability(text: Any) -> tuple[int, int] | None:
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, TypeError):
        return None


def fp32_on_bf16_card(window: Window, state: Any) -> Finding | None:
    """Precision fp32 on a CUDA card of compute capability >= 8.0 (native bf16), run not ended."""
    device = field(state, "device") or {}
    capability = _capability(device.get("capability"))
    if (
        field(state, "precision") != "fp32"
        or field(state, "status") not in ("starting", "running", "paused")
        or device.get("kind", "cuda") != "cuda"
        or capability is None
        or capability < (8, 0)
    ):
        return None
    name = device.get("name") or "this GPU"
    return Finding(
        rule="fp32_on_bf16_card",
        severity="warn",
        title="Training in fp32 on a card with native bf16",
        evidence=f"precision fp32 on {name} (compute capability {capability[0]}.{capability[1]})",
        fix="Set training.precision: bf16 (or auto): about 2x faster and half the activation memory.",
        since_ts=field(state, "train_started_ts"),
    )


def _mem_share(gpu: Any) -> float | None:
    used, total = field(gpu, "mem_used_bytes"), field(gpu, "mem_total_bytes")
    return used / total if used is not None and total else None


def _dips(utils: list[float], mean: float) -> int:
    """Separate episodes of util below DIP_SHARE_OF_MEAN of its mean."""
    low = [u < DIP_SHARE_OF_MEAN * mean for u in utils]
    return sum(1 for i, is_low in enumerate(low) if is_low and (i == 0 or not low[i - 1]))


def memory_pressure(window: Window, state: Any) -> Finding | None:
    """A trainer GPU > 95% full for most of the window while its util dips below half its
    mean (>= 30%) at least twice (once while the finding is shown): allocator paging or
    fragmentation."""
    for index in dict.fromkeys(field(g, "index") for o in window for g in o.trainer_gpus):

        def full(o: Observation, index: Any = index) -> bool:
            share = _mem_share(gpu_at(o, index))
            return o.training and share is not None and share > MEM_FULL_SHARE

        if not window.held(full, during=_training):
            continue
        utils = [u for o in window if o.training and (u := field(gpu_at(o, index), "util_pct")) is not None]
        if len(utils) < window.min_samples:
            continue
        mean = fmean(utils)
        dips = _dips(utils, mean)
        if mean < MIN_WORKING_UTIL_PCT or dips < (1 if window.keeping else MIN_DIPS):
            continue
        last_full = next(gpu_at(o, index) for o in reversed(window.observations) if full(o))
        used, total = field(last_full, "mem_used_bytes"), field(last_full, "mem_total_bytes")
        checkpointing = (field(state, "plan") or {}).get("gradient_checkpointing")
        return Finding(
            rule="memory_pressure",
            severity="warn",
            title="Memory pressure: the GPU is nearly full and its util keeps dropping",
            evidence=f"GPU {index}: {fmt.gib(used, 1)} of {fmt.gib(total, 1)} used ({used / total:.0%}); "
            f"util mean {mean:.0f}%, below {DIP_SHARE_OF_MEAN * mean:.0f}% {dips} times "
            f"in {window.span_text()} (lowest {min(utils):.0f}%)",
            fix="Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and lower training.micro_batch_size"
            + (" or turn on training.gradient_checkpointing." if checkpointing is not True else "."),
            since_ts=window.first_ts(full),
        )
    return None


def _throttled(gpu: Any) -> list[str]:
    """The throttle reasons that cost speed in this reading."""
    reasons = field(gpu, "throttle_reasons") or []
    found = [r for r in reasons if r in HARD_THROTTLE]
    clock, clock_max = field(gpu, "sm_clock_mhz"), field(gpu, "sm_clock_max_mhz")
    util = field(gpu, "util_pct")
    if (
        "sw_power_cap" in reasons
        and None not in (clock, clock_max, util)
        and clock < POWER_CAP_CLOCK_SHARE * clock_max
        and util >= POWER_CAP_MIN_UTIL_PCT
        and not _at_rated_power(gpu)
    ):
        found.append("sw_power_cap")
    return found


def _at_rated_power(gpu: Any) -> bool:
    """Drawing (nearly) all of a power limit that is the card's default."""
    power, limit = field(gpu, "power_w"), field(gpu, "power_limit_w")
    if power is None or not limit:
        return False
    return power >= POWER_AT_LIMIT_SHARE * limit and not _power_capped(gpu)


def _power_capped(gpu: Any) -> bool:
    limit, default = field(gpu, "power_limit_w"), field(gpu, "power_default_limit_w")
    return limit is not None and bool(default) and limit < POWER_LIMIT_SHARE * default


def throttling(window: Window, state: Any) -> Finding | None:
    """A GPU throttled (hw_slowdown, hw/sw thermal slowdown, hw_power_brake; sw_power_cap
    only with SM clock < 80% of max at util >= 80%) for half the window (kept down to a
    quarter), or a power limit below 95% of the card's default for most of it."""
    for index in dict.fromkeys(field(g, "index") for o in window for g in o.gpus):

        def slowed(o: Observation, index: Any = index) -> bool:
            return bool(_throttled(gpu_at(o, index)))

        def capped(o: Observation, index: Any = index) -> bool:
            return _power_capped(gpu_at(o, index))

        is_slowed = window.held(slowed, THROTTLE_APPEAR_SHARE, THROTTLE_KEEP_SHARE)
        is_capped = window.held(capped)
        if not (is_slowed or is_capped):
            continue
        readings = [g for o in window if (g := gpu_at(o, index)) is not None]
        parts = []
        if is_slowed:
            counts: dict[str, int] = {}
            for g in readings:
                for reason in _throttled(g):
                    counts[reason] = counts.get(reason, 0) + 1
            names = "/".join(sorted(counts, key=lambda r: -counts[r]))
            temp = max((t for g in readings if (t := field(g, "temp_c")) is not None), default=None)
            clock = mean_of(field(g, "sm_clock_mhz") for g in readings)
            clock_max = field(readings[-1], "sm_clock_max_mhz")
            parts += [
                f"GPU {index}: {names} for {window.held_s(slowed):.0f} of {window.span_text()}",
                f"up to {temp:.0f} °C" if temp is not None else None,
                f"SM clock {clock:.0f}" + (f" of {clock_max:.0f} MHz" if clock_max else " MHz")
                if clock is not None
                else None,
            ]
        if is_capped:
            g = next(g for g in reversed(readings) if _power_capped(g))
            parts.append(
                f"GPU {index}: power limit {field(g, 'power_limit_w'):.0f} W, "
                f"default {field(g, 'power_default_limit_w'):.0f} W"
            )
        return Finding(
            rule="throttling",
            severity="warn",
            title="Throttled: the GPU delivers less than its spec",
            evidence=phrase(parts),
            fix="Tell the provider or choose another instance: this card runs below its spec "
            "(nvidia-smi -q -d PERFORMANCE,POWER shows why).",
            since_ts=window.first_ts(slowed) if is_slowed else window.first_ts(capped),
        )
    return None


def _lists_trusted(o: Observation) -> bool:
    """The GPU process lists can tell ours from another's: they show the trainer itself, or no
    run is live (in a container NVML may report host pids; a loading trainer is not on them yet)."""
    return (
        o.status is None
        or o.status in ("finished", "stopped", "failed")
        or any(pids_on(g) & o.trainer_pids for g in o.gpus)
    )


def _foreign(o: Observation) -> list[tuple[Any, dict[str, Any]]]:
    """(GPU index, process) for GPU processes not the trainer's, where the lists are trusted."""
    gpus = o.gpus
    if not _lists_trusted(o):
        return []
    return [
        (field(g, "index"), p)
        for g in gpus
        for p in field(g, "processes") or []
        if isinstance(p, dict) and p.get("pid") is not None and p["pid"] not in o.trainer_pids
    ]


def _max_util(o: Observation) -> float | None:
    utils = [u for g in o.gpus if (u := field(g, "util_pct")) is not None]
    return max(utils) if utils else None


def _busy_without_us(o: Observation) -> bool:
    util = _max_util(o)
    return (o.status is None or o.status in NOT_TRAINING) and util is not None and util >= BUSY_UTIL_PCT


def foreign_process(window: Window, state: Any) -> Finding | None:
    """Another process (pid not the trainer's) on a GPU for most of the window, or a GPU
    >= 20% busy while no run of ours trains (paused, ended, or none)."""

    def has_foreign(o: Observation) -> bool:
        return bool(_foreign(o))

    # judged over the time the lists could tell (not the model load before the trainer shows)
    holds_memory = window.held(has_foreign, during=_lists_trusted)
    busy = window.held(_busy_without_us)
    if not (holds_memory or busy):
        return None
    parts = []
    if holds_memory:
        seen: dict[int, tuple[Any, dict[str, Any]]] = {}
        for o in window:
            for index, p in _foreign(o):
                seen[p["pid"]] = (index, p)
        for index, p in list(seen.values())[:3]:
            name = p.get("name") or "?"
            parts.append(f"pid {p['pid']} ({name}) holds {bytes_text(p.get('used_bytes'))} on GPU {index}")
        if len(seen) > 3:
            parts.append(f"{len(seen) - 3} more")
    if busy:
        utils = [u for o in window if _busy_without_us(o) and (u := _max_util(o)) is not None]
        status = window.observations[-1].status
        doing = f"the run is {status}" if status else "no run is attached"
        parts.append(f"GPU util {fmean(utils):.0f}% (mean of {window.span_text()}) while {doing}")
    return Finding(
        rule="foreign_process",
        severity="warn",
        title="Another process is using the GPU",
        evidence=phrase(parts),
        fix="Stop it (nvidia-smi lists it; kill the pid if it is yours): it takes GPU memory and time "
        "from the run.",
        since_ts=window.first_ts(has_foreign) if holds_memory else window.first_ts(_busy_without_us),
    )


def _idle(o: Observation) -> bool:
    if not (o.status is None or o.status in NOT_TRAINING):
        return False
    gpus = o.gpus
    utils = [field(g, "util_pct") for g in gpus]
    return bool(gpus) and None not in utils and max(utils) < IDLE_UTIL_PCT


def idle_billed(window: Window, state: Any) -> Finding | None:
    """Every GPU below 5% util for the whole (5-minute) window while no run trains (paused,
    finished, stopped, failed, or none; a vanished trainer is marked failed by its exit
    event). The alarm stays until the GPU works again for a fifth of the window."""
    if not window.held(_idle, IDLE_APPEAR_SHARE, IDLE_KEEP_SHARE, whole=True):
        return None
    since = window.active_since if window.keeping else window.first_ts(_idle)
    since = window.now_ts if since is None else since
    idle_s = max(0.0, window.now_ts - since)
    price = field(state, "price_per_hour")
    status = window.observations[-1].status
    doing = f"the run is {status}" if status else "no run is attached"
    cost = (
        f"{fmt.money(price * idle_s / 3600)} burnt at {fmt.money(price)}/h"
        if price is not None
        else "price unknown (set cost.price_per_hour)"
    )
    return Finding(
        rule="idle_billed",
        severity="alarm",
        title="Idle GPU, still billed",
        evidence=f"GPU util below {IDLE_UTIL_PCT:.0f}% for {idle_s / 60:.0f} min while {doing}; {cost}",
        fix="Shut the instance down, or start the next run: it is billed by the hour, idle or not.",
        since_ts=since,
    )


def no_gpu(window: Window, state: Any) -> Finding | None:
    """NVML says no_driver or no_gpu for most of the window while a run is training."""

    def blind(o: Observation) -> bool:
        return o.training and field(o.sample, "nvml") in ("no_driver", "no_gpu")

    if not window.held(blind, during=_training):
        return None
    device = field(state, "device") or {}
    kind, name = device.get("kind"), device.get("name")
    if kind == "cuda":
        title = "No GPU telemetry: NVML cannot see the GPU the trainer uses"
        fix = "Check that nvidia-smi works in this environment (driver library mounted); until then the "
        fix += "doctor cannot judge the GPU."
    else:
        title = "Training without a GPU?"
        fix = "Check nvidia-smi and the driver, or pick an instance with a GPU: on the CPU a fine-tune "
        fix += "of a 7B model takes days."
    nvml = field(window.observations[-1].sample, "nvml")
    on = f"{kind} ({name})" if kind and name and name != kind else (kind or "an unknown device")
    return Finding(
        rule="no_gpu",
        severity="info",
        title=title,
        evidence=f"NVML: {nvml} for {window.held_s(blind):.0f} of {window.span_text()} "
        f"while the run trains on {on}",
        fix=fix,
        since_ts=window.first_ts(blind),
    )


def _others_cores(o: Observation) -> float | None:
    """Cores the host's other processes keep busy (the host's busy cores less the trainer's)."""
    host, trainer = field(o.host, "cpu_pct"), field(o.host, "trainer_cpu_pct")
    cores = field(o.host, "cpu_count_usable")
    if host is None or trainer is None or not cores:
        return None
    return max(0.0, float(host) / 100 * int(cores) - float(trainer) / 100)


def host_busy(window: Window, state: Any) -> Finding | None:
    """While a run trains, the host's CPU >= 90% busy over its usable cores, at least half of them
    taken by other processes: the run goes at what the machine leaves it (on the CPU, or feeding a
    GPU). A GPU run whose own loader saturates the CPU is input_bound's, not this."""

    def crowded(o: Observation) -> bool:
        others, cores = _others_cores(o), field(o.host, "cpu_count_usable")
        host = field(o.host, "cpu_pct")
        return (
            o.training
            and others is not None
            and host is not None
            and host >= CPU_SATURATED_PCT
            and others >= OTHERS_CORE_SHARE * cores
        )

    if not window.held(crowded, during=_training):
        return None
    training = [o for o in window if o.training]
    host_cpu = mean_of(field(o.host, "cpu_pct") for o in training)
    trainer_cpu = mean_of(field(o.host, "trainer_cpu_pct") for o in training)
    others = mean_of(_others_cores(o) for o in training)
    cores = field(window.observations[-1].host, "cpu_count_usable")
    if host_cpu is None or trainer_cpu is None or others is None:
        return None
    return Finding(
        rule="host_busy",
        severity="warn",
        title="The machine is busy with other work: the run gets what is left",
        evidence=f"host CPU {host_cpu:.0f}% of {cores} cores for {window.span_text(_training)}; the trainer "
        f"{trainer_cpu:.0f}% of one core, other processes about {others:.1f} cores",
        fix="Stop or pause the other processes (top or htop, sorted by CPU, names them), or train where "
        "nothing else runs: every step waits for a core until then.",
        since_ts=window.first_ts(crowded),
    )
