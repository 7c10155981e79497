"""Limit arithmetic and the cgroup drivers' write paths, against fake cgroup directory trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node_agent.runtime import cgroups
from node_agent.runtime.base import ResourceLimits, RuntimeError_, TaskUsage
from plumbing.errors import UserError
from tests.unit.node_agent.conftest import FakeClock, write_files

MiB = 1024 * 1024


# --- arithmetic -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "quota"),
    [(1.0, 100_000), (0.5, 50_000), (2.5, 250_000), (0.001, 1_000), (0.0001, 1_000)],
)
def test_cfs_quota_is_cores_times_period_at_least_one_ms(cpu: float, quota: int) -> None:
    assert cgroups.cfs_quota_us(cpu) == quota


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ((), ""),
        ((0,), "0"),
        ((0, 1, 2, 5), "0-2,5"),
        ((3, 1, 2), "1-3"),
        ((0, 2, 4), "0,2,4"),
        ((7, 7, 6), "6-7"),
    ],
)
def test_format_cpuset_uses_kernel_list_format(cpus: tuple[int, ...], text: str) -> None:
    assert cgroups.format_cpuset(cpus) == text


@pytest.mark.parametrize(
    ("text", "cpus"), [("0-2,5\n", (0, 1, 2, 5)), ("", ()), ("\n", ()), ("3", (3,))]
)
def test_parse_cpuset(text: str, cpus: tuple[int, ...]) -> None:
    assert cgroups.parse_cpuset(text) == cpus


@pytest.mark.parametrize("text", ["3-1", "x", "1-", "-1"])
def test_parse_cpuset_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        cgroups.parse_cpuset(text)


@given(st.lists(st.integers(min_value=0, max_value=300), max_size=40))
def test_cpuset_format_then_parse_is_the_sorted_set(cpus: list[int]) -> None:
    assert cgroups.parse_cpuset(cgroups.format_cpuset(cpus)) == tuple(sorted(set(cpus)))


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (ResourceLimits(cpu=0, memory_mb=64), "limits.cpu: must be > 0 cores, got 0"),
        (ResourceLimits(cpu=-1, memory_mb=64), "limits.cpu: must be > 0 cores, got -1"),
        (ResourceLimits(cpu=float("nan"), memory_mb=64), "limits.cpu: must be > 0 cores"),
        (ResourceLimits(cpu=1, memory_mb=0), "limits.memory_mb: must be > 0, got 0"),
        (
            ResourceLimits(cpu=1, memory_mb=64, cpuset=(1, 4, 5)),
            "limits.cpuset: no such CPU 4-5 on this node (has 0-3)",
        ),
    ],
)
def test_validate_limits_names_field_and_problem(limits: ResourceLimits, message: str) -> None:
    with pytest.raises(UserError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        cgroups.validate_limits(limits, cpus=(0, 1, 2, 3))


def test_validate_limits_accepts_grantable_limits() -> None:
    cgroups.validate_limits(ResourceLimits(cpu=0.25, memory_mb=1, cpuset=(3,)), cpus=(0, 1, 2, 3))


# --- fake trees -----------------------------------------------------------------------------


def v2_tree(root: Path, controllers: str = "cpu cpuset memory hugetlb") -> Path:
    return write_files(root, {"cgroup.controllers": controllers, "cgroup.subtree_control": ""})


def v1_tree(root: Path, controllers: tuple[str, ...] = ("cpu", "cpuacct", "cpuset", "memory")):
    proof = {
        "cpu": "cpu/cpu.cfs_quota_us",
        "cpuacct": "cpuacct/cpuacct.usage",
        "memory": "memory/memory.limit_in_bytes",
    }
    files = {"freezer/cgroup.procs": ""}
    files.update({proof[c]: "" for c in controllers if c in proof})
    if "cpuset" in controllers:
        files.update({"cpuset/cpuset.cpus": "0-3\n", "cpuset/cpuset.mems": "0\n"})
    return write_files(root, files)


def read(path: Path) -> str:
    return path.read_text().strip()


LIMITS = ResourceLimits(cpu=0.5, memory_mb=64, cpuset=(0, 1))


@pytest.mark.parametrize(
    ("layout", "version", "where"),
    [
        ("v2", 2, ""),
        ("v1", 1, ""),
        ("hybrid", 1, ""),  # controllers are on the v1 side of a hybrid host
        ("unified-only", 2, "unified"),
        ("empty", None, ""),
    ],
)
def test_detect_picks_the_hierarchy_with_the_controllers(
    tmp_path: Path, layout: str, version: int | None, where: str
) -> None:
    if layout == "v2":
        v2_tree(tmp_path)
    if layout in ("v1", "hybrid"):
        v1_tree(tmp_path)
    if layout in ("hybrid", "unified-only"):
        v2_tree(tmp_path / "unified", controllers="")
    driver = cgroups.detect(tmp_path, "node-a")
    assert (driver.version if driver else None) == version
    if version == 2:
        assert driver is not None
        assert str(tmp_path / where) in driver.describe()


def test_v2_prepare_enables_controllers_on_every_level(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    cgroups.CgroupV2(tmp_path, "node-a").prepare_node()
    for level in (tmp_path, tmp_path / "sluice", tmp_path / "sluice" / "node-a"):
        assert read(level / "cgroup.subtree_control") == "+cpu +cpuset +memory"


def test_v2_create_writes_cpu_max_cpuset_and_memory_max(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    driver = cgroups.CgroupV2(tmp_path, "node-a")
    driver.prepare_node()
    driver.create("t1", LIMITS)
    task = tmp_path / "sluice" / "node-a" / "t1"
    assert read(task / "cpu.max") == "50000 100000"
    assert read(task / "cpuset.cpus") == "0-1"
    assert read(task / "memory.max") == str(64 * MiB)
    assert driver.procs_files("t1") == (task / "cgroup.procs",)


@pytest.mark.parametrize(
    ("limits", "cpu_max", "cpuset", "memory_max"),
    [
        (ResourceLimits(cpu=2, memory_mb=32, cpuset=(3,)), "200000 100000", "3", str(32 * MiB)),
        # An empty cpuset means the parent's CPUs, which v2 spells as an empty cpuset.cpus.
        (ResourceLimits(cpu=0.1, memory_mb=1, cpuset=()), "10000 100000", "", str(MiB)),
    ],
)
def test_v2_set_limits_rewrites_every_knob(
    tmp_path: Path, limits: ResourceLimits, cpu_max: str, cpuset: str, memory_max: str
) -> None:
    v2_tree(tmp_path)
    driver = cgroups.CgroupV2(tmp_path, "node-a")
    driver.prepare_node()
    driver.create("t1", LIMITS)
    driver.set_limits("t1", limits)
    task = tmp_path / "sluice" / "node-a" / "t1"
    assert (read(task / "cpu.max"), read(task / "cpuset.cpus"), read(task / "memory.max")) == (
        cpu_max,
        cpuset,
        memory_max,
    )


def test_v2_without_controllers_writes_no_limits_and_says_so(tmp_path: Path) -> None:
    v2_tree(tmp_path, controllers="hugetlb")
    driver = cgroups.CgroupV2(tmp_path, "node-a")
    driver.prepare_node()
    driver.create("t1", LIMITS)
    task = tmp_path / "sluice" / "node-a" / "t1"
    assert sorted(p.name for p in task.iterdir()) == []
    assert read(tmp_path / "cgroup.subtree_control") == ""
    assert "missing cpu, cpuset, memory: not enforced" in driver.describe()
    assert not driver.enforces("cpuset")


def test_v2_freeze_returns_once_events_report_frozen(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    driver = cgroups.CgroupV2(tmp_path, "node-a")
    driver.prepare_node()
    driver.create("t1", LIMITS)
    task = tmp_path / "sluice" / "node-a" / "t1"
    (task / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    driver.freeze("t1")
    assert read(task / "cgroup.freeze") == "1"
    assert driver.is_frozen("t1")


def test_v2_freeze_that_never_completes_times_out_and_thaws(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    v2_tree(tmp_path)
    driver = cgroups.CgroupV2(tmp_path, "node-a", clock=fake_clock, sleep=fake_clock.sleep)
    driver.prepare_node()
    driver.create("t1", LIMITS)
    task = tmp_path / "sluice" / "node-a" / "t1"
    (task / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    with pytest.raises(RuntimeError_, match=r"freezing .*t1 did not complete within 2 s"):
        driver.freeze("t1", timeout=2.0)
    assert read(task / "cgroup.freeze") == "0"
    assert fake_clock.now >= 2.0


def test_v2_usage_reads_cpu_stat_and_memory_current(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    driver = cgroups.CgroupV2(tmp_path, "node-a")
    driver.prepare_node()
    driver.create("t1", LIMITS)
    write_files(
        tmp_path / "sluice" / "node-a" / "t1",
        {"cpu.stat": "usage_usec 2500000\nuser_usec 2000000\n", "memory.current": "1048576\n"},
    )
    assert driver.usage("t1") == TaskUsage(cpu_seconds=2.5, memory_bytes=1048576)


def test_v1_create_seeds_cpuset_levels_and_writes_limits(tmp_path: Path) -> None:
    v1_tree(tmp_path)
    driver = cgroups.CgroupV1(tmp_path, "node-a")
    driver.prepare_node()
    driver.create("t1", LIMITS)
    rel = Path("sluice") / "node-a"
    for level in (tmp_path / "cpuset" / "sluice", tmp_path / "cpuset" / rel):
        assert (read(level / "cpuset.cpus"), read(level / "cpuset.mems")) == ("0-3", "0")
    assert read(tmp_path / "cpuset" / rel / "t1" / "cpuset.cpus") == "0-1"
    assert read(tmp_path / "cpuset" / rel / "t1" / "cpuset.mems") == "0"
    assert read(tmp_path / "cpu" / rel / "t1" / "cpu.cfs_period_us") == "100000"
    assert read(tmp_path / "cpu" / rel / "t1" / "cpu.cfs_quota_us") == "50000"
    assert read(tmp_path / "memory" / rel / "t1" / "memory.limit_in_bytes") == str(64 * MiB)
    assert (tmp_path / "freezer" / rel / "t1").is_dir()
    assert len(driver.procs_files("t1")) == 5  # one per hierarchy


def test_v1_empty_cpuset_means_the_parents_cpus(tmp_path: Path) -> None:
    v1_tree(tmp_path)
    driver = cgroups.CgroupV1(tmp_path, "node-a")
    driver.prepare_node()
    driver.create("t1", ResourceLimits(cpu=1, memory_mb=8))
    assert read(tmp_path / "cpuset" / "sluice" / "node-a" / "t1" / "cpuset.cpus") == "0-3"


def test_v1_freeze_and_thaw_write_freezer_state(tmp_path: Path) -> None:
    v1_tree(tmp_path)
    driver = cgroups.CgroupV1(tmp_path, "node-a")
    driver.prepare_node()
    driver.create("t1", LIMITS)
    state = tmp_path / "freezer" / "sluice" / "node-a" / "t1" / "freezer.state"
    driver.freeze("t1")  # a plain file reads back FROZEN at once
    assert read(state) == "FROZEN"
    assert driver.is_frozen("t1")
    driver.thaw("t1")
    assert read(state) == "THAWED"


def test_v1_missing_controllers_are_reported_and_skipped(tmp_path: Path) -> None:
    v1_tree(tmp_path, controllers=("cpuset",))
    driver = cgroups.CgroupV1(tmp_path, "node-a")
    driver.prepare_node()
    driver.create("t1", LIMITS)
    assert "missing cpu, cpuacct, memory: not enforced" in driver.describe()
    assert not (tmp_path / "cpu").exists()
    assert driver.enforces("cpuset")


def test_write_failure_is_one_clear_line(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    driver = cgroups.CgroupV2(tmp_path, "node-a")
    with pytest.raises(RuntimeError_, match=r"cgroup: writing '1' to .*cgroup.freeze failed: no"):
        driver.freeze("never-created")


def test_task_names_lists_task_cgroups(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    driver = cgroups.CgroupV2(tmp_path, "node-a")
    driver.prepare_node()
    for name in ("b", "a"):
        driver.create(name, LIMITS)
    assert driver.task_names() == ["a", "b"]
