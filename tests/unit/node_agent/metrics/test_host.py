"""Host utilisation: the readers, fed two real /proc recordings through psutil (with
``psutil.PROCFS_PATH`` pointed at them), the pure conversions and arithmetic over two readings
(table-driven), and HostSampler over fake machines built from the recordings."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from node_agent.metrics import host
from node_agent.metrics.host import (
    CpuTimes,
    DiskCounters,
    HostReading,
    HostSampler,
    MemoryInfo,
    NetCounters,
    NetInterface,
)
from node_agent.metrics.pressure import parse_pressure

FIXTURES = Path(__file__).parent / "fixtures"
T0 = FIXTURES / "host_t0" / "proc"
T1 = FIXTURES / "host_t1" / "proc"
KIB = 1024
HZ = os.sysconf("SC_CLK_TCK")  # psutil reports jiffies / USER_HZ
HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast"
    "|bytes    packets errs drop fifo colls carrier compressed\n"
)

UseProc = Callable[[Path], Path]
Links = dict[str, SimpleNamespace]


def uptime(proc: Path) -> float:
    return float((proc / "uptime").read_text().split()[0])


@pytest.fixture
def use_proc(monkeypatch: pytest.MonkeyPatch) -> UseProc:
    """Points ``psutil.PROCFS_PATH`` at a proc root; monkeypatch restores it after the test."""

    def use(root: Path) -> Path:
        monkeypatch.setattr(psutil, "PROCFS_PATH", str(root))
        return root

    return use


@pytest.fixture
def links(monkeypatch: pytest.MonkeyPatch) -> Links:
    """``psutil.net_if_stats()`` asks the live kernel by ioctl (SIOCETHTOOL, SIOCGIFFLAGS), not
    a file, so no recording can answer it: tests answer from this table (interfaces missing
    from it are gone, as psutil drops an interface whose ioctl says ENODEV)."""
    table: Links = {}
    monkeypatch.setattr(psutil, "net_if_stats", lambda: dict(table))
    return table


def link(speed: int, *, isup: bool = True) -> SimpleNamespace:
    return SimpleNamespace(isup=isup, speed=speed)


@pytest.fixture
def recorded_loadavg(monkeypatch: pytest.MonkeyPatch) -> None:
    """``psutil.getloadavg()`` is ``os.getloadavg()``, whose C library reads ``/proc/loadavg``
    itself: answer what it would read under ``psutil.PROCFS_PATH``."""

    def getloadavg() -> tuple[float, float, float]:
        one, five, fifteen = Path(psutil.PROCFS_PATH, "loadavg").read_text().split()[:3]
        return float(one), float(five), float(fifteen)

    monkeypatch.setattr(psutil, "getloadavg", getloadavg)


def proc_with(root: Path, files: dict[str, str]) -> Path:
    """A proc root holding only ``files`` (path below the root: text)."""
    proc = root / "proc"
    for name, text in files.items():
        (proc / name).parent.mkdir(parents=True, exist_ok=True)
        (proc / name).write_text(text)
    return proc


# --- CPU ------------------------------------------------------------------------------------


def jiffies(*, busy: int, total: int) -> CpuTimes:
    return CpuTimes(busy=busy / HZ, total=total / HZ)


@pytest.mark.parametrize(
    ("recording", "expected"),
    [
        # cpu  145293 0 19741 355810 2240 0 658 2018 0 0
        (T0, jiffies(busy=145293 + 19741 + 658 + 2018, total=167710 + 355810 + 2240)),
        # cpu  145441 0 19763 355866 2240 0 659 2020 0 0
        (T1, jiffies(busy=145441 + 19763 + 659 + 2020, total=167883 + 355866 + 2240)),
    ],
)
def test_read_cpu_recorded(use_proc: UseProc, recording: Path, expected: CpuTimes) -> None:
    use_proc(recording)
    cpu = host.read_cpu()
    assert (cpu.busy, cpu.total) == pytest.approx((expected.busy, expected.total))


def test_read_cpu_guest_is_not_counted_twice(use_proc: UseProc, tmp_path: Path) -> None:
    use_proc(proc_with(tmp_path, {"stat": "cpu  10 1 2 30 4 5 6 7 900 900\ncpu0 1 1 1 1\n"}))
    cpu, expected = host.read_cpu(), jiffies(busy=31, total=65)
    assert (cpu.busy, cpu.total) == pytest.approx((expected.busy, expected.total))


ALL_FIELDS = {"user": 10, "nice": 1, "system": 2, "idle": 30, "iowait": 4, "irq": 5}


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        (ALL_FIELDS | {"softirq": 6, "steal": 7}, CpuTimes(busy=31, total=65)),
        # guest and guest_nice are already inside user and nice: not added again
        (
            ALL_FIELDS | {"softirq": 6, "steal": 7, "guest": 900, "guest_nice": 900},
            CpuTimes(busy=31, total=65),
        ),
        ({"user": 1, "nice": 2, "system": 3, "idle": 4}, CpuTimes(busy=6, total=10)),  # old
        ({"user": 0, "system": 0, "idle": 0}, CpuTimes(busy=0, total=0)),
    ],
)
def test_cpu_times_of(times: dict[str, float], expected: CpuTimes) -> None:
    assert host.cpu_times_of(times) == expected


# --- memory ---------------------------------------------------------------------------------


def meminfo(**kib: int) -> str:
    # the fields psutil warns about when missing, then the ones under test
    fields = {"Buffers": 0, "Cached": 0, "Shmem": 0, "Active": 0, "Inactive": 0} | kib
    return "".join(f"{key}: {value} kB\n" for key, value in fields.items())


@pytest.mark.parametrize(
    ("recording", "expected"),
    [
        (T0, MemoryInfo(24684092 * KIB, 24226880 * KIB)),
        (T1, MemoryInfo(24684092 * KIB, 24205992 * KIB)),
    ],
)
def test_read_memory_recorded(use_proc: UseProc, recording: Path, expected: MemoryInfo) -> None:
    use_proc(recording)
    assert host.read_memory() == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (meminfo(MemTotal=1000, MemFree=100, MemAvailable=250), MemoryInfo(1000 * KIB, 250 * KIB)),
        # what psutil changed: MemAvailable above MemTotal (containers) reads as MemFree...
        (meminfo(MemTotal=1000, MemFree=100, MemAvailable=5000), MemoryInfo(1000 * KIB, 100 * KIB)),
        # ...and a kernel without MemAvailable (< 3.14) nor Active(file) gets MemFree + Cached
        (meminfo(MemTotal=1000, MemFree=100, Cached=300), MemoryInfo(1000 * KIB, 400 * KIB)),
    ],
)
def test_read_memory(use_proc: UseProc, tmp_path: Path, text: str, expected: MemoryInfo) -> None:
    use_proc(proc_with(tmp_path, {"meminfo": text}))
    assert host.read_memory() == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("MemFree: 5 kB\nMemAvailable: 5 kB\n", r"psutil cannot parse it: KeyError: b'MemTotal:'"),
        ("MemTotal: ten kB\nMemAvailable: 5 kB\n", "psutil cannot parse it: ValueError: "),
        (meminfo(MemTotal=0, MemFree=0, MemAvailable=0), "MemTotal is 0"),
    ],
)
def test_read_memory_names_the_file_that_does_not_parse(
    use_proc: UseProc, tmp_path: Path, text: str, problem: str
) -> None:
    proc = use_proc(proc_with(tmp_path, {"meminfo": text}))
    with pytest.raises(ValueError, match="^" + re.escape(f"{proc / 'meminfo'}: ") + problem):
        host.read_memory()


# --- disks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recording", "vda"),
    [
        # 8 idle loop devices, the virtio disk vda and an unused zram0 (compressed RAM)
        (T0, DiskCounters(7517282 * 512, 10938896 * 512, busy_ms=37012)),
        (T1, DiskCounters(7518522 * 512, 11070032 * 512, busy_ms=37048)),
    ],
)
def test_read_disks_recorded_keeps_only_the_real_disk(
    use_proc: UseProc, recording: Path, vda: DiskCounters
) -> None:
    use_proc(recording)
    assert host.read_disks() == {"vda": vda}


COUNTERS_2_6 = "1 2 3 4 5 6 7 8 9 10 11"  # sectors read 3, written 7, io_ticks 10


@pytest.mark.parametrize(
    "line",
    [
        f"   8 0 sda {COUNTERS_2_6}\n",  # Linux 2.6 - 4.17: 11 counters
        f"   8 0 sda {COUNTERS_2_6} 12 13 14 15\n",  # 4.18: discards
        f"   8 0 sda {COUNTERS_2_6} 12 13 14 15 16 17\n",  # 5.5: flushes
    ],
)
def test_read_disks_every_diskstats_format(use_proc: UseProc, tmp_path: Path, line: str) -> None:
    partition = "   8 1 sda1 1 2 3 4\n"  # old kernels: 4 counters for a partition
    use_proc(proc_with(tmp_path, {"diskstats": line + partition}))
    assert host.read_disks() == {"sda": DiskCounters(3 * 512, 7 * 512, busy_ms=10)}


def test_read_disks_names_the_file_that_does_not_parse(use_proc: UseProc, tmp_path: Path) -> None:
    proc = use_proc(proc_with(tmp_path, {"diskstats": "   8 0 sda 1 2 3\n"}))
    with pytest.raises(ValueError, match="^" + re.escape(f"{proc / 'diskstats'}: psutil")):
        host.read_disks()


@pytest.mark.parametrize(
    ("names", "whole"),
    [
        (("sda", "sda1", "sda2", "sdb", "sdb1"), {"sda", "sdb"}),
        (("nvme0n1", "nvme0n1p1", "nvme0n10", "nvme0n10p3"), {"nvme0n1", "nvme0n10"}),
        (("mmcblk0", "mmcblk0p1", "mmcblk0boot0"), {"mmcblk0", "mmcblk0boot0"}),
        (("sda", "sda1", "dm-0", "md0", "loop0", "ram0", "zram0"), {"sda"}),
        (("dm-0", "dm-1", "loop0"), {"dm-0", "dm-1", "loop0"}),  # nothing else: use them
        ((), set()),
    ],
)
def test_whole_disks(names: tuple[str, ...], whole: set[str]) -> None:
    disks = host.whole_disks({name: DiskCounters(1, 2, 3) for name in names})
    assert set(disks) == whole
    assert all(d == DiskCounters(1, 2, 3) for d in disks.values())


# --- network --------------------------------------------------------------------------------


def fake_sys(root: Path, *, physical: tuple[str, ...] = ("eth0",)) -> Path:
    """``root/sys``: this VM's interfaces, ``class/net/<if>/device`` for the physical ones."""
    net = root / "sys" / "class" / "net"
    for name in ("eth0", "docker0", "ifb0", "ifb1", "lo"):
        (net / name).mkdir(parents=True, exist_ok=True)
    for name in physical:
        (net / name / "device").mkdir(exist_ok=True)
    return root / "sys"


@pytest.mark.parametrize(
    ("recording", "eth0", "docker0"),
    [
        (T0, NetCounters(rx_bytes=731244325, tx_bytes=1137251), NetCounters(0, 32536)),
        (T1, NetCounters(rx_bytes=731299621, tx_bytes=1213397), NetCounters(0, 32536)),
    ],
)
def test_read_interfaces_recorded_skips_lo(
    use_proc: UseProc,
    links: Links,
    tmp_path: Path,
    recording: Path,
    eth0: NetCounters,
    docker0: NetCounters,
) -> None:
    use_proc(recording)
    # as the ioctls answer on the recording VM: virtio reports no speed, docker0 has no carrier
    links.update(eth0=link(0), docker0=link(0, isup=False), ifb0=link(0, isup=False))
    links["ifb1"] = link(10000)  # and a made-up speed, to see it reach the right interface
    assert host.read_interfaces(fake_sys(tmp_path)) == {
        "eth0": NetInterface(eth0, speed_mbps=None, physical=True),
        "ifb0": NetInterface(NetCounters(0, 0), speed_mbps=None, physical=False),
        "ifb1": NetInterface(NetCounters(0, 0), speed_mbps=10000, physical=False),
        "docker0": NetInterface(docker0, speed_mbps=None, physical=False),
    }


@pytest.mark.parametrize(
    ("isup", "speed", "mbps"),
    [
        (True, 10000, 10000),
        (True, 0, None),  # psutil's "unknown" (SPEED_UNKNOWN, EOPNOTSUPP, EINVAL)
        (False, 1000, None),  # down: sysfs would refuse the speed, the ioctl does not
    ],
)
def test_link_speed_mbps(isup: bool, speed: int, mbps: int | None) -> None:
    assert host.link_speed_mbps(isup, speed) == mbps


def test_read_interfaces_without_link_stats_has_no_speeds(
    use_proc: UseProc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_proc(proc_with(tmp_path, {"net/dev": HEADER + "eth0: 5" + " 0" * 7 + " 6" + " 0" * 7}))

    def refused() -> dict[str, object]:
        raise PermissionError("ioctl(SIOCETHTOOL)")

    monkeypatch.setattr(psutil, "net_if_stats", refused)
    assert host.read_interfaces(fake_sys(tmp_path)) == {
        "eth0": NetInterface(NetCounters(5, 6), speed_mbps=None, physical=True)
    }


@pytest.mark.parametrize(
    "line",
    [
        "eth0: 1 2 3\n",  # psutil: not enough values to unpack
        "eth0 1 2 3\n",  # psutil: AssertionError on the missing colon
        "eth0: x" + " 0" * 15 + "\n",
    ],
)
def test_read_interfaces_names_the_file_that_does_not_parse(
    use_proc: UseProc, links: Links, tmp_path: Path, line: str
) -> None:
    proc = use_proc(proc_with(tmp_path, {"net/dev": HEADER + line}))
    with pytest.raises(ValueError, match="^" + re.escape(f"{proc / 'net' / 'dev'}: psutil")):
        host.read_interfaces(fake_sys(tmp_path))


def test_missing_diskstats_and_net_dev_read_as_no_devices(
    use_proc: UseProc, links: Links, tmp_path: Path
) -> None:
    use_proc(proc_with(tmp_path, {"stat": "cpu  1 2 3 4 5 6 7 8 9 10\n"}))
    assert host.read_disks() == {}  # and not the live /sys/block psutil would fall back to
    assert host.read_interfaces(fake_sys(tmp_path)) == {}


def test_missing_stat_is_an_os_error(use_proc: UseProc, tmp_path: Path) -> None:
    use_proc(proc_with(tmp_path, {}))
    with pytest.raises(FileNotFoundError):
        host.read_cpu()


# --- filesystem usage -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("used", "available", "usage"),
    [
        (0, 95, 0.0),
        (60, 35, 60 / 95),  # what is reserved for root is neither used nor available
        (95, 0, 1.0),
        (0, 0, 0.0),
    ],
)
def test_filesystem_usage_as_df(used: int, available: int, usage: float) -> None:
    assert host.filesystem_usage(used, available) == pytest.approx(usage)


# --- arithmetic over two readings -----------------------------------------------------------


HALF_USED = MemoryInfo(1000, 250)


def reading(
    now: float,
    *,
    cpu: tuple[float, float] = (0, 0),
    disks: dict[str, DiskCounters] | None = None,
    interfaces: dict[str, NetInterface] | None = None,
    memory: MemoryInfo = HALF_USED,
) -> HostReading:
    return HostReading(
        now=now,
        cpu=CpuTimes(*cpu),
        memory=memory,
        load_average_1m=3.5,
        disks=disks or {},
        interfaces=interfaces or {},
        disk_usage=0.5,
    )


def nic(rx: int, tx: int, speed: int | None = None, physical: bool = True) -> NetInterface:
    return NetInterface(NetCounters(rx, tx), speed, physical)


def compute(previous: HostReading | None, current: HostReading) -> host.HostSample:
    return host.compute_sample(
        previous, current, disk_bandwidth_bytes_per_s=1000.0, default_link_bytes_per_s=100.0
    )


def test_first_sample_has_zero_rates_but_instant_figures() -> None:
    sample = compute(None, reading(5.0, cpu=(50, 100)))
    assert (sample.cpu_utilization, sample.disk_throughput_utilization) == (0.0, 0.0)
    assert (sample.net_receive_utilization, sample.disk_busy_utilization) == (0.0, 0.0)
    assert sample.memory_utilization == 0.75
    assert (sample.memory_total_bytes, sample.load_average_1m, sample.disk_usage) == (
        1000,
        3.5,
        0.5,
    )


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ((100, 400), (130, 500), 0.3),
        ((1.0, 4.0), (1.3, 5.0), 0.3),  # psutil's seconds
        ((100, 400), (100, 400), 0.0),  # no time passed
        ((100, 400), (50, 300), 0.0),  # went backwards
    ],
)
def test_cpu_utilization(
    before: tuple[float, float], after: tuple[float, float], expected: float
) -> None:
    assert host.cpu_utilization(CpuTimes(*before), CpuTimes(*after)) == pytest.approx(expected)


def test_disk_rates_sum_throughput_and_take_the_busiest_disk() -> None:
    before = {
        "a": DiskCounters(0, 0, 0),
        "b": DiskCounters(10, 10, 100),
        "gone": DiskCounters(0, 0, 0),
        "reset": DiskCounters(10**9, 10**9, 10**6),
    }
    after = {
        "a": DiskCounters(200, 200, 500),
        "b": DiskCounters(110, 210, 1100),
        "new": DiskCounters(9, 9, 9),
        "reset": DiskCounters(5, 5, 5),  # re-created: no activity known
    }
    throughput, busy = host.disk_utilizations(before, after, 2.0, 2048.0)
    assert throughput == pytest.approx((200 + 200 + 100 + 200) / 2.0 / 2048.0)
    assert busy == pytest.approx(1000 / 2000)  # disk b: 1000 ms busy out of 2000 ms


@pytest.mark.parametrize(
    ("interfaces", "capacity"),
    [
        ({"eth0": nic(0, 0, 1000), "eth1": nic(0, 0, 10000)}, 11000e6 / 8),
        ({"eth0": nic(0, 0, None)}, 7.0),  # no speed reported (virtio): the default
        ({"eth0": nic(0, 0, None), "eth1": nic(0, 0, 100)}, 100e6 / 8),
    ],
)
def test_link_capacity(interfaces: dict[str, NetInterface], capacity: float) -> None:
    assert host.link_capacity_bytes_per_s(interfaces, 7.0) == pytest.approx(capacity)


def test_network_counts_physical_interfaces_only_when_there_are_some() -> None:
    before = {"eth0": nic(0, 0), "docker0": nic(0, 0, physical=False)}
    after = {"eth0": nic(100, 50), "docker0": nic(100, 50, physical=False)}
    # docker0's bytes also crossed eth0; counting both would double them
    assert host.net_utilizations(before, after, 1.0, 1000.0) == (0.1, 0.05)
    virtual_only = {"veth1": nic(0, 0, physical=False)}, {"veth1": nic(300, 0, physical=False)}
    assert host.net_utilizations(*virtual_only, 1.0, 1000.0) == (0.3, 0.0)


def test_every_utilisation_is_clipped_to_one() -> None:
    previous = reading(
        0.0,
        cpu=(0, 0),
        disks={"sda": DiskCounters(0, 0, 0)},
        interfaces={"eth0": nic(0, 0)},
    )
    current = reading(
        1.0,
        cpu=(200, 100),  # busy > total can only be garbage, but must not leave [0, 1]
        disks={"sda": DiskCounters(10**6, 10**6, 5000)},
        interfaces={"eth0": nic(10**6, 10**6)},
        memory=MemoryInfo(100, 0),
    )
    sample = compute(previous, current)
    assert sample.cpu_utilization == 1.0
    assert sample.disk_throughput_utilization == 1.0
    assert sample.disk_busy_utilization == 1.0
    assert (sample.net_receive_utilization, sample.net_transmit_utilization) == (1.0, 1.0)
    assert sample.memory_utilization == 1.0


def test_no_elapsed_time_gives_zero_rates_not_a_division_error() -> None:
    previous = reading(3.0, disks={"sda": DiskCounters(0, 0, 0)}, interfaces={"e": nic(0, 0)})
    current = reading(3.0, disks={"sda": DiskCounters(8, 8, 8)}, interfaces={"e": nic(8, 8)})
    sample = compute(previous, current)
    assert sample.disk_throughput_utilization == sample.net_receive_utilization == 0.0


# --- HostSampler over fake machines built from the two recordings ---------------------------


def fake_machine(root: Path, recording: Path) -> tuple[Path, Path]:
    """``root/proc`` = one recording; ``root/sys`` = this VM's interfaces."""
    proc = root / "proc"
    if proc.exists():
        shutil.rmtree(proc)
    shutil.copytree(recording, proc)
    return proc, fake_sys(root)


@pytest.fixture
def recording_vm(links: Links, recorded_loadavg: None) -> Links:
    """The recording VM's kernel answers: eth0 (virtio) up without a speed, docker0 no carrier."""
    links.update(eth0=link(0), docker0=link(0, isup=False))
    return links


def test_sampler_over_two_real_recordings(
    use_proc: UseProc, recording_vm: Links, tmp_path: Path
) -> None:
    proc, sys = fake_machine(tmp_path, T0)
    use_proc(proc)
    sampler = HostSampler(sys=sys, disk_path=tmp_path)
    first = sampler.sample(uptime(T0))
    assert first.cpu_utilization == 0.0
    assert first.disk_throughput_utilization == first.disk_busy_utilization == 0.0
    assert first.net_receive_utilization == first.net_transmit_utilization == 0.0
    assert first.memory_utilization == pytest.approx(1 - 24226880 / 24684092)
    assert first.pressure == {
        resource: parse_pressure((T0 / "pressure" / resource).read_text())
        for resource in ("cpu", "memory", "io")
    }

    fake_machine(tmp_path, T1)
    second = sampler.sample(uptime(T1))
    elapsed = 2639.67 - 2638.53  # the recordings' /proc/uptime
    # cpu  145293 0 19741 355810 2240 0 658 2018 -> cpu  145441 0 19763 355866 2240 0 659 2020
    assert second.cpu_utilization == pytest.approx((148 + 22 + 1 + 2) / (148 + 22 + 56 + 1 + 2))
    # vda: sectors read 7517282 -> 7518522, written 10938896 -> 11070032, io_ticks 37012 -> 37048
    vda_bytes = ((7518522 - 7517282) + (11070032 - 10938896)) * 512
    assert second.disk_throughput_utilization == pytest.approx(vda_bytes / elapsed / 200e6)
    assert second.disk_busy_utilization == pytest.approx(36 / 1000 / elapsed)
    # eth0 (no speed: the 1 Gb/s default): rx 731244325 -> 731299621, tx 1137251 -> 1213397
    assert second.net_receive_utilization == pytest.approx(55296 / elapsed / 125e6)
    assert second.net_transmit_utilization == pytest.approx(76146 / elapsed / 125e6)
    assert second.memory_utilization == pytest.approx(1 - 24205992 / 24684092)
    assert second.memory_total_bytes == 24684092 * KIB
    assert second.load_average_1m == 0.24  # "0.24 0.42 0.61 3/101 29659"
    usage = shutil.disk_usage(tmp_path)  # used: f_blocks - f_bfree, free: f_bavail, as df
    assert second.disk_usage == pytest.approx(usage.used / (usage.used + usage.free), abs=0.01)


def test_sampler_link_speeds_and_bandwidth_are_the_denominators(
    use_proc: UseProc, recording_vm: Links, tmp_path: Path
) -> None:
    proc, sys = fake_machine(tmp_path, T0)
    use_proc(proc)
    recording_vm["eth0"] = link(10)  # 10 Mb/s = 1.25e6 bytes/s
    recording_vm["docker0"] = link(10000, isup=False)  # virtual, down: neither counts
    sampler = HostSampler(sys=sys, disk_path=tmp_path, disk_bandwidth_bytes_per_s=1e6)
    sampler.sample(uptime(T0))
    fake_machine(tmp_path, T1)
    sample = sampler.sample(uptime(T1))
    elapsed = 2639.67 - 2638.53
    assert sample.net_receive_utilization == pytest.approx(55296 / elapsed / 1.25e6)
    assert sample.disk_throughput_utilization == 1.0  # 67.8 MB over ~1 s on a "1 MB/s" disk


def test_sampler_without_diskstats_and_net_dev_reports_no_activity(
    use_proc: UseProc, recording_vm: Links, tmp_path: Path
) -> None:
    proc, sys = fake_machine(tmp_path, T0)
    use_proc(proc)
    (proc / "diskstats").unlink()
    (proc / "net" / "dev").unlink()
    shutil.rmtree(proc / "pressure")
    sampler = HostSampler(sys=sys, disk_path=tmp_path)
    sampler.sample(1.0)
    sample = sampler.sample(2.0)
    assert sample.disk_busy_utilization == sample.net_transmit_utilization == 0.0
    assert sample.pressure == {}


def test_sampler_names_the_file_that_does_not_parse(
    use_proc: UseProc, recording_vm: Links, tmp_path: Path
) -> None:
    proc, sys = fake_machine(tmp_path, T0)
    use_proc(proc)
    (proc / "stat").write_text("intr 1 2 3\n")
    with pytest.raises(ValueError, match="^" + re.escape(f"{proc / 'stat'}: psutil cannot")):
        HostSampler(sys=sys, disk_path=tmp_path).sample(1.0)


def test_sampler_rejects_non_positive_bandwidths() -> None:
    with pytest.raises(ValueError, match="positive"):
        HostSampler(disk_bandwidth_bytes_per_s=0)


def test_sampler_on_the_real_machine() -> None:
    assert psutil.PROCFS_PATH == "/proc"  # no test above leaked its recording
    sampler = HostSampler()
    first = sampler.sample(time.monotonic())
    assert first.cpu_utilization == 0.0
    assert 0.0 < first.memory_utilization < 1.0
    assert first.memory_total_bytes > 0
    assert first.load_average_1m >= 0.0
    assert 0.0 < first.disk_usage <= 1.0  # "/" holds at least this repository
    sum(range(200_000))  # some CPU time, so that jiffies move between the two readings
    second = sampler.sample(time.monotonic())
    for figure in (
        second.cpu_utilization,
        second.memory_utilization,
        second.disk_throughput_utilization,
        second.disk_busy_utilization,
        second.disk_usage,
        second.net_receive_utilization,
        second.net_transmit_utilization,
    ):
        assert 0.0 <= figure <= 1.0
    if Path("/proc/pressure").is_dir():
        assert set(second.pressure) == {"cpu", "memory", "io"}


def test_sampler_counters_going_backwards_count_as_no_activity(
    use_proc: UseProc, recording_vm: Links, tmp_path: Path
) -> None:
    # T1 then T0: every disk and interface counter steps back, as when devices are re-created
    proc, sys = fake_machine(tmp_path, T1)
    use_proc(proc)
    sampler = HostSampler(sys=sys, disk_path=tmp_path)
    sampler.sample(1.0)
    fake_machine(tmp_path, T0)
    sample = sampler.sample(2.0)
    assert sample.disk_throughput_utilization == sample.disk_busy_utilization == 0.0
    assert sample.net_receive_utilization == sample.net_transmit_utilization == 0.0
    assert sample.cpu_utilization == 0.0
