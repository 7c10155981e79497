"""Preemption commands end to end: the RM's core sets a container's goal, a real agent daemon
(process runtime, real cgroups) carries it out through its heartbeats, and the RM sees it done.
Checked from the cgroup files, not from the agent's own view."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from node_agent.agent import AgentConfig, NodeAgent, task_key
from node_agent.daemon import AgentDaemon, AgentIdentity
from node_agent.runtime.base import scope_name
from node_agent.runtime.process_runtime import ProcessRuntime
from node_agent.runtime.task_state import encode_name
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.framework import Preemption, PreemptionAction, Resumption
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.records import Now, Shown
from tests.builders import job_spec, phase_doc
from tests.integration.node_agent.conftest import BURN, cpu_grows, wait_until
from tests.unit.resource_manager.test_service import Served

pytestmark = pytest.mark.integration
T = TypeVar("T")
TASK = Resources(1.0, 64)
INTERVAL = 0.05


def knob(node_id: str, key: str, hierarchy: str, name: str) -> str:
    root = Path("/sys/fs/cgroup") / hierarchy / "sluice" / scope_name("sluice", node_id)
    return (root / encode_name(key) / name).read_text().strip()


class Cluster:
    """An RM on its own event loop, and one real agent daemon heartbeating to it."""

    def __init__(
        self, runtime: ProcessRuntime, node_id: str, settings: CoreSettings | None = None
    ) -> None:
        self.node_id = node_id
        self.rm = Served(settings=settings)
        config = AgentConfig(node_id=node_id, cpu_ids=(0, 1), capacity=Resources(2.0, 2048))
        self.agent = NodeAgent(config, runtime)
        self.stop = threading.Event()
        self.daemon = AgentDaemon(
            self.agent,
            self.rm.address,
            f"{node_id}:7",
            "process",
            self.stop,
            identity=AgentIdentity(node_id, "sluice", "instance-1"),
        )
        self.threads = [
            threading.Thread(target=self.daemon.heartbeat_loop, args=(INTERVAL,), daemon=True),
            threading.Thread(target=self.daemon.monitor_loop, args=(INTERVAL,), daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def core(self, action: Callable[[ResourceManagerCore, Now], T]) -> T:
        """Run ``action`` as one unit of work on the RM's event loop, where its requests run."""

        async def call() -> T:
            return self.rm.state.run(action)

        return asyncio.run_coroutine_threadsafe(call(), self.rm.loop).result(timeout=10)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)
        self.daemon.close()
        self.rm.close()


@pytest.fixture
def cluster(cgroup_v1: Path, node_id: str, state_dir: Path) -> Iterator[Cluster]:
    runtime = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    assert runtime.uses_cgroups, runtime.describe()
    cluster = Cluster(runtime, node_id)
    try:
        yield cluster
    finally:
        cluster.close()
        runtime.purge(grace_seconds=0.2)


def test_suspend_resume_shrink_and_kill_reach_the_task_and_come_back_as_observed(
    cluster: Cluster,
) -> None:
    node_id = cluster.node_id
    wait_until(lambda: cluster.core(lambda core, now: node_id in core.nodes))
    spec = job_spec(phase_doc("p", 1, cpu=TASK.cpu, memory_mb=TASK.memory_mb), max_retries=0)

    def start_job(core: ResourceManagerCore, now: Now) -> tuple[str, str]:
        job = core.submit(spec, client_mode=True, now=now)
        core.register_master(job.job_id, attempt=1, now=now)
        answer = core.allocate(job.job_id, [PhaseAsk("p", 1, TASK)], [], [], 0, now=now)
        (allocation,) = answer.granted
        return job.job_id, allocation.allocation_id

    job_id, allocation_id = cluster.core(start_job)
    cluster.agent.start_task(job_id, "p-0", 1, allocation_id, ("sh", "-c", BURN), TASK, None)
    key = task_key(job_id, "p-0", 1)

    def task_state() -> TaskState | None:
        task = cluster.core(lambda core, now: core.tasks.get((job_id, "p-0", 1)))
        return None if task is None else task.state

    def cpu_seconds() -> float:
        return int(knob(node_id, key, "cpuacct", "cpuacct.usage")) / 1e9

    wait_until(lambda: task_state() is TaskState.RUNNING)

    def change(what: Callable[[ResourceManagerCore, Now], object]) -> None:
        cluster.core(what)  # a change that does not hold raises here

    # suspended: frozen in its cgroup; the RM frees its CPU once the node shows it
    change(
        lambda core, now: core.preempt(
            Preemption(allocation_id, PreemptionAction.SUSPEND, "test"), now=now
        )
    )
    wait_until(lambda: knob(node_id, key, "freezer", "freezer.state") == "FROZEN")
    wait_until(lambda: task_state() is TaskState.SUSPENDED)
    assert cluster.core(lambda core, now: core.node_allocated(node_id)) == Resources(0.0, 64)

    # resumed: thawed, burning again
    change(lambda core, now: core.resume(Resumption(allocation_id), now=now))
    wait_until(lambda: knob(node_id, key, "freezer", "freezer.state") == "THAWED")
    wait_until(lambda: task_state() is TaskState.RUNNING)
    cpu_grows(cpu_seconds)

    # shrunk to a quarter of a core: the CFS quota says so, and the RM sees the new limits
    shrunk = Resources(0.25, 64)
    change(
        lambda core, now: core.preempt(
            Preemption(allocation_id, PreemptionAction.SHRINK, "step", shrunk),
            now=now,
        )
    )

    def quota_share() -> float:
        quota = int(knob(node_id, key, "cpu", "cpu.cfs_quota_us"))
        return quota / int(knob(node_id, key, "cpu", "cpu.cfs_period_us"))

    wait_until(lambda: abs(quota_share() - 0.25) < 0.01)
    wait_until(
        lambda: (
            cluster.core(lambda core, now: core.allocations[allocation_id].shown_limits) == shrunk
        )
    )
    assert cluster.core(lambda core, now: core.allocations[allocation_id].shown) is Shown.RUNNING
    assert cluster.core(lambda core, now: core.node_allocated(node_id)) == shrunk

    # killed by preemption: stopped, marked preempted, the container taken back
    change(
        lambda core, now: core.preempt(
            Preemption(allocation_id, PreemptionAction.KILL, "room"), now=now
        )
    )
    wait_until(lambda: task_state() is TaskState.KILLED)
    task = cluster.core(lambda core, now: core.tasks[(job_id, "p-0", 1)])
    assert task.preempted and task.message == "preempted: room"
    assert cluster.core(lambda core, now: allocation_id not in core.allocations)
