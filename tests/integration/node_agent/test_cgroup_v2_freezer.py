"""The process runtime on a real cgroup2 mount.

On hybrid hosts the cpu, cpuset and memory controllers are bound to v1, so only the v2 freezer
(and cpu.stat) can be exercised for real here; the v2 limit write paths are unit-tested against
a fake tree.  The cpuset is then enforced by CPU affinity.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.runtime.base import RunState, scope_name
from node_agent.runtime.process_runtime import ProcessRuntime
from tests.integration.node_agent.conftest import (
    BURN,
    cpu_grows,
    exited,
    launch,
    state_of,
    wait_until,
    wrapper_pid,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def runtime(unified_root: Path, node_id: str, state_dir: Path) -> Iterator[ProcessRuntime]:
    rt = ProcessRuntime(node_id, state_dir, cgroup_root=unified_root)
    assert rt.uses_cgroups, rt.describe()
    yield rt
    rt.purge(grace_seconds=0.2)


def task_dir(root: Path, node_id: str, key: str) -> Path:
    return root / "sluice" / scope_name("sluice", node_id) / key


def procs(directory: Path) -> set[int]:
    return {int(p) for p in (directory / "cgroup.procs").read_text().split()}


def usage_usec(directory: Path) -> int:
    for line in (directory / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1])
    raise AssertionError("no usage_usec in cpu.stat")


def burnt_over(directory: Path, seconds: float) -> float:
    before = usage_usec(directory)
    time.sleep(seconds)  # nothing to wait for: measuring that nothing happens
    return (usage_usec(directory) - before) / 1e6


def test_v2_freeze_stops_cpu_and_thaw_restarts_it(
    runtime: ProcessRuntime, unified_root: Path, node_id: str, state_dir: Path
) -> None:
    assert "cgroup v2" in runtime.describe()
    runtime.start(launch("burn", BURN, cpuset=(0,)))
    directory = task_dir(unified_root, node_id, "burn")
    pids = wait_until(lambda: len(p := procs(directory)) == 2 and p)
    runtime.suspend("burn")
    assert "frozen 1" in (directory / "cgroup.events").read_text().splitlines()
    assert state_of(runtime, "burn").state is RunState.SUSPENDED
    assert burnt_over(directory, 1.0) < 0.02
    runtime.resume("burn")
    assert "frozen 0" in (directory / "cgroup.events").read_text().splitlines()
    cpu_grows(lambda: usage_usec(directory) / 1e6)
    if not runtime_enforces_cpuset(runtime):
        # The cpuset came from taskset: the burning shell may only run on CPU 0.
        (burner,) = pids - {wrapper_pid(state_dir, "burn")}
        status = Path(f"/proc/{burner}/status").read_text()
        assert "Cpus_allowed_list:\t0\n" in status


def test_v2_stop_of_frozen_task_and_purge(
    runtime: ProcessRuntime, unified_root: Path, node_id: str
) -> None:
    runtime.start(launch("t1", ("sleep", "30")))
    runtime.suspend("t1")
    runtime.stop("t1", grace_seconds=2)
    assert exited(runtime, "t1").exit_code == 143
    runtime.purge(grace_seconds=0.2)
    assert not (unified_root / "sluice" / scope_name("sluice", node_id)).exists()


def runtime_enforces_cpuset(runtime: ProcessRuntime) -> bool:
    return "cpuset by CPU affinity" not in runtime.describe()


def test_v2_task_pressure_is_read_from_its_own_cgroup(
    runtime: ProcessRuntime, unified_root: Path, node_id: str
) -> None:
    from node_agent.metrics.pressure import read_cgroup_pressure

    # Two burners pinned to one CPU: whatever else this machine runs, at any moment one of
    # them waits for the CPU, so the cgroup's own stall time must grow.
    runtime.start(launch("psi", f"{BURN} & {BURN}", cpuset=(0,)))
    directory = runtime.pressure_dir("psi")
    assert directory == task_dir(unified_root, node_id, "psi")
    pressure = read_cgroup_pressure(directory)
    assert "cpu" in pressure
    first = pressure["cpu"].some_total_us
    wait_until(lambda: read_cgroup_pressure(directory)["cpu"].some_total_us > first + 100_000)
    runtime.stop("psi", grace_seconds=0.2)
    exited(runtime, "psi")
    assert runtime.pressure_dir("unknown-task") is None
