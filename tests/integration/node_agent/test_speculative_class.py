"""Speculative tasks in the runtimes' low-weight class, and their promotion (ROSE Sec. 6.1 and
Alg. 5 line 11), checked from the kernel's cgroup files and Docker's own view."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from node_agent.runtime import cgroups
from node_agent.runtime.base import ResourceLimits, scope_name
from node_agent.runtime.docker_runtime import DockerRuntime
from node_agent.runtime.process_runtime import ProcessRuntime
from tests.integration.node_agent.conftest import launch, state_of, wait_until

pytestmark = pytest.mark.integration
SLEEP = ("sleep", "60")


@pytest.fixture
def process_runtime(cgroup_v1: Path, node_id: str, state_dir: Path) -> Iterator[ProcessRuntime]:
    rt = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    assert rt.uses_cgroups, rt.describe()
    yield rt
    rt.purge(grace_seconds=0.2)


@pytest.fixture
def v2_runtime(unified_root: Path, node_id: str, state_dir: Path) -> Iterator[ProcessRuntime]:
    rt = ProcessRuntime(node_id, state_dir, cgroup_root=unified_root)
    assert rt.uses_cgroups, rt.describe()
    yield rt
    rt.purge(grace_seconds=0.2)


def node_dir(hierarchy: Path, node_id: str) -> Path:
    return hierarchy / "sluice" / scope_name("sluice", node_id)


def pids_in(directory: Path) -> set[int]:
    procs = directory / "cgroup.procs"
    return {int(p) for p in procs.read_text().split()} if procs.exists() else set()


def test_a_speculative_task_has_a_tenth_of_the_weight_until_promoted(
    process_runtime: ProcessRuntime, node_id: str, state_dir: Path, cgroup_v1: Path
) -> None:
    spec = replace(launch("s", SLEEP, cpu=0.5), speculative=True, allocation_id="speculative-s")
    process_runtime.start(spec)
    cpu = node_dir(cgroup_v1 / "cpu", node_id) / "s"
    assert (cpu / "cpu.shares").read_text().strip() == str(cgroups.SPECULATIVE_SHARES_V1)
    before = pids_in(cpu)
    assert before and state_of(process_runtime, "s").speculative

    process_runtime.promote("s", "alloc-7", ResourceLimits(1.0, 128, (0,)))

    assert (cpu / "cpu.shares").read_text().strip() == str(cgroups.REGULAR_SHARES_V1)
    assert before <= pids_in(cpu)  # in place: none left the cgroup (its child may have joined)
    assert (cpu / "cpu.cfs_quota_us").read_text().strip() == str(cgroups.cfs_quota_us(1.0))
    seen = state_of(process_runtime, "s")
    assert (seen.speculative, seen.allocation_id, seen.state.value) == (False, "alloc-7", "running")
    # A restarted agent's runtime sees it as the regular task it became.
    again = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    adopted = state_of(again, "s")
    assert (adopted.speculative, adopted.allocation_id) == (False, "alloc-7")


def test_v2_gives_a_speculative_task_a_tenth_of_the_weight(
    v2_runtime: ProcessRuntime, node_id: str, unified_root: Path
) -> None:
    v2_runtime.start(replace(launch("s", SLEEP, cpu=0.5), speculative=True))
    task = node_dir(unified_root, node_id) / "s"
    assert pids_in(task)
    if (task / "cpu.weight").exists():  # the cpu controller may be bound to v1 here
        assert (task / "cpu.weight").read_text().strip() == str(cgroups.SPECULATIVE_WEIGHT_V2)
    v2_runtime.promote("s", "alloc-1", ResourceLimits(0.5, 64))
    assert pids_in(task)
    if (task / "cpu.weight").exists():
        assert (task / "cpu.weight").read_text().strip() == str(cgroups.REGULAR_WEIGHT_V2)


@pytest.fixture
def docker_runtime(docker_client: Any, node_id: str, state_dir: Path) -> Iterator[DockerRuntime]:
    rt = DockerRuntime(node_id, state_dir, docker_client)
    yield rt
    rt.purge(grace_seconds=0.2)


def test_a_speculative_container_has_low_cpu_shares_until_promoted(
    docker_runtime: DockerRuntime, docker_client: Any, node_id: str, state_dir: Path
) -> None:
    docker_runtime.start(replace(launch("s", SLEEP, cpu=0.5), speculative=True))

    def shares() -> int:
        container = next(
            c
            for c in docker_client.containers.list(all=True)
            if c.labels.get("sluice.task_key") == "s" and node_id in c.name
        )
        container.reload()
        return int(container.attrs["HostConfig"]["CpuShares"])

    assert shares() == cgroups.SPECULATIVE_SHARES_V1
    assert state_of(docker_runtime, "s").speculative
    docker_runtime.promote("s", "alloc-3", ResourceLimits(1.0, 128))
    wait_until(lambda: shares() == 1024)
    again = DockerRuntime(node_id, state_dir, docker_client)
    adopted = state_of(again, "s")
    assert (adopted.speculative, adopted.allocation_id) == (False, "alloc-3")
