"""The host of a run: CPU (per core when there is room), RAM, swap, disk and network rates, and
the trainer's own CPU and memory. Two rows, or one when compact; a figure the host could not
measure shows as '-'."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text

from cockpit.fmt import GIB
from widgets.sparkline import grid_span, levels, spark
from widgets.styled import LinePanel

CPU_SPARK_MAX = 30
CPU_SPARK_MIN = 8


def byte_rate(value: float | None, compact: bool = False) -> str:
    """Bytes per second in decimal units (as disks and links are sold): `1.2 MB/s`, compact `1.2M`."""
    if value is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            number = f"{value / scale:.1f}"
            return f"{number}{unit}" if compact else f"{number} {unit}B/s"
    return f"{value:.0f}" if compact else f"{value:.0f} B/s"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def used_of(used: int | None, total: int | None, unit: str = " GiB") -> str:
    if used is None:
        return "-"
    return f"{used / GIB:.1f}/{total / GIB:.1f}{unit}" if total else f"{used / GIB:.1f}{unit}"


def host_lines(
    host: Any,
    width: int,
    cpu_spark: tuple[Any, tuple[float, float], bool] | None = None,
    compact: bool = False,
    styles: dict[str, Style] | None = None,
) -> list[Text]:
    """`cpu_spark`: (the host CPU series, its time span, whether the span slides: the last N seconds
    of a longer history), drawn when there is room."""
    get = (styles or {}).get
    label, dim, spark_style = get("label", Style()), get("dim", Style(dim=True)), get("spark", Style())
    if host is None:
        return [Text("waiting for the first host sample…", dim)]
    trainer = f"{pct(host.trainer_cpu_pct)} CPU, {used_of(host.trainer_rss_bytes, None)} RSS"
    if compact:
        read, write = byte_rate(host.disk_read_bytes_s, True), byte_rate(host.disk_write_bytes_s, True)
        rx, tx = byte_rate(host.net_rx_bytes_s, True), byte_rate(host.net_tx_bytes_s, True)
        parts = [
            ("CPU ", f"{pct(host.cpu_pct)}"),
            (" RAM ", used_of(host.ram_used_bytes, host.ram_total_bytes, "G")),
            (" swap ", used_of(host.swap_used_bytes, None, "G")),
            (" disk ", f"r {read} w {write}"),
            (" net ", f"↓{rx} ↑{tx}"),
            (" trainer ", f"{pct(host.trainer_cpu_pct)} {used_of(host.trainer_rss_bytes, None, 'G')}"),
        ]
        # too narrow for all: leave out whole figures, least telling first, rather than cut one
        for name in (" swap ", " net ", " disk "):
            if sum(len(a) + len(b) for a, b in parts) <= width:
                break
            parts = [p for p in parts if p[0] != name]
        line = Text(no_wrap=True, overflow="ellipsis")
        for name, value in parts:
            line.append(name, label)
            line.append(value)
        return [line]
    cores = host.cpu_count_usable or (len(host.cpu_per_core_pct) if host.cpu_per_core_pct else None)
    first = Text(no_wrap=True, overflow="ellipsis")
    first.append("CPU   ", label)
    first.append(pct(host.cpu_pct).ljust(5))
    if cores:
        first.append(f"of {cores} ", dim)
    ram = [("  RAM ", used_of(host.ram_used_bytes, host.ram_total_bytes))]
    swap_total = f"/{host.swap_total_bytes / GIB:.1f}" if host.swap_total_bytes else ""
    if host.swap_used_bytes is not None:
        ram.append(("  swap ", f"{host.swap_used_bytes / GIB:.1f}{swap_total} GiB"))
    rest_len = sum(len(a) + len(b) for a, b in ram)
    per_core = levels(host.cpu_per_core_pct) if host.cpu_per_core_pct else ""
    room = width - len(first) - rest_len
    if per_core and room >= len(per_core) + CPU_SPARK_MIN + 10:
        room -= len(per_core) + 9
    else:
        per_core = ""
    if cpu_spark is not None and room >= CPU_SPARK_MIN + 1:
        series, (t0, t1), sliding = cpu_spark
        columns = min(CPU_SPARK_MAX, room - 1)
        first.append(spark(series, columns, *grid_span(t0, t1, columns, sliding), 100.0), spark_style)
    for name, value in ram:
        first.append(name, label)
        first.append(value)
    if per_core:
        first.append("  cores ", label)
        first.append(per_core, spark_style)
    second = Text(no_wrap=True, overflow="ellipsis")
    for name, value in (
        ("disk  ", f"read {byte_rate(host.disk_read_bytes_s)} write {byte_rate(host.disk_write_bytes_s)}"),
        ("  net ", f"in {byte_rate(host.net_rx_bytes_s)} out {byte_rate(host.net_tx_bytes_s)}"),
        ("  trainer ", trainer),
    ):
        second.append(name, label)
        second.append(value)
    return [first, second]


class HostPanel(LinePanel):
    """`show(host, cpu_spark)` hands it a `HostSample` (or None) and the CPU sparkline's data."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"host-panel--label", "host-panel--dim", "host-panel--spark"}

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self.host: Any = None
        self.cpu_spark: tuple[Any, tuple[float, float], bool] | None = None
        self.compact = False

    def show(self, host: Any, cpu_spark: tuple[Any, tuple[float, float], bool] | None, compact: bool) -> None:
        relayout = compact != self.compact or (host is None) != (self.host is None)
        self.host, self.cpu_spark, self.compact = host, cpu_spark, compact
        self.redraw(layout=relayout)

    def get_content_height(self, container, viewport, width: int) -> int:
        return 1 if self.compact or self.host is None else 2

    def build_lines(self, width: int) -> list[Text]:
        styles = {n: self.component_style(f"host-panel--{n}") for n in ("label", "dim", "spark")}
        return host_lines(self.host, width, self.cpu_spark, self.compact, styles)
