"""The process runtime without cgroups: process groups, CPU affinity, SIGSTOP/SIGCONT."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.runtime.base import ResourceLimits, RunState
from node_agent.runtime.process_runtime import ProcessRuntime, group_members, proc_stat
from tests.integration.node_agent.conftest import (
    BURN,
    cpu_grows,
    exited,
    launch,
    pid_alive,
    state_of,
    wait_until,
    wrapper_pid,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def runtime(tmp_path: Path, node_id: str, state_dir: Path) -> Iterator[ProcessRuntime]:
    # A cgroup root that does not exist forces the fallback, as a read-only one would.
    rt = ProcessRuntime(node_id, state_dir, cgroup_root=tmp_path / "no-cgroups")
    yield rt
    rt.purge(grace_seconds=0.2)


def task_processes(state_dir: Path, key: str) -> set[int]:
    """The task's processes: its process group minus the wrapper (the group leader)."""
    wrapper = wrapper_pid(state_dir, key)
    return group_members(wrapper) - {wrapper}


def cpu_of(pids: set[int]) -> float:
    stats = [s for s in map(proc_stat, pids) if s is not None]
    return sum(s.cpu_ticks for s in stats) / os.sysconf("SC_CLK_TCK")


def test_fallback_is_announced(runtime: ProcessRuntime) -> None:
    assert not runtime.uses_cgroups
    assert "FALLBACK to plain processes" in runtime.describe()
    assert "suspend by SIGSTOP/SIGCONT" in runtime.describe()


def test_fallback_pins_cpus_suspends_resumes_and_stops(
    runtime: ProcessRuntime, state_dir: Path
) -> None:
    runtime.start(launch("burn", BURN, cpuset=(0,)))
    burner = wait_until(lambda: task_processes(state_dir, "burn"))
    (pid,) = burner
    # The wrapper's fresh fork runs unpinned until it execs taskset, which pins, then execs sh.
    wait_until(lambda: "Cpus_allowed_list:\t0\n" in Path(f"/proc/{pid}/status").read_text())

    runtime.suspend("burn")
    assert proc_stat(pid).state == "T"  # type: ignore[union-attr]
    assert state_of(runtime, "burn").state is RunState.SUSPENDED
    before = cpu_of(burner)
    time.sleep(1.0)  # nothing to wait for: measuring that nothing happens
    assert cpu_of(burner) - before < 0.02

    runtime.resume("burn")
    assert state_of(runtime, "burn").state is RunState.RUNNING
    cpu_grows(lambda: cpu_of(burner))

    if len(os.sched_getaffinity(0)) > 1:
        runtime.resize("burn", ResourceLimits(cpu=1, memory_mb=64, cpuset=(1,)))
        assert "Cpus_allowed_list:\t1\n" in Path(f"/proc/{pid}/status").read_text()

    runtime.suspend("burn")
    runtime.stop("burn", grace_seconds=2)  # resumes first, then SIGTERM
    assert exited(runtime, "burn").exit_code == 143
    assert not pid_alive(pid)


@pytest.mark.parametrize(("script", "code"), [("exit 0", 0), ("exit 3", 3), ("kill -9 $$", 137)])
def test_fallback_exit_codes(runtime: ProcessRuntime, script: str, code: int) -> None:
    runtime.start(launch("t1", script))
    assert exited(runtime, "t1").exit_code == code


def test_fallback_adoption_and_purge(tmp_path: Path, node_id: str, state_dir: Path) -> None:
    root = tmp_path / "no-cgroups"
    first = ProcessRuntime(node_id, state_dir, cgroup_root=root)
    first.start(launch("t1", ("sleep", "30")))
    pids = wait_until(lambda: task_processes(state_dir, "t1"))
    del first
    second = ProcessRuntime(node_id, state_dir, cgroup_root=root)
    assert state_of(second, "t1").state is RunState.RUNNING
    second.purge(grace_seconds=0.5)
    assert not any(pid_alive(p) for p in pids)
    assert second.observe() == []
    assert not (state_dir / "tasks").exists()


def test_reused_wrapper_pid_never_gets_an_unrelated_group_killed(
    tmp_path: Path, node_id: str, state_dir: Path
) -> None:
    root = tmp_path / "no-cgroups"
    first = ProcessRuntime(node_id, state_dir, cgroup_root=root)
    first.start(launch("t1", "exit 0"))
    exited(first, "t1")
    del first
    # Pretend the finished wrapper's PID now belongs to an unrelated session leader.
    unrelated = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        pid_file = state_dir / "tasks" / "t1" / "pid.json"
        pid_file.write_text(json.dumps({"pid": unrelated.pid, "starttime": 1}))
        second = ProcessRuntime(node_id, state_dir, cgroup_root=root)
        second.stop("t1")
        second.cleanup("t1")
        second.purge(grace_seconds=0.2)
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()
