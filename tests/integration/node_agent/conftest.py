"""Fixtures for runtime tests against real cgroups, real processes and the real Docker Engine.

Every test gets its own node id, so tests never see each other's tasks, and each runtime is
purged afterwards.  With ``CI=true`` a missing engine or unwritable cgroups fails the test
instead of skipping it.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from node_agent.runtime.base import ResourceLimits, TaskLaunch

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_HIERARCHIES = ("cpu", "cpuacct", "cpuset", "memory", "freezer")


def unavailable(reason: str) -> None:
    """Skip, or fail under CI, when the machine lacks what the test needs."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def launch(
    key: str,
    argv: tuple[str, ...] | str,
    cpu: float = 1.0,
    memory_mb: int = 64,
    cpuset: tuple[int, ...] = (),
) -> TaskLaunch:
    """A launch; a string ``argv`` is run by ``sh -c``."""
    return TaskLaunch(
        task_key=key,
        job_id="job",
        task_id=key,
        attempt=1,
        allocation_id="alloc",
        argv=("sh", "-c", argv) if isinstance(argv, str) else argv,
        limits=ResourceLimits(cpu=cpu, memory_mb=memory_mb, cpuset=cpuset),
    )


BURN = "while :; do :; done"


# Limits only turn a hang into a failure: a busy machine (a CPU hog, a parallel test run) may
# take seconds to fork, exec or start a container, and a condition that comes true is never late.
WAIT_S = 30.0


def wait_until(condition: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.01)
    return result


def state_of(runtime: Any, key: str) -> Any:
    return next(o for o in runtime.observe() if o.task_key == key)


def exited(runtime: Any, key: str, timeout: float = WAIT_S) -> Any:
    """Wait for the task to exit; its observation."""
    return wait_until(lambda: (o := state_of(runtime, key)).state.value == "exited" and o, timeout)


def cpu_grows(seconds: Callable[[], float], by: float = 0.1) -> None:
    """Wait until a CPU-seconds counter has grown by ``by``: a task that runs again burns at
    once on an idle machine and later on a busy one, so no fixed time is the right one."""
    before = seconds()
    wait_until(lambda: seconds() - before > by)


def pid_alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wrapper_pid(state_dir: Path, key: str) -> int:
    """The PID of the process runtime's wrapper shell for task ``key`` (from its pid.json)."""
    return int(json.loads((state_dir / "tasks" / key / "pid.json").read_text())["pid"])


@pytest.fixture
def node_id() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def cgroup_v1() -> Path:
    """The v1 hierarchies, if this machine has them writable."""
    if os.geteuid() != 0 or not all(
        (CGROUP_ROOT / h / "cgroup.procs").exists() for h in V1_HIERARCHIES
    ):
        unavailable("no writable cgroup v1 hierarchies (needs root and /sys/fs/cgroup/<ctrl>)")
    return CGROUP_ROOT


@pytest.fixture
def unified_root() -> Path:
    """A cgroup2 mount whose freezer is usable (the hybrid mount on this host)."""
    for root in (CGROUP_ROOT / "unified", CGROUP_ROOT):
        if (root / "cgroup.controllers").exists() and os.access(root, os.W_OK):
            return root
    unavailable("no writable cgroup2 mount")
    raise AssertionError  # unreachable


@pytest.fixture
def docker_client() -> Iterator[Any]:
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as e:
        unavailable(f"no Docker Engine: {e}")
    yield client
    client.close()
