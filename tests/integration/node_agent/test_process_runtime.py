"""The process runtime on real cgroup v1 hierarchies, checked from the cgroup files."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.runtime.base import (
    ResourceLimits,
    RunState,
    RuntimeError_,
    TaskExistsError,
    UnknownTaskError,
    scope_name,
)
from node_agent.runtime.process_runtime import ProcessRuntime
from tests.integration.node_agent.conftest import (
    BURN,
    V1_HIERARCHIES,
    cpu_grows,
    exited,
    launch,
    pid_alive,
    state_of,
    wait_until,
    wrapper_pid,
)

pytestmark = pytest.mark.integration
MiB = 1024 * 1024
SLEEP = ("sleep", "30")
STUBBORN = "trap '' TERM; echo ready; while :; do sleep 0.05; done"
GRACE_S = 30.0
"""The grace of a stop expected to end by SIGTERM (143): the stop returns as soon as the task
has ended, and on a busy host its wrapper may take seconds to record the exit, past which a
short grace would SIGKILL it (137)."""


@pytest.fixture
def runtime(cgroup_v1: Path, node_id: str, state_dir: Path) -> Iterator[ProcessRuntime]:
    rt = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    assert rt.uses_cgroups, rt.describe()
    yield rt
    rt.purge(grace_seconds=0.2)


def knob(node_id: str, key: str, hierarchy: str, name: str) -> str:
    return (
        (Path("/sys/fs/cgroup") / hierarchy / "sluice" / scope_name("sluice", node_id) / key / name)
        .read_text()
        .strip()
    )


def set_knob(node_id: str, key: str, hierarchy: str, name: str, value: str) -> None:
    path = Path("/sys/fs/cgroup") / hierarchy / "sluice" / scope_name("sluice", node_id) / key
    (path / name).write_text(value)


def cpu_seconds(node_id: str, key: str) -> float:
    return int(knob(node_id, key, "cpuacct", "cpuacct.usage")) / 1e9


def cpu_burnt_over(node_id: str, key: str, seconds: float) -> float:
    before = cpu_seconds(node_id, key)
    time.sleep(seconds)  # nothing to wait for: measuring that nothing happens
    return cpu_seconds(node_id, key) - before


def task_pids(node_id: str, key: str) -> set[int]:
    return {int(p) for p in knob(node_id, key, "freezer", "cgroup.procs").split()}


def test_describe_names_cgroup_v1_and_the_node_path(runtime: ProcessRuntime, node_id: str) -> None:
    text = runtime.describe()
    assert (
        "cgroup v1" in text
        and f"sluice/{scope_name('sluice', node_id)}/<task>" in text
        and "FALLBACK" not in text
    )


def test_cgroup_shows_granted_quota_cpuset_and_memory(
    runtime: ProcessRuntime, node_id: str
) -> None:
    runtime.start(launch("t1", SLEEP, cpu=0.5, memory_mb=48, cpuset=(0,)))
    assert knob(node_id, "t1", "cpu", "cpu.cfs_quota_us") == "50000"
    assert knob(node_id, "t1", "cpu", "cpu.cfs_period_us") == "100000"
    assert knob(node_id, "t1", "cpuset", "cpuset.cpus") == "0"
    assert knob(node_id, "t1", "memory", "memory.limit_in_bytes") == str(48 * MiB)
    # The task's processes are inside every hierarchy: the wrapper and, once forked, sleep.
    pids = wait_until(lambda: len(p := task_pids(node_id, "t1")) == 2 and p)
    for hierarchy in V1_HIERARCHIES:
        assert set(map(int, knob(node_id, "t1", hierarchy, "cgroup.procs").split())) == pids


def test_suspended_task_burns_no_cpu_and_burns_again_after_resume(
    runtime: ProcessRuntime, node_id: str
) -> None:
    runtime.start(launch("burn", BURN, cpu=1.0))
    runtime.suspend("burn")
    assert knob(node_id, "burn", "freezer", "freezer.state") == "FROZEN"
    assert state_of(runtime, "burn").state is RunState.SUSPENDED
    assert cpu_burnt_over(node_id, "burn", 1.0) < 0.02
    runtime.resume("burn")
    assert state_of(runtime, "burn").state is RunState.RUNNING
    cpu_grows(lambda: cpu_seconds(node_id, "burn"))
    runtime.resume("burn")  # resuming a running task does nothing


def test_resize_changes_quota_cpuset_and_memory_of_running_task(
    runtime: ProcessRuntime, node_id: str
) -> None:
    runtime.start(launch("t1", "sleep 30", cpu=0.5, memory_mb=64, cpuset=(0,)))
    new = ResourceLimits(cpu=1.5, memory_mb=96, cpuset=(0, 1) if _cpus() > 1 else (0,))
    runtime.resize("t1", new)
    assert knob(node_id, "t1", "cpu", "cpu.cfs_quota_us") == "150000"
    assert knob(node_id, "t1", "cpuset", "cpuset.cpus") == ("0-1" if _cpus() > 1 else "0")
    assert knob(node_id, "t1", "memory", "memory.limit_in_bytes") == str(96 * MiB)
    assert state_of(runtime, "t1").limits == new
    assert state_of(runtime, "t1").state is RunState.RUNNING


def test_lowering_memory_below_usage_fails_clearly_and_changes_nothing(
    runtime: ProcessRuntime, node_id: str
) -> None:
    # A shell variable pins ~24 MiB of anonymous memory, which cannot be reclaimed: the test
    # forbids this cgroup to swap (swappiness 0 keeps a memory cgroup's anonymous pages out of
    # swap), so whether the host has a swap file on does not matter.  With swap allowed, the
    # lowering would succeed by swapping the pages out, as preemption means it to.
    hog = "x=$(head -c 25000000 /dev/zero | tr '\\0' a); echo ready; sleep 30"
    runtime.start(launch("hog", hog, memory_mb=64))
    set_knob(node_id, "hog", "memory", "memory.swappiness", "0")
    wait_until(lambda: b"ready" in runtime.logs("hog"))
    with pytest.raises(RuntimeError_, match=r"memory.limit_in_bytes failed: busy"):
        runtime.resize("hog", ResourceLimits(cpu=0.5, memory_mb=4))
    assert knob(node_id, "hog", "memory", "memory.limit_in_bytes") == str(64 * MiB)
    assert knob(node_id, "hog", "cpu", "cpu.cfs_quota_us") == "100000"
    assert state_of(runtime, "hog").limits.memory_mb == 64


@pytest.mark.parametrize(
    ("script", "code"),
    [
        ("true", 0),
        ("exit 3", 3),
        ("kill -KILL $$", 137),
        ("kill -TERM $$", 143),
        ("exec no-such-program-x", 127),
    ],
)
def test_exit_codes_are_observed(runtime: ProcessRuntime, script: str, code: int) -> None:
    runtime.start(launch("t1", script))
    observation = exited(runtime, "t1")
    assert observation.exit_code == code
    assert observation.finished_at is not None
    assert observation.started_at <= observation.finished_at


def test_stop_terminates_and_records_143(runtime: ProcessRuntime, node_id: str) -> None:
    runtime.start(launch("t1", "sleep 30"))
    pids = task_pids(node_id, "t1")
    runtime.stop("t1", grace_seconds=GRACE_S)
    assert state_of(runtime, "t1").exit_code == 143
    assert not any(pid_alive(p) for p in pids)
    runtime.stop("t1")  # stopping an exited task does nothing


def test_stop_kills_a_task_ignoring_sigterm_after_grace(runtime: ProcessRuntime) -> None:
    runtime.start(launch("t1", STUBBORN))
    wait_until(lambda: b"ready" in runtime.logs("t1"))  # SIGTERM before the trap would kill it
    runtime.stop("t1", grace_seconds=0.3)
    assert state_of(runtime, "t1").exit_code == 137  # SIGKILL, after SIGTERM was ignored


def test_stop_resumes_a_suspended_task_first(runtime: ProcessRuntime) -> None:
    runtime.start(launch("t1", "sleep 30"))
    runtime.suspend("t1")
    runtime.stop("t1", grace_seconds=GRACE_S)
    assert state_of(runtime, "t1").exit_code == 143


def test_logs_stay_readable_after_cleanup_until_forget(
    runtime: ProcessRuntime, node_id: str
) -> None:
    runtime.start(launch("t1", "echo to-out; echo to-err >&2; exit 4"))
    exited(runtime, "t1")
    runtime.start(launch("t2", SLEEP))
    with pytest.raises(RuntimeError_, match="'t2' is still running; stop it first"):
        runtime.cleanup("t2")
    runtime.cleanup("t1")
    assert not (Path("/sys/fs/cgroup/freezer/sluice") / node_id / "t1").exists()
    assert runtime.logs("t1") == b"to-out\nto-err\n"
    assert state_of(runtime, "t1").exit_code == 4
    runtime.forget("t1")
    with pytest.raises(UnknownTaskError):
        runtime.logs("t1")


def test_starting_a_known_key_raises_and_changes_nothing(
    runtime: ProcessRuntime, node_id: str
) -> None:
    runtime.start(launch("t1", SLEEP))
    pids = wait_until(lambda: len(p := task_pids(node_id, "t1")) == 2 and p)
    with pytest.raises(TaskExistsError):
        runtime.start(launch("t1", SLEEP))
    assert task_pids(node_id, "t1") == pids


def test_new_runtime_adopts_running_task_without_duplicating_it(
    cgroup_v1: Path, node_id: str, state_dir: Path
) -> None:
    first = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    first.start(launch("t1", SLEEP))
    first.start(launch("t2", SLEEP))
    first.suspend("t2")
    started_at = state_of(first, "t1").started_at
    pids = wait_until(lambda: len(p := task_pids(node_id, "t1")) == 2 and p)
    del first  # the agent is SIGKILLed: nothing is stopped or cleaned up

    second = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    try:
        assert "adopted 2 task(s)" in second.describe()
        observed = {o.task_key: o for o in second.observe()}
        assert observed["t1"].state is RunState.RUNNING
        assert observed["t1"].started_at == started_at
        assert observed["t2"].state is RunState.SUSPENDED
        with pytest.raises(TaskExistsError):
            second.start(launch("t1", SLEEP))
        assert task_pids(node_id, "t1") == pids
        second.stop("t1", grace_seconds=GRACE_S)
        assert state_of(second, "t1").exit_code == 143
        assert not any(pid_alive(p) for p in pids)
        second.resume("t2")
        assert state_of(second, "t2").state is RunState.RUNNING
    finally:
        second.purge(grace_seconds=0.2)


def test_exit_while_no_runtime_existed_is_still_observed(
    cgroup_v1: Path, node_id: str, state_dir: Path
) -> None:
    first = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    first.start(launch("t1", "sleep 0.2; echo done; exit 7"))
    wrapper = wrapper_pid(state_dir, "t1")
    del first
    wait_until(lambda: not pid_alive(wrapper))  # the task ended while no runtime existed
    second = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    try:
        assert exited(second, "t1").exit_code == 7
        assert second.logs("t1") == b"done\n"
    finally:
        second.purge(grace_seconds=0.2)


def test_purge_leaves_no_cgroup_process_or_state(
    runtime: ProcessRuntime, node_id: str, state_dir: Path
) -> None:
    runtime.start(launch("running", "sleep 30"))
    runtime.start(launch("frozen", BURN))
    runtime.suspend("frozen")
    runtime.start(launch("done", "true"))
    exited(runtime, "done")
    pids = task_pids(node_id, "running") | task_pids(node_id, "frozen")
    # A cgroup whose task record was lost, with a process in it, must go too.
    stray = Path("/sys/fs/cgroup/freezer/sluice") / scope_name("sluice", node_id) / "stray"
    stray.mkdir()
    orphan = subprocess.Popen(["sleep", "30"])
    (stray / "cgroup.procs").write_text(str(orphan.pid))

    runtime.purge(grace_seconds=0.2)
    orphan.wait(timeout=5)
    assert not any(pid_alive(p) for p in pids)
    for hierarchy in V1_HIERARCHIES:
        assert not (
            Path("/sys/fs/cgroup") / hierarchy / "sluice" / scope_name("sluice", node_id)
        ).exists()
    assert not (state_dir / "tasks").exists()
    assert runtime.observe() == []


def test_calls_from_several_threads_are_safe(runtime: ProcessRuntime) -> None:
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            runtime.start(launch(f"t{i}", "sleep 30"))
            runtime.observe()
            runtime.stop(f"t{i}", grace_seconds=GRACE_S)
        except BaseException as e:  # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {o.exit_code for o in runtime.observe()} == {143}


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def test_start_that_cannot_join_its_cgroup_fails_cleanly(
    runtime: ProcessRuntime, node_id: str, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = runtime._cgroups
    assert driver is not None
    monkeypatch.setattr(driver, "procs_files", lambda task: (Path("/nonexistent/cgroup.procs"),))
    with pytest.raises(RuntimeError_, match=r"'t1' did not start: .*cannot join cgroup"):
        runtime.start(launch("t1", SLEEP))
    assert runtime.observe() == []
    assert not (state_dir / "tasks" / "t1").exists()
    assert not (Path("/sys/fs/cgroup/freezer/sluice") / node_id / "t1").exists()
    monkeypatch.undo()
    runtime.start(launch("t1", SLEEP))  # the key is free again
