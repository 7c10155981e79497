"""Machine utilisation for the node agent's ``NodeMetrics``, from ``/proc`` and ``/sys``.

Every figure of :class:`HostSample` (all utilisations are fractions clipped to [0, 1]):

``cpu_utilization``
    Busy jiffies / total jiffies of the whole machine (all CPUs) between the previous sample and
    this one, from the aggregate ``cpu`` line of ``/proc/stat``.  Busy is everything but
    ``idle`` and ``iowait``; ``guest``/``guest_nice`` are left out of the total because the
    kernel already counts them in ``user``/``nice``.
``memory_utilization``, ``memory_total_bytes``
    ``1 - MemAvailable / MemTotal`` now, and ``MemTotal`` in bytes (``/proc/meminfo``).
``load_average_1m``
    The 1-minute load average now, as ``/proc/loadavg`` reports it (runnable + uninterruptible
    tasks; *not* divided by the number of CPUs, so not clipped either).
``disk_throughput_utilization``
    (sectors read + written) x 512 bytes per second over all whole disks, divided by the
    configured ``disk_bandwidth_bytes_per_s`` (``/proc/diskstats`` counts 512-byte sectors
    whatever the device's real sector size).
``disk_busy_utilization``
    The busiest whole disk's share of wall-clock time with I/O in flight (``io_ticks``, ms).
``disk_usage``
    Used share of the filesystem holding ``disk_path`` now, as ``df`` computes it:
    ``used / (used + available to unprivileged users)`` (``os.statvfs``).
``net_receive_utilization``, ``net_transmit_utilization``
    Bytes per second received/sent over the counted interfaces divided by their summed link
    speed (``/proc/net/dev``, ``/sys/class/net/<if>/speed`` in Mb/s).  ``lo`` is never counted.
    When some interfaces are backed by a device (``/sys/class/net/<if>/device`` exists) only
    those are counted: bridges, veths, VLANs and tunnels carry the same bytes a second time.
    Interfaces that report no speed (``-1``, unreadable: virtio, bridges) add no capacity; when
    none reports one, the capacity is ``default_link_bytes_per_s``.
``pressure``
    The machine's PSI now (:func:`node_agent.metrics.pressure.read_pressure`); resources the
    kernel does not report are absent.

Rate figures (CPU, disk, network) compare two readings; the first sample of a
:class:`HostSampler` has none to compare with and reports ``0.0`` for them.  A counter that went
backwards (a device or interface re-created) counts as no activity, and devices or interfaces
present in only one of the two readings are left out.

"Whole disk" excludes partitions (another listed device's name plus digits, or plus ``p`` and
digits when that name ends in a digit: ``sda1``, ``nvme0n1p2``) and stacked or memory-backed
devices (``loop``, ``ram``, ``zram``, ``dm-``, ``md``), whose I/O is also counted on the disks
beneath them or never reaches a disk; those are used only when nothing else is listed.

The parsers are pure functions of file text and raise ``ValueError("<file>: <problem>")``;
:func:`compute_sample` is a pure function of two readings.  :class:`HostSampler` only reads files
and remembers the previous reading.  ``/proc/stat``, ``/proc/meminfo`` and ``/proc/loadavg`` must
be readable (``OSError`` otherwise); a missing ``/proc/diskstats`` or ``/proc/net/dev`` (some
sandboxes) reads as no devices.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from node_agent.metrics.pressure import PressureStall, read_pressure

SECTOR_BYTES = 512
"""``/proc/diskstats`` always counts 512-byte sectors (include/linux/blk_types.h)."""

_STACKED_DISK_PREFIXES = ("loop", "ram", "zram", "dm-", "md")
_PARTITION_AFTER_DIGIT = re.compile(r"p\d+")
_PARTITION_AFTER_LETTER = re.compile(r"\d+")
_DISKSTATS_MIN_FIELDS = 14  # major minor name + 11 counters (Linux >= 2.6.25 for partitions)
_NET_DEV_FIELDS = 16  # 8 receive + 8 transmit counters


# --- readings -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies since boot summed over all CPUs."""

    busy: int
    total: int


@dataclass(frozen=True)
class MemoryInfo:
    total_bytes: int
    available_bytes: int


@dataclass(frozen=True)
class DiskCounters:
    """Cumulative counters of one disk: 512-byte sectors and milliseconds with I/O in flight."""

    sectors_read: int
    sectors_written: int
    io_ticks_ms: int


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


# --- parsers --------------------------------------------------------------------------------


def _int(text: str, source: str, what: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{source}: {what}: {text!r} is not a counter")
    return int(text)


def parse_proc_stat(text: str, *, source: str = "/proc/stat") -> CpuTimes:
    """Busy and total jiffies from the aggregate ``cpu`` line (not ``cpu0``...)."""
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] != "cpu":
            continue
        # user nice system idle iowait irq softirq steal guest guest_nice; iowait and later
        # columns appeared over the years, so only the first four are required.
        if len(words) < 5:
            raise ValueError(f"{source}: cpu line has {len(words) - 1} columns, expected >= 4")
        names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
        values = [
            _int(word, source, f"cpu {name}") for word, name in zip(words[1:], names, strict=False)
        ]
        total = sum(values)
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return CpuTimes(busy=total - idle, total=total)
    raise ValueError(f"{source}: no aggregate 'cpu' line")


def parse_meminfo(text: str, *, source: str = "/proc/meminfo") -> MemoryInfo:
    """``MemTotal`` and ``MemAvailable`` in bytes (the kernel writes kB = KiB)."""
    wanted = {"MemTotal": 0, "MemAvailable": 0}
    found: set[str] = set()
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep or key not in wanted:
            continue
        words = rest.split()
        if len(words) != 2 or words[1] != "kB":
            raise ValueError(f"{source}: {key}: {rest.strip()!r} is not '<n> kB'")
        wanted[key] = _int(words[0], source, key) * 1024
        found.add(key)
    for key in wanted:
        if key not in found:
            raise ValueError(f"{source}: {key} missing")
    if wanted["MemTotal"] == 0:
        raise ValueError(f"{source}: MemTotal is 0")
    return MemoryInfo(total_bytes=wanted["MemTotal"], available_bytes=wanted["MemAvailable"])


def parse_loadavg(text: str, *, source: str = "/proc/loadavg") -> float:
    """The 1-minute load average (first field)."""
    words = text.split()
    if not words:
        raise ValueError(f"{source}: empty")
    try:
        value = float(words[0])
    except ValueError:
        raise ValueError(f"{source}: load1 {words[0]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{source}: load1 {words[0]!r} is not a load average")
    return value


def parse_diskstats(text: str, *, source: str = "/proc/diskstats") -> dict[str, DiskCounters]:
    """Counters of the whole disks (see the module docstring for which devices count)."""
    devices: dict[str, DiskCounters] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words:
            continue
        if len(words) < _DISKSTATS_MIN_FIELDS:
            raise ValueError(
                f"{source}: line {number}: {len(words)} fields, expected >= {_DISKSTATS_MIN_FIELDS}"
            )
        name = words[2]
        where = f"line {number} ({name})"
        # Fields after the name: reads, reads merged, sectors read(2), ms reading, writes,
        # writes merged, sectors written(6), ms writing, in flight, io_ticks(9), ...
        devices[name] = DiskCounters(
            sectors_read=_int(words[5], source, f"{where} sectors read"),
            sectors_written=_int(words[9], source, f"{where} sectors written"),
            io_ticks_ms=_int(words[12], source, f"{where} io_ticks"),
        )
    return whole_disks(devices)


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


def parse_net_dev(text: str, *, source: str = "/proc/net/dev") -> dict[str, NetCounters]:
    """Received and transmitted bytes per interface, without ``lo``."""
    interfaces: dict[str, NetCounters] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        name, sep, rest = line.partition(":")
        if "|" in line or not line.strip():
            continue  # the two header lines
        if not sep:
            raise ValueError(f"{source}: line {number}: no 'interface:' prefix")
        name = name.strip()
        words = rest.split()
        if len(words) < _NET_DEV_FIELDS:
            raise ValueError(
                f"{source}: line {number} ({name}): {len(words)} counters, "
                f"expected {_NET_DEV_FIELDS}"
            )
        if name == "lo":
            continue
        interfaces[name] = NetCounters(
            rx_bytes=_int(words[0], source, f"{name} receive bytes"),
            tx_bytes=_int(words[8], source, f"{name} transmit bytes"),
        )
    return interfaces


def parse_link_speed(text: str, *, source: str = "speed") -> int | None:
    """Link speed in Mb/s from ``/sys/class/net/<if>/speed``; ``None`` when unknown (<= 0)."""
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"{source}: {text.strip()!r} is not a speed in Mb/s") from None
    return value if value > 0 else None


def filesystem_usage(blocks: int, free_blocks: int, available_blocks: int) -> float:
    """Used share of a filesystem as ``df`` reports it: blocks reserved for root count neither
    as used nor as available.  ``0.0`` for an empty (zero-size) filesystem."""
    used = blocks - free_blocks
    capacity = used + available_blocks
    return _clip(used / capacity) if capacity > 0 else 0.0


# --- arithmetic -----------------------------------------------------------------------------


def _clip(value: float) -> float:
    if math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, value))


def _delta(new: int, old: int) -> int:
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
    sectors = 0
    busiest_ms = 0
    for name, now in current.items():
        before = previous.get(name)
        if before is None:
            continue
        sectors += _delta(now.sectors_read, before.sectors_read)
        sectors += _delta(now.sectors_written, before.sectors_written)
        busiest_ms = max(busiest_ms, _delta(now.io_ticks_ms, before.io_ticks_ms))
    throughput = sectors * SECTOR_BYTES / elapsed_s / bandwidth_bytes_per_s
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
    rx = tx = 0
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


def _read_optional(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def _link_speed(net_dir: Path) -> int | None:
    path = net_dir / "speed"
    try:
        text = path.read_text()
    except OSError:
        return None  # EINVAL for links that are down or have no speed (virtual ones)
    return parse_link_speed(text, source=str(path))


class HostSampler:
    """Reads the machine's files and turns consecutive readings into :class:`HostSample`\\ s.

    ``proc`` and ``sys`` are the roots of procfs and sysfs (tests point them at fake trees);
    ``disk_path`` names the filesystem for ``disk_usage``.  Not thread-safe: one caller samples.
    """

    def __init__(
        self,
        *,
        proc: Path = Path("/proc"),
        sys: Path = Path("/sys"),
        disk_path: Path = Path("/"),
        disk_bandwidth_bytes_per_s: float = 200e6,
        default_link_bytes_per_s: float = 125e6,
    ) -> None:
        if disk_bandwidth_bytes_per_s <= 0 or default_link_bytes_per_s <= 0:
            raise ValueError("bandwidths must be positive")
        self._proc = proc
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
        proc = self._proc
        net_dir = self._sys / "class" / "net"
        interfaces = {
            name: NetInterface(
                counters=counters,
                speed_mbps=_link_speed(net_dir / name),
                physical=(net_dir / name / "device").exists(),
            )
            for name, counters in parse_net_dev(
                _read_optional(proc / "net" / "dev"), source=str(proc / "net" / "dev")
            ).items()
        }
        fs = os.statvfs(self._disk_path)
        return HostReading(
            now=now,
            cpu=parse_proc_stat((proc / "stat").read_text(), source=str(proc / "stat")),
            memory=parse_meminfo((proc / "meminfo").read_text(), source=str(proc / "meminfo")),
            load_average_1m=parse_loadavg(
                (proc / "loadavg").read_text(), source=str(proc / "loadavg")
            ),
            disks=parse_diskstats(
                _read_optional(proc / "diskstats"), source=str(proc / "diskstats")
            ),
            interfaces=interfaces,
            disk_usage=filesystem_usage(fs.f_blocks, fs.f_bfree, fs.f_bavail),
            pressure=read_pressure(proc / "pressure"),
        )
