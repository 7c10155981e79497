"""Machine utilisation for the node agent's ``NodeMetrics``, read through psutil.

Every figure of :class:`HostSample` (all utilisations are fractions clipped to [0, 1]):

``cpu_utilization``
    Busy time / total time of the whole machine (all CPUs) between the previous sample and this
    one, from ``psutil.cpu_times()`` (the aggregate ``cpu`` line of ``/proc/stat``, in jiffies
    divided by ``USER_HZ``).  Busy is everything but ``idle`` and ``iowait``; ``guest`` and
    ``guest_nice`` are left out of the total because the kernel already counts them in
    ``user``/``nice``.
``memory_utilization``, ``memory_total_bytes``
    ``1 - available / total`` now, and ``total`` in bytes, from ``psutil.virtual_memory()``:
    ``MemTotal`` and ``MemAvailable`` of ``/proc/meminfo``.  Changed with psutil: where
    ``MemAvailable`` is missing (Linux < 3.14) or 0, psutil estimates it as ``free(1)`` does,
    and where it exceeds ``MemTotal`` (some containers) psutil reports ``MemFree`` instead;
    these used to be errors.
``load_average_1m``
    The 1-minute load average now, from ``psutil.getloadavg()`` (runnable + uninterruptible
    tasks; *not* divided by the number of CPUs, so not clipped either).  On Linux that is
    ``os.getloadavg()``: the C library reads ``/proc/loadavg`` itself, whatever
    ``psutil.PROCFS_PATH`` says.
``disk_throughput_utilization``
    Bytes read + written per second over all whole disks, divided by the configured
    ``disk_bandwidth_bytes_per_s``, from ``psutil.disk_io_counters(perdisk=True)``: the sectors
    of ``/proc/diskstats`` times 512, which the kernel counts whatever the real sector size.
``disk_busy_utilization``
    The busiest whole disk's share of wall-clock time with I/O in flight (``busy_time``, the
    ``io_ticks`` of ``/proc/diskstats`` in ms).
``disk_usage``
    Used share of the filesystem holding ``disk_path`` now, as ``df`` computes it:
    ``used / (used + available to unprivileged users)``, from ``psutil.disk_usage()`` (whose
    ``free`` is ``f_bavail``; its ``percent`` is rounded, so the bytes are used instead).
``net_receive_utilization``, ``net_transmit_utilization``
    Bytes per second received/sent over the counted interfaces divided by their summed link
    speed, from ``psutil.net_io_counters(pernic=True)`` (``/proc/net/dev``) and
    ``psutil.net_if_stats()`` (Mb/s).  ``lo`` is never counted.  When some interfaces are backed
    by a device (``/sys/class/net/<if>/device`` exists: psutil does not tell, so this module
    looks itself) only those are counted: bridges, veths, VLANs and tunnels carry the same bytes
    a second time.  Interfaces that report no speed (virtio, bridges) add no capacity; when none
    reports one, the capacity is ``default_link_bytes_per_s``.  Changed with psutil: the speed
    comes from the ``SIOCETHTOOL`` ioctl, not ``/sys/class/net/<if>/speed``; the two give the
    same figure, but the ioctl also answers for an interface that is down, so a speed counts
    only while the interface is up (``isup``: ``IFF_RUNNING``).
``pressure``
    The machine's PSI now (:func:`node_agent.metrics.pressure.read_pressure` on
    ``<PROCFS_PATH>/pressure``; psutil has none); resources the kernel does not report are absent.

Rate figures (CPU, disk, network) compare two readings; the first sample of a
:class:`HostSampler` has none to compare with and reports ``0.0`` for them.  A counter that went
backwards (a device or interface re-created) counts as no activity - psutil's ``nowrap``
correction, a process-wide cache that would credit the old count to the new device, is off - and
devices or interfaces present in only one of the two readings are left out.

"Whole disk" excludes partitions (another listed device's name plus digits, or plus ``p`` and
digits when that name ends in a digit: ``sda1``, ``nvme0n1p2``) and stacked or memory-backed
devices (``loop``, ``ram``, ``zram``, ``dm-``, ``md``), whose I/O is also counted on the disks
beneath them or never reaches a disk; those are used only when nothing else is listed.  (psutil's
own filter keeps every name under ``/sys/block``, stacked devices included, and
``perdisk=True`` does not apply it; this module applies its own.)

procfs is read where ``psutil.PROCFS_PATH`` points (``/proc``; tests point it at recordings).
The ``read_*`` functions are thin: they call psutil and turn its answer into this module's
readings, raising ``ValueError("<file>: <problem>")`` for a file psutil cannot parse.
``/proc/stat`` and ``/proc/meminfo`` must be readable (``OSError`` otherwise); a missing
``/proc/diskstats`` or ``/proc/net/dev`` (some sandboxes) reads as no devices - psutil would
fall back to the live ``/sys/block`` for the disks, which this module does not let it do.
:func:`compute_sample` is a pure function of two readings, and :class:`HostSampler` only reads
and remembers the previous reading.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psutil

from node_agent.metrics.pressure import PressureStall, read_pressure

_T = TypeVar("_T")

_CPU_TOTAL = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_CPU_IDLE = ("idle", "iowait")
_STACKED_DISK_PREFIXES = ("loop", "ram", "zram", "dm-", "md")
_PARTITION_AFTER_DIGIT = re.compile(r"p\d+")
_PARTITION_AFTER_LETTER = re.compile(r"\d+")


# --- readings -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuTimes:
    """Seconds since boot summed over all CPUs."""

    busy: float
    total: float


@dataclass(frozen=True)
class MemoryInfo:
    total_bytes: int
    available_bytes: int


@dataclass(frozen=True)
class DiskCounters:
    """Cumulative counters of one disk: bytes and milliseconds with I/O in flight."""

    read_bytes: int
    written_bytes: int
    busy_ms: int


@dataclass(frozen=True)
class NetCounters:
    """Cumulative bytes of one interface."""

    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True)
class NetInterface:
    """One interface as the sampler sees it: counters, link speed (``None`` if unknown) and
    whether a device backs it (``/sys/class/net/<if>/device``)."""

    counters: NetCounters
    speed_mbps: int | None
    physical: bool


@dataclass(frozen=True)
class HostReading:
    """Everything read from the machine at time ``now`` (seconds; only differences matter)."""

    now: float
    cpu: CpuTimes
    memory: MemoryInfo
    load_average_1m: float
    disks: Mapping[str, DiskCounters]
    interfaces: Mapping[str, NetInterface]
    disk_usage: float
    pressure: Mapping[str, PressureStall] = field(default_factory=dict)


@dataclass(frozen=True)
class HostSample:
    """One sample of the machine; see the module docstring for each figure's meaning."""

    cpu_utilization: float
    memory_utilization: float
    memory_total_bytes: int
    load_average_1m: float
    disk_throughput_utilization: float
    disk_busy_utilization: float
    disk_usage: float
    net_receive_utilization: float
    net_transmit_utilization: float
    pressure: Mapping[str, PressureStall]


# --- from psutil's answers to readings (pure) -----------------------------------------------


def cpu_times_of(times: Mapping[str, float]) -> CpuTimes:
    """Busy and total time from ``psutil.cpu_times()._asdict()``; fields an old kernel does
    not have (``iowait``, ``steal``...) count as 0."""
    total = sum(times.get(name, 0.0) for name in _CPU_TOTAL)
    return CpuTimes(busy=total - sum(times.get(name, 0.0) for name in _CPU_IDLE), total=total)


def whole_disks(devices: Mapping[str, DiskCounters]) -> dict[str, DiskCounters]:
    """Drop partitions, and stacked/memory devices unless nothing else is left."""
    names = set(devices)
    disks = {
        name: counters
        for name, counters in devices.items()
        if not any(_is_partition_of(name, parent) for parent in names if parent != name)
    }
    physical = {
        name: counters
        for name, counters in disks.items()
        if not name.startswith(_STACKED_DISK_PREFIXES)
    }
    return physical or disks


def _is_partition_of(name: str, parent: str) -> bool:
    # The kernel names partition N of "sda" "sdaN", and of a disk whose name ends in a digit
    # ("nvme0n1", "mmcblk0") "<disk>pN" - so "nvme0n10" (a namespace) is no partition of
    # "nvme0n1".
    if not name.startswith(parent):
        return False
    suffix = _PARTITION_AFTER_DIGIT if parent[-1:].isdigit() else _PARTITION_AFTER_LETTER
    return suffix.fullmatch(name[len(parent) :]) is not None


def link_speed_mbps(isup: bool, speed: int) -> int | None:
    """An interface's link speed from ``psutil.net_if_stats()``: ``None`` when unknown (psutil
    reports 0) or when the interface is down."""
    return speed if isup and speed > 0 else None


def filesystem_usage(used_bytes: int, available_bytes: int) -> float:
    """Used share of a filesystem as ``df`` reports it (``psutil.disk_usage``'s ``used`` and
    ``free``): space reserved for root counts neither as used nor as available.  ``0.0`` for
    an empty (zero-size) filesystem."""
    capacity = used_bytes + available_bytes
    return _clip(used_bytes / capacity) if capacity > 0 else 0.0


# --- reading through psutil -----------------------------------------------------------------


def _proc(*parts: str) -> Path:
    return Path(psutil.PROCFS_PATH, *parts)


def _parsed(path: Path, read: Callable[[], _T]) -> _T:
    """``read()``, with psutil's parse errors (it has no error type of its own for them)
    turned into ``ValueError("<path>: ...")``; ``OSError`` passes through."""
    try:
        return read()
    except (ValueError, TypeError, KeyError, IndexError, AssertionError) as exc:
        raise ValueError(f"{path}: psutil cannot parse it: {type(exc).__name__}: {exc}") from exc


def read_cpu() -> CpuTimes:
    return cpu_times_of(_parsed(_proc("stat"), psutil.cpu_times)._asdict())


def read_memory() -> MemoryInfo:
    path = _proc("meminfo")
    memory = _parsed(path, psutil.virtual_memory)
    if memory.total <= 0:
        raise ValueError(f"{path}: MemTotal is 0")
    return MemoryInfo(total_bytes=memory.total, available_bytes=memory.available)


def read_disks() -> dict[str, DiskCounters]:
    """The whole disks' counters; none when ``diskstats`` is missing."""
    path = _proc("diskstats")
    if not path.exists():
        return {}
    devices = _parsed(path, lambda: psutil.disk_io_counters(perdisk=True, nowrap=False))
    return whole_disks(
        {
            name: DiskCounters(
                read_bytes=io.read_bytes, written_bytes=io.write_bytes, busy_ms=io.busy_time
            )
            for name, io in devices.items()
        }
    )


def read_interfaces(sys: Path = Path("/sys")) -> dict[str, NetInterface]:
    """Every interface but ``lo``; none when ``net/dev`` is missing."""
    path = _proc("net", "dev")
    try:
        counters = _parsed(path, lambda: psutil.net_io_counters(pernic=True, nowrap=False))
    except FileNotFoundError:
        return {}
    try:
        stats = psutil.net_if_stats()
    except OSError:  # an ioctl refused: speeds unknown, the default capacity applies
        stats = {}
    net = sys / "class" / "net"
    interfaces: dict[str, NetInterface] = {}
    for name, nic in counters.items():
        if name == "lo":
            continue
        stat = stats.get(name)
        interfaces[name] = NetInterface(
            counters=NetCounters(rx_bytes=nic.bytes_recv, tx_bytes=nic.bytes_sent),
            speed_mbps=None if stat is None else link_speed_mbps(stat.isup, stat.speed),
            physical=(net / name / "device").exists(),
        )
    return interfaces


# --- arithmetic -----------------------------------------------------------------------------


def _clip(value: float) -> float:
    if math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, value))


def _delta(new: float, old: float) -> float:
    # A counter that went backwards was reset (device/interface re-created): no activity known.
    return max(0, new - old)


def cpu_utilization(previous: CpuTimes, current: CpuTimes) -> float:
    total = _delta(current.total, previous.total)
    return _clip(_delta(current.busy, previous.busy) / total) if total else 0.0


def disk_utilizations(
    previous: Mapping[str, DiskCounters],
    current: Mapping[str, DiskCounters],
    elapsed_s: float,
    bandwidth_bytes_per_s: float,
) -> tuple[float, float]:
    """(throughput over ``bandwidth_bytes_per_s``, busiest disk's busy share) over
    ``elapsed_s``; disks present in only one reading are left out."""
    if elapsed_s <= 0:
        return 0.0, 0.0
    moved = 0.0
    busiest_ms = 0.0
    for name, now in current.items():
        before = previous.get(name)
        if before is None:
            continue
        moved += _delta(now.read_bytes, before.read_bytes)
        moved += _delta(now.written_bytes, before.written_bytes)
        busiest_ms = max(busiest_ms, _delta(now.busy_ms, before.busy_ms))
    throughput = moved / elapsed_s / bandwidth_bytes_per_s
    return _clip(throughput), _clip(busiest_ms / 1000.0 / elapsed_s)


def counted_interfaces(interfaces: Mapping[str, NetInterface]) -> dict[str, NetInterface]:
    """The interfaces whose bytes count: those backed by a device, or all when none is."""
    physical = {name: iface for name, iface in interfaces.items() if iface.physical}
    return physical or dict(interfaces)


def link_capacity_bytes_per_s(
    interfaces: Mapping[str, NetInterface], default_bytes_per_s: float
) -> float:
    """Summed link speed of ``interfaces`` in bytes/s, or the default when none reports one."""
    mbps = sum(iface.speed_mbps for iface in interfaces.values() if iface.speed_mbps)
    return mbps * 1e6 / 8 if mbps > 0 else default_bytes_per_s


def net_utilizations(
    previous: Mapping[str, NetInterface],
    current: Mapping[str, NetInterface],
    elapsed_s: float,
    default_link_bytes_per_s: float,
) -> tuple[float, float]:
    """(receive, transmit) bytes/s over the counted interfaces' capacity."""
    if elapsed_s <= 0:
        return 0.0, 0.0
    counted = counted_interfaces(current)
    capacity = link_capacity_bytes_per_s(counted, default_link_bytes_per_s)
    rx = tx = 0.0
    for name, now in counted.items():
        before = previous.get(name)
        if before is None:
            continue
        rx += _delta(now.counters.rx_bytes, before.counters.rx_bytes)
        tx += _delta(now.counters.tx_bytes, before.counters.tx_bytes)
    return _clip(rx / elapsed_s / capacity), _clip(tx / elapsed_s / capacity)


def compute_sample(
    previous: HostReading | None,
    current: HostReading,
    *,
    disk_bandwidth_bytes_per_s: float,
    default_link_bytes_per_s: float,
) -> HostSample:
    """The sample for ``current``; rate figures are ``0.0`` without a ``previous`` reading."""
    memory = current.memory
    cpu = disk_throughput = disk_busy = net_rx = net_tx = 0.0
    if previous is not None:
        elapsed = current.now - previous.now
        cpu = cpu_utilization(previous.cpu, current.cpu)
        disk_throughput, disk_busy = disk_utilizations(
            previous.disks, current.disks, elapsed, disk_bandwidth_bytes_per_s
        )
        net_rx, net_tx = net_utilizations(
            previous.interfaces, current.interfaces, elapsed, default_link_bytes_per_s
        )
    return HostSample(
        cpu_utilization=cpu,
        memory_utilization=_clip(1.0 - memory.available_bytes / memory.total_bytes),
        memory_total_bytes=memory.total_bytes,
        load_average_1m=current.load_average_1m,
        disk_throughput_utilization=disk_throughput,
        disk_busy_utilization=disk_busy,
        disk_usage=_clip(current.disk_usage),
        net_receive_utilization=net_rx,
        net_transmit_utilization=net_tx,
        pressure=dict(current.pressure),
    )


# --- the imperative shell -------------------------------------------------------------------


class HostSampler:
    """Reads the machine through psutil and turns consecutive readings into
    :class:`HostSample`\\ s.

    procfs is read at ``psutil.PROCFS_PATH``; ``sys`` is the root of sysfs, for
    ``class/net/<if>/device`` (tests point both at fake trees); ``disk_path`` names the
    filesystem for ``disk_usage``.  Not thread-safe: one caller samples.
    """

    def __init__(
        self,
        *,
        sys: Path = Path("/sys"),
        disk_path: Path = Path("/"),
        disk_bandwidth_bytes_per_s: float = 200e6,
        default_link_bytes_per_s: float = 125e6,
    ) -> None:
        if disk_bandwidth_bytes_per_s <= 0 or default_link_bytes_per_s <= 0:
            raise ValueError("bandwidths must be positive")
        self._sys = sys
        self._disk_path = disk_path
        self._disk_bandwidth = disk_bandwidth_bytes_per_s
        self._default_link = default_link_bytes_per_s
        self._previous: HostReading | None = None

    def sample(self, now: float) -> HostSample:
        """Read the machine at ``now`` and compare with the previous call's reading.

        ``now`` is in seconds; only the difference between calls is used, so a monotonic clock
        is best (wall-clock seconds do while the clock does not jump; a step backwards gives
        zero rates for that sample)."""
        current = self.read(now)
        sample = compute_sample(
            self._previous,
            current,
            disk_bandwidth_bytes_per_s=self._disk_bandwidth,
            default_link_bytes_per_s=self._default_link,
        )
        self._previous = current
        return sample

    def read(self, now: float) -> HostReading:
        """One :class:`HostReading` of the machine, stamped ``now``."""
        usage = psutil.disk_usage(str(self._disk_path))
        return HostReading(
            now=now,
            cpu=read_cpu(),
            memory=read_memory(),
            load_average_1m=psutil.getloadavg()[0],
            disks=read_disks(),
            interfaces=read_interfaces(self._sys),
            disk_usage=filesystem_usage(usage.used, usage.free),
            pressure=read_pressure(_proc("pressure")),
        )
