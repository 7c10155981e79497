"""The node agent's speculative queue on real processes and cgroups (ROSE Sec. 3.2, 6.1, 6.2):
admission, the quota, core classes, the throttle's evictions, upgrades and restarts.

The machine-wide thresholds are set to 1 here (never exceeded), so what is checked never
depends on how busy the host is; the quota and queue length are what block.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import AgentConfig, NodeAgent
from node_agent.runtime.base import RunObservation, RunState
from node_agent.runtime.process_runtime import ProcessRuntime
from node_agent.speculative import QueuedLaunch
from policies.oversubscription.anomaly import AnomalyVerdict
from policies.oversubscription.config import OversubscriptionConfig
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from policies.scheduling.service_spec import ServiceSpec
from tests.integration.node_agent.conftest import WAIT_S, wait_until

pytestmark = pytest.mark.integration
SLEEP = ("sleep", "60")
CAPACITY = Resources(2.0, 2048)


def config(**changes: object) -> OversubscriptionConfig:
    base = OversubscriptionConfig(
        admission_thresholds=(1.0, 1.0, 1.0),
        oversubscription_quota=(0.5, 0.5, 0.5),
        max_queue_length=3,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def queued(task: str, cpu: float = 0.25, memory_mb: int = 64) -> QueuedLaunch:
    return QueuedLaunch(
        job_id="job",
        task_id=task,
        attempt=1,
        argv=SLEEP,
        resources=Resources(cpu, memory_mb),
        image=None,
        env={},
        enqueued_at=time.time(),
    )


class Node:
    """A node agent on real cgroups, made again on the same state to restart it."""

    def __init__(self, cgroup_root: Path, node_id: str, state_dir: Path) -> None:
        self.cgroup_root, self.node_id, self.state_dir = cgroup_root, node_id, state_dir
        self.agent = self.start(config())

    def start(self, oversubscription: OversubscriptionConfig) -> NodeAgent:
        runtime = ProcessRuntime(
            self.node_id, self.state_dir / "tasks", cgroup_root=self.cgroup_root
        )
        return NodeAgent(
            AgentConfig(
                node_id=self.node_id,
                cpu_ids=(0, 1),
                capacity=CAPACITY,
                oversubscription=oversubscription,
                state_dir=self.state_dir,
            ),
            runtime,
        )

    def enqueue(self, launch: QueuedLaunch) -> tuple[bool, str, int]:
        known = any(o.task_key == launch.key for o in self.agent.observations())
        answer = self.agent.speculative.enqueue(launch, known)
        self.agent.monitor_once(time.time())
        return answer

    def states(self) -> dict[str, TaskState]:
        return {s.task_id: s.state for s in self.agent.speculative_statuses("job")}


@pytest.fixture
def node(cgroup_v1: Path, node_id: str, tmp_path: Path) -> Iterator[Node]:
    built = Node(cgroup_v1, node_id, tmp_path / "agent")
    yield built
    built.agent.tasks.purge(grace_seconds=0.2)


def test_an_admitted_task_starts_speculative_in_the_queue_pass(node: Node) -> None:
    accepted, reason, _ = node.enqueue(queued("map-0"))
    assert (accepted, reason) == (True, "")
    assert node.states() == {"map-0": TaskState.RUNNING}
    event = node.agent.live_events()[0]
    assert event.speculative and event.allocation_id == "speculative-job.map-0.1"
    assert node.agent.queue_state().running == 1


def test_the_quota_blocks_the_head_and_says_why(node: Node) -> None:
    node.enqueue(queued("map-0", cpu=0.75))  # 0.75 of the 1.0 cpu quota
    node.enqueue(queued("map-1", cpu=0.5))  # would make 1.25
    node.enqueue(queued("map-2", cpu=0.1))  # behind it: the head is never skipped
    assert node.states() == {
        "map-0": TaskState.RUNNING,
        "map-1": TaskState.PENDING,
        "map-2": TaskState.PENDING,
    }
    state = node.agent.queue_state()
    assert "cpu oversubscription 0.625 would exceed quota 0.5" in state.blocked
    assert (state.queued, state.running, state.admitted) == (2, 1, 3)


def test_a_full_queue_refuses_with_the_reason(node: Node) -> None:
    node.enqueue(queued("map-0", cpu=1.0))  # holds the whole quota: the rest stay queued
    for index in (1, 2, 3):
        assert node.enqueue(queued(f"map-{index}", cpu=1.0))[0]
    accepted, reason, length = node.enqueue(queued("map-4"))
    assert (accepted, reason, length) == (False, "queue full (3 >= 3)", 3)
    assert node.agent.queue_state().refused == 1
    # A retried request for a task already here is answered as accepted, not counted twice.
    assert node.enqueue(queued("map-1", cpu=1.0))[0]
    assert node.agent.queue_state().admitted == 4


def test_a_queued_task_can_be_cancelled(node: Node) -> None:
    node.enqueue(queued("map-0", cpu=1.0))
    node.enqueue(queued("map-1", cpu=1.0))
    assert node.agent.speculative.cancel("job.map-1.1", "upgraded elsewhere")
    assert node.states()["map-1"] is TaskState.KILLED
    assert not node.agent.speculative.cancel("job.map-1.1", "again")


def test_rp_pins_speculative_tasks_to_second_class_cores(node: Node) -> None:
    node.agent.set_oversubscription_mode("rp")
    node.agent.start_task("job", "svc-0", 1, "alloc-1", SLEEP, Resources(0.5, 64), None)
    regular_cores = next(o for o in node.agent.observations() if o.task_id == "svc-0").limits.cpuset
    node.enqueue(queued("map-0"))
    speculative = next(o for o in node.agent.observations() if o.task_id == "map-0")
    assert set(speculative.limits.cpuset).isdisjoint(regular_cores)
    assert speculative.limits.cpuset  # the other core


def test_an_anomaly_blocks_the_queue_and_evicts_first_class_tasks_first(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.agent.set_oversubscription_mode("rp")
    node.enqueue(queued("map-0"))  # before the service: on every core, then re-pinned
    node.agent.start_task(
        "svc", "web-0", 1, "alloc-1", SLEEP, Resources(1.0, 64), None, service=ServiceSpec(True)
    )
    node.agent.monitor_once(time.time())
    node.enqueue(queued("map-1"))
    verdict = AnomalyVerdict(True, "psi_cpu", 42.0, 7.0)
    monkeypatch.setattr(node.agent.services, "anomalous", lambda: [("svc.web-0.1", verdict)])
    node.enqueue(queued("map-2"))  # its pass evicts
    node.agent.monitor_once(time.time())  # and this one sees them ended
    states = node.states()
    assert states == {
        "map-0": TaskState.KILLED,
        "map-1": TaskState.KILLED,
        "map-2": TaskState.PENDING,
    }
    ended = {s.task_id: s for s in node.agent.speculative_statuses("job")}
    assert ended["map-0"].evicted and ended["map-0"].message.startswith("evicted: psi_cpu")
    state = node.agent.queue_state()
    assert state.throttled and state.blocked.startswith("throttled: psi_cpu of service")
    assert state.evicted == 2
    # The anomaly over, the queue stays blocked for the hold, then goes on.
    monkeypatch.setattr(node.agent.services, "anomalous", lambda: [])
    node.agent.monitor_once(time.time())
    assert node.states()["map-2"] is TaskState.PENDING
    assert node.agent.queue_state().blocked.startswith("throttled: psi_cpu")
    node.agent.monitor_once(time.time() + node.agent.speculative.config.throttle_hold_s)
    assert node.states()["map-2"] is TaskState.RUNNING
    assert not node.agent.queue_state().throttled


def test_up_mode_never_throttles(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = AnomalyVerdict(True, "psi_cpu", 42.0, 7.0)
    monkeypatch.setattr(node.agent.services, "anomalous", lambda: [("svc.web-0.1", verdict)])
    node.enqueue(queued("map-0"))
    assert node.states() == {"map-0": TaskState.RUNNING}


def test_regular_tasks_reclaim_memory_speculative_ones_borrowed(node: Node) -> None:
    node.enqueue(queued("map-0", memory_mb=600))
    node.agent.start_task("job", "reduce-0", 1, "alloc-1", SLEEP, Resources(0.5, 1800), None)
    node.agent.monitor_once(time.time())  # evicts it
    node.agent.monitor_once(time.time())  # sees it ended
    status = {s.task_id: s for s in node.agent.speculative_statuses("job")}
    assert status["map-0"].evicted
    assert status["map-0"].message == "evicted: memory reclaimed for regular tasks"


def test_an_upgraded_task_reports_its_container_and_is_no_longer_speculative(node: Node) -> None:
    node.enqueue(queued("map-0"))
    node.agent.promote("job.map-0.1", "alloc-9", Resources(1.0, 128))
    node.agent.monitor_once(time.time())
    event = next(e for e in node.agent.live_events() if e.task_id == "map-0")
    assert (event.speculative, event.allocation_id, event.state) == (
        False,
        "alloc-9",
        TaskState.RUNNING,
    )
    listed = node.agent.speculative_statuses("job")
    assert [(s.task_id, s.upgraded, s.allocation_id) for s in listed] == [
        ("map-0", True, "alloc-9")
    ]
    assert node.agent.queue_state().running == 0


def test_a_restarted_agent_keeps_its_queue_and_its_running_tasks_once(node: Node) -> None:
    node.enqueue(queued("map-0", cpu=1.0))
    node.enqueue(queued("map-1", cpu=1.0))
    node.agent.close_services()
    node.agent = node.start(config())  # the agent process again, on the same state
    node.agent.monitor_once(time.time())
    assert node.states() == {"map-0": TaskState.RUNNING, "map-1": TaskState.PENDING}
    running = [o for o in node.agent.observations() if o.state is RunState.RUNNING]
    assert [(o.task_id, o.speculative) for o in running] == [("map-0", True)]
    # The quota freed, the queued one starts, once.
    node.agent.stop("job.map-0.1", 0.2)
    node.agent.monitor_once(time.time())
    wait_until(lambda: node.states()["map-1"] is TaskState.RUNNING)
    assert sum(1 for o in node.agent.observations() if o.task_id == "map-1") == 1


def test_a_restarted_agent_keeps_watching_its_running_services(node: Node) -> None:
    node.agent.start_task(
        "svc", "web-0", 1, "alloc-1", SLEEP, Resources(1.0, 64), None, service=ServiceSpec(True)
    )
    node.agent.start_task("svc", "web-1", 1, "alloc-2", SLEEP, Resources(0.25, 64), None)
    node.agent.monitor_once(time.time())
    assert node.agent.services.keys() == {"svc.web-0.1"}
    node.agent.close_services()  # the agent stops; its tasks go on
    node.agent = node.start(config())
    assert node.agent.services.keys() == {"svc.web-0.1"}  # the service only, at start-up
    node.agent.stop("svc.web-0.1", 0.2)

    def forgotten() -> bool:
        node.agent.monitor_once(time.time())
        return node.agent.services.keys() == frozenset()

    wait_until(forgotten)


def test_an_enqueued_task_starts_in_a_pass_that_does_not_observe_the_runtime_again(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    node.agent.monitor_once(time.time())
    asked: list[int] = []
    real = node.agent.tasks.observe

    def observe() -> Sequence[RunObservation]:
        asked.append(1)
        return real()

    monkeypatch.setattr(node.agent.tasks, "observe", observe)
    accepted, _, _ = node.agent.speculative.enqueue(queued("map-0"), known=False)
    node.agent.speculative_pass(time.time())  # what EnqueueSpeculative runs
    assert accepted and asked == []
    running = [o for o in node.agent.observations() if o.state is RunState.RUNNING]
    assert [(o.task_id, o.speculative) for o in running] == [("map-0", True)]


def test_a_drain_empties_the_queue_so_no_later_pass_starts_a_task(node: Node) -> None:
    node.enqueue(queued("map-0", cpu=1.0))
    node.enqueue(queued("map-1", cpu=1.0))  # over the quota: it waits
    assert node.states() == {"map-0": TaskState.RUNNING, "map-1": TaskState.PENDING}
    assert node.agent.drain() == 1
    node.agent.monitor_once(time.time())
    assert [o for o in node.agent.observations() if o.state is RunState.RUNNING] == []
    assert node.agent.queue_state().queued == 0


def test_a_pass_admits_while_an_earlier_pass_still_starts_its_container(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container takes the engine ~0.2 s to start: a task enqueued meanwhile is admitted by
    its own pass at once, and the start under way counts against the quota."""
    release = threading.Event()
    real = node.agent.tasks.start

    def start(launch: Any) -> None:
        if launch.task_id == "slow":
            release.wait(WAIT_S)  # a slow engine
        real(launch)

    monkeypatch.setattr(node.agent.tasks, "start", start)

    def enqueue_and_pass(task: str, cpu: float) -> None:
        node.agent.speculative.enqueue(queued(task, cpu=cpu), known=False)
        node.agent.speculative_pass(time.time())  # what EnqueueSpeculative runs

    slow = threading.Thread(target=enqueue_and_pass, args=("slow", 0.5), daemon=True)
    slow.start()
    try:
        wait_until(lambda: not node.agent.speculative.is_queued("job.slow.1"))  # admitted
        fast = threading.Thread(target=enqueue_and_pass, args=("fast", 0.25), daemon=True)
        fast.start()
        fast.join(WAIT_S)
        assert not fast.is_alive()  # its pass did not wait for the slow start
        assert node.states()["fast"] is TaskState.RUNNING
        assert node.states()["slow"] is TaskState.PENDING  # still starting
        # 0.5 starting + 0.25 running + 0.5 would pass the 1.0 cpu quota: the head waits.
        enqueue_and_pass("over", 0.5)
        assert node.states()["over"] is TaskState.PENDING
        assert "would exceed quota" in node.agent.queue_state().blocked
    finally:
        release.set()
        slow.join(WAIT_S)
    assert node.states()["slow"] is TaskState.RUNNING
