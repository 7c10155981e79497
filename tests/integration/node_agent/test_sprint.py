"""DiAS sprinting end to end: the RM's budget decides, a real agent daemon (process runtime,
real cgroups) raises the task's CFS quota above its grant on idle cores, and lowers it again when
the budget runs dry.  Checked from the cgroup files, not from the agent's own view."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.agent import task_key
from node_agent.runtime.process_runtime import ProcessRuntime
from policies.approximation.dias_config import parse_dias_config
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.records import Now
from tests.builders import job_spec, phase_doc
from tests.integration.node_agent.conftest import BURN, wait_until
from tests.integration.node_agent.test_container_goals import Cluster, knob

pytestmark = pytest.mark.integration
TASK = Resources(0.5, 64)
# Priority 1 sprints 5 s after its dispatch; the budget holds 5 sprint-seconds, never refilled.
DIAS = parse_dias_config(
    {
        "priorities": [{"priority": 1, "sprint_timeout_s": 5}],
        "sprint": {"budget_s": 5, "replenish_s_per_hour": 0, "factor": 2.0},
    }
)


@pytest.fixture
def cluster(cgroup_v1: Path, node_id: str, state_dir: Path) -> Iterator[Cluster]:
    runtime = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    assert runtime.uses_cgroups, runtime.describe()
    cluster = Cluster(runtime, node_id, CoreSettings(dias=DIAS))
    try:
        yield cluster
    finally:
        cluster.close()
        runtime.purge(grace_seconds=0.2)


def test_a_job_past_its_timeout_sprints_on_idle_cores_until_the_budget_is_spent(
    cluster: Cluster,
) -> None:
    node_id = cluster.node_id
    wait_until(lambda: cluster.core(lambda core, now: node_id in core.nodes))
    spec = job_spec(phase_doc("p", 1, cpu=TASK.cpu, memory_mb=TASK.memory_mb), priority=1)

    def start_job(core: ResourceManagerCore, now: Now) -> tuple[str, str]:
        job = core.submit(spec, client_mode=True, now=now)  # in execution at 1.0
        core.register_master(job.job_id, attempt=1, now=now)
        (allocation,) = core.allocate(
            job.job_id, [PhaseAsk("p", 1, TASK)], [], [], 0, now=now
        ).granted
        return job.job_id, allocation.allocation_id

    job_id, allocation_id = cluster.core(start_job)
    cluster.agent.start_task(job_id, "p-0", 1, allocation_id, ("sh", "-c", BURN), TASK, None)
    key = task_key(job_id, "p-0", 1)

    def quota_share() -> float:
        quota = int(knob(node_id, key, "cpu", "cpu.cfs_quota_us"))
        return quota / int(knob(node_id, key, "cpu", "cpu.cfs_period_us"))

    def at(seconds: float) -> None:
        """The RM's clock moves to ``seconds``, and its housekeeping runs."""
        cluster.rm.clock_value = seconds
        cluster.core(lambda core, now: core.tick(now))

    def task_state() -> TaskState | None:
        task = cluster.core(lambda core, now: core.tasks.get((job_id, "p-0", 1)))
        return None if task is None else task.state

    wait_until(lambda: task_state() is TaskState.RUNNING)
    assert abs(quota_share() - 0.5) < 0.01

    at(6.0)  # past the timeout: the node doubles the task's CPU (1.5 cores are idle)
    assert cluster.core(lambda core, now: core.sprints.sprinting(job_id))
    wait_until(lambda: abs(quota_share() - 1.0) < 0.01)
    # The agent reports its grant as its limits (the sprint beside them): the RM keeps them.
    assert cluster.agent.core.factor_of(key) == 2.0
    shown = cluster.core(lambda core, now: core.allocations[allocation_id].shown_limits)
    assert shown in (None, TASK)
    assert cluster.core(lambda core, now: core.sprints.budget_at(8.0)) == pytest.approx(3.0)

    at(11.5)  # 5 sprint-seconds spent at 11: back to the grant
    wait_until(lambda: abs(quota_share() - 0.5) < 0.01)
    assert cluster.core(lambda core, now: core.sprints.budget_at(now.wall)) == 0.0
    (record,) = cluster.core(lambda core, now: core.sprints.history)
    assert (record.job_id, record.why) == (job_id, "the budget ran dry")
    assert record.sprinted_s == pytest.approx(5.0)
