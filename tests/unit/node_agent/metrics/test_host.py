"""Host utilisation: /proc and /sys parsers (table-driven, on recorded files), the arithmetic
over two readings, and HostSampler over fake trees built from two real recordings."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

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


def uptime(proc: Path) -> float:
    return float((proc / "uptime").read_text().split()[0])


# --- parsers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # recorded: cpu  145441 0 19763 355866 2240 0 659 2020 0 0
        (
            (T1 / "stat").read_text(),
            CpuTimes(
                busy=145441 + 19763 + 659 + 2020, total=145441 + 19763 + 355866 + 2240 + 659 + 2020
            ),
        ),
        # guest and guest_nice are already inside user and nice: not added again
        ("cpu  10 1 2 30 4 5 6 7 900 900\ncpu0 1 1 1 1 1 1 1 1 1 1\n", CpuTimes(31, 65)),
        ("cpu0 9 9 9 9\ncpu  1 2 3 4\n", CpuTimes(busy=6, total=10)),  # old kernel: 4 columns
    ],
)
def test_parse_proc_stat(text: str, expected: CpuTimes) -> None:
    assert host.parse_proc_stat(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("cpu0 1 2 3 4 5\nintr 5\n", "no aggregate 'cpu' line"),
        ("cpu  1 2 3\n", "cpu line has 3 columns, expected >= 4"),
        ("cpu  1 2 x 4 5\n", "cpu system: 'x' is not a counter"),
    ],
)
def test_parse_proc_stat_rejects_garbage(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"^/proc/stat: {problem}"):
        host.parse_proc_stat(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ((T1 / "meminfo").read_text(), MemoryInfo(24684092 * KIB, 24205992 * KIB)),
        ("MemAvailable: 5 kB\nMemTotal:  10 kB\nHugePages_Total: 0\n", MemoryInfo(10240, 5120)),
    ],
)
def test_parse_meminfo(text: str, expected: MemoryInfo) -> None:
    assert host.parse_meminfo(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("MemTotal: 10 kB\nMemFree: 5 kB\n", "MemAvailable missing"),
        ("MemTotal: 10 MB\nMemAvailable: 5 kB\n", "MemTotal: '10 MB' is not '<n> kB'"),
        ("MemTotal: ten kB\nMemAvailable: 5 kB\n", "MemTotal: 'ten' is not a counter"),
        ("MemTotal: 0 kB\nMemAvailable: 0 kB\n", "MemTotal is 0"),
    ],
)
def test_parse_meminfo_rejects_garbage(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"^/proc/meminfo: {problem}"):
        host.parse_meminfo(text)


def test_parse_loadavg() -> None:
    assert host.parse_loadavg((T1 / "loadavg").read_text()) == 0.24
    for text in ("", "x 1 2 3/4 5", "-1 0 0 1/1 1", "inf 0 0 1/1 1"):
        with pytest.raises(ValueError, match=r"^/proc/loadavg: "):
            host.parse_loadavg(text)


def test_parse_diskstats_recorded_keeps_only_the_real_disk() -> None:
    # recorded: 8 idle loop devices, the virtio disk vda and an unused zram0 (compressed RAM)
    assert host.parse_diskstats((T1 / "diskstats").read_text()) == {
        "vda": DiskCounters(sectors_read=7518522, sectors_written=11070032, io_ticks_ms=37048)
    }


def _diskstats(*names: str) -> str:
    # 17 counters after the name, as Linux >= 5.5 writes; sectors 1/2 and io_ticks 3 per line.
    return "".join(f"   8 0 {name} 0 0 1 0 0 0 2 0 0 3 0 0 0 0 0 0 0\n" for name in names)


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
def test_parse_diskstats_chooses_whole_disks(names: tuple[str, ...], whole: set[str]) -> None:
    disks = host.parse_diskstats(_diskstats(*names))
    assert set(disks) == whole
    assert all(d == DiskCounters(1, 2, 3) for d in disks.values())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("   8 0 sda1 1 2 3 4\n", "line 1: 7 fields, expected >= 14"),
        (_diskstats("sda").replace(" 0 0 1 ", " 0 0 -1 ", 1), r"line 1 \(sda\) sectors read"),
    ],
)
def test_parse_diskstats_rejects_garbage(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"^/proc/diskstats: {problem}"):
        host.parse_diskstats(text)


def test_parse_net_dev_recorded_skips_lo() -> None:
    assert host.parse_net_dev((T1 / "net" / "dev").read_text()) == {
        "ifb0": NetCounters(0, 0),
        "ifb1": NetCounters(0, 0),
        "eth0": NetCounters(rx_bytes=731299621, tx_bytes=1213397),
        "docker0": NetCounters(rx_bytes=0, tx_bytes=32536),
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("eth0 1 2 3\n", "line 1: no 'interface:' prefix"),
        ("eth0: 1 2 3\n", r"line 1 \(eth0\): 3 counters, expected 16"),
        ("eth0: x" + " 0" * 15 + "\n", "eth0 receive bytes: 'x' is not a counter"),
    ],
)
def test_parse_net_dev_rejects_garbage(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"^/proc/net/dev: {problem}"):
        host.parse_net_dev(text)


@pytest.mark.parametrize(("text", "mbps"), [("10000\n", 10000), ("-1\n", None), ("0\n", None)])
def test_parse_link_speed(text: str, mbps: int | None) -> None:
    assert host.parse_link_speed(text) == mbps


def test_parse_link_speed_rejects_garbage() -> None:
    with pytest.raises(ValueError, match=r"^/sys/class/net/eth0/speed: 'fast'"):
        host.parse_link_speed("fast\n", source="/sys/class/net/eth0/speed")


@pytest.mark.parametrize(
    ("blocks", "free", "available", "usage"),
    [
        (100, 100, 95, 0.0),
        (100, 40, 35, 60 / 95),  # the 5 blocks reserved for root are neither used nor free
        (100, 5, 0, 1.0),
        (0, 0, 0, 0.0),
    ],
)
def test_filesystem_usage_as_df(blocks: int, free: int, available: int, usage: float) -> None:
    assert host.filesystem_usage(blocks, free, available) == pytest.approx(usage)


# --- arithmetic over two readings -----------------------------------------------------------


HALF_USED = MemoryInfo(1000, 250)


def reading(
    now: float,
    *,
    cpu: tuple[int, int] = (0, 0),
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
        ((100, 400), (100, 400), 0.0),  # no jiffies passed
        ((100, 400), (50, 300), 0.0),  # went backwards
    ],
)
def test_cpu_utilization(before: tuple[int, int], after: tuple[int, int], expected: float) -> None:
    assert host.cpu_utilization(CpuTimes(*before), CpuTimes(*after)) == pytest.approx(expected)


def test_disk_rates_sum_throughput_and_take_the_busiest_disk() -> None:
    before = {
        "a": DiskCounters(0, 0, 0),
        "b": DiskCounters(10, 10, 100),
        "gone": DiskCounters(0, 0, 0),
    }
    after = {
        "a": DiskCounters(2, 2, 500),
        "b": DiskCounters(11, 12, 1100),
        "new": DiskCounters(9, 9, 9),
    }
    throughput, busy = host.disk_utilizations(before, after, 2.0, 2048.0)
    assert throughput == pytest.approx((2 + 2 + 1 + 2) * 512 / 2.0 / 2048.0)
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


# --- HostSampler over fake trees built from the two recordings ------------------------------


def fake_machine(root: Path, recording: Path) -> tuple[Path, Path]:
    """``root/proc`` = one recording; ``root/sys`` = this VM's interfaces (no speeds)."""
    proc = root / "proc"
    if proc.exists():
        shutil.rmtree(proc)
    shutil.copytree(recording, proc)
    net = root / "sys" / "class" / "net"
    for name in ("eth0", "docker0", "ifb0", "ifb1", "lo"):
        (net / name).mkdir(parents=True, exist_ok=True)
    (net / "eth0" / "speed").write_text("-1\n")
    (net / "eth0" / "device").mkdir(exist_ok=True)  # virtio NIC: the only physical interface
    (net / "docker0" / "speed").write_text("-1\n")
    return proc, root / "sys"


def test_sampler_over_two_real_recordings(tmp_path: Path) -> None:
    proc, sys = fake_machine(tmp_path, T0)
    sampler = HostSampler(proc=proc, sys=sys, disk_path=tmp_path)
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
    # eth0 (speed -1: the 1 Gb/s default): rx 731244325 -> 731299621, tx 1137251 -> 1213397
    assert second.net_receive_utilization == pytest.approx(55296 / elapsed / 125e6)
    assert second.net_transmit_utilization == pytest.approx(76146 / elapsed / 125e6)
    assert second.memory_utilization == pytest.approx(1 - 24205992 / 24684092)
    assert second.memory_total_bytes == 24684092 * KIB
    assert second.load_average_1m == 0.24
    assert 0.0 < second.disk_usage < 1.0


def test_sampler_link_speeds_and_bandwidth_are_the_denominators(tmp_path: Path) -> None:
    proc, sys = fake_machine(tmp_path, T0)
    (sys / "class/net/eth0/speed").write_text("10\n")  # 10 Mb/s = 1.25e6 bytes/s
    sampler = HostSampler(proc=proc, sys=sys, disk_path=tmp_path, disk_bandwidth_bytes_per_s=1e6)
    sampler.sample(uptime(T0))
    fake_machine(tmp_path, T1)
    (sys / "class/net/eth0/speed").write_text("10\n")
    sample = sampler.sample(uptime(T1))
    elapsed = 2639.67 - 2638.53
    assert sample.net_receive_utilization == pytest.approx(55296 / elapsed / 1.25e6)
    assert sample.disk_throughput_utilization == 1.0  # 67.8 MB over ~1 s on a "1 MB/s" disk


def test_sampler_without_diskstats_and_net_dev_reports_no_activity(tmp_path: Path) -> None:
    proc, sys = fake_machine(tmp_path, T0)
    (proc / "diskstats").unlink()
    (proc / "net" / "dev").unlink()
    shutil.rmtree(proc / "pressure")
    sampler = HostSampler(proc=proc, sys=sys, disk_path=tmp_path)
    sampler.sample(1.0)
    sample = sampler.sample(2.0)
    assert sample.disk_busy_utilization == sample.net_transmit_utilization == 0.0
    assert sample.pressure == {}


def test_sampler_names_the_file_that_does_not_parse(tmp_path: Path) -> None:
    proc, sys = fake_machine(tmp_path, T0)
    (proc / "stat").write_text("intr 1 2 3\n")
    with pytest.raises(
        ValueError, match="^" + re.escape(f"{proc / 'stat'}: no aggregate 'cpu' line")
    ):
        HostSampler(proc=proc, sys=sys, disk_path=tmp_path).sample(1.0)


def test_sampler_rejects_non_positive_bandwidths() -> None:
    with pytest.raises(ValueError, match="positive"):
        HostSampler(disk_bandwidth_bytes_per_s=0)


def test_sampler_on_the_real_machine() -> None:
    sampler = HostSampler()
    first = sampler.sample(time.monotonic())
    assert first.cpu_utilization == 0.0
    assert 0.0 < first.memory_utilization < 1.0
    assert first.memory_total_bytes > 0
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
