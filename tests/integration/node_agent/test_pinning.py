"""CPU pinning honours the grants (issue 27 item 15, issue 35 item 2): tasks started together on
a 2-cpu agent get cpusets whose union holds what they were granted, read back from the cgroup
files (process runtime) and ``docker inspect`` (Docker runtime).

The starts run on threads, as concurrent StartTask calls do; a gate in front of the real
runtime's ``start`` holds each until all of them have chosen their cores, which is the
interleaving that made every task of a batch see the same snapshot.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from node_agent.agent import AgentConfig, NodeAgent, task_key
from node_agent.runtime import cgroups
from node_agent.runtime.base import RunObservation, TaskLaunch, TaskRuntime, scope_name
from node_agent.runtime.docker_runtime import DockerRuntime
from node_agent.runtime.process_runtime import ProcessRuntime
from node_agent.runtime.task_state import encode_name
from policies.oversubscription.config import OversubscriptionConfig, OversubscriptionMode
from policies.scheduling.resources import Resources
from tests.integration.node_agent.conftest import WAIT_S, wait_until

pytestmark = pytest.mark.integration
SLEEP = ["sleep", "600"]


class Gated:
    """The real runtime, with ``start`` held until ``parties`` starts have reached it (and,
    once armed, ``observe`` held after it looked, until released)."""

    def __init__(self, runtime: Any, parties: int) -> None:
        self.runtime = runtime
        self.barrier = threading.Barrier(parties, timeout=WAIT_S)
        self.looked = threading.Event()
        self.release = threading.Event()
        self.hold_observe = False

    def start(self, launch: TaskLaunch) -> None:
        self.barrier.wait()  # a BrokenBarrierError fails the start, and so the test
        self.runtime.start(launch)

    def observe(self) -> Sequence[RunObservation]:
        seen = self.runtime.observe()
        if self.hold_observe:
            self.hold_observe = False
            self.looked.set()
            assert self.release.wait(WAIT_S)
        return seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)


def start_together(agent: NodeAgent, grants: Sequence[float]) -> list[str]:
    """Start one ``sleep`` per grant, each on its own thread; their keys."""
    errors: list[BaseException] = []

    def run(index: int, cpu: float) -> None:
        try:
            agent.start_task("job", f"t-{index}", 1, f"a-{index}", SLEEP, Resources(cpu, 64), None)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i, cpu)) for i, cpu in enumerate(grants)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not errors, errors
    return [task_key("job", f"t-{i}", 1) for i in range(len(grants))]


def granted_cpu_fits(cpusets: dict[str, tuple[int, ...]], grants: dict[str, float]) -> bool:
    """For every set of tasks, their grants fit in the union of their cpusets."""
    for size in range(1, len(cpusets) + 1):
        for tasks in itertools.combinations(cpusets, size):
            union = set().union(*(cpusets[t] for t in tasks))
            if sum(grants[t] for t in tasks) > len(union) + 1e-9:
                return False
    return True


def agent_on(
    runtime: Any, mode: OversubscriptionMode = OversubscriptionMode.UTILIZATION
) -> NodeAgent:
    config = AgentConfig(
        node_id="pinning",
        cpu_ids=(0, 1),
        capacity=Resources(2.0, 2048),
        oversubscription=OversubscriptionConfig(mode=mode),
    )
    return NodeAgent(config, cast(TaskRuntime, runtime))


@pytest.fixture
def two_cpus() -> None:
    if len(cgroups.host_cpus()) < 2:
        pytest.fail("this test needs a machine of at least 2 cpus")


@pytest.fixture
def process_runtime(
    cgroup_v1: Path, node_id: str, state_dir: Path, two_cpus: None
) -> Iterator[ProcessRuntime]:
    runtime = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    assert runtime.uses_cgroups, runtime.describe()
    yield runtime
    runtime.purge(grace_seconds=0)


@pytest.fixture
def docker_runtime(
    docker_client: Any, node_id: str, state_dir: Path, two_cpus: None
) -> Iterator[DockerRuntime]:
    runtime = DockerRuntime(node_id, state_dir, docker_client)
    yield runtime
    runtime.purge(grace_seconds=0)


def cgroup_cpuset(node_id: str) -> Callable[[str], tuple[int, ...]]:
    def read(key: str) -> tuple[int, ...]:
        path = (
            Path("/sys/fs/cgroup/cpuset/sluice")
            / scope_name("sluice", node_id)
            / encode_name(key)
            / "cpuset.cpus"
        )
        return cgroups.parse_cpuset(path.read_text().strip())

    return read


def docker_cpuset(client: Any, node_id: str) -> Callable[[str], tuple[int, ...]]:
    def read(key: str) -> tuple[int, ...]:
        (container,) = client.containers.list(
            all=True, filters={"label": [f"sluice.node={node_id}", f"sluice.task_key={key}"]}
        )
        return cgroups.parse_cpuset(container.attrs["HostConfig"]["CpusetCpus"])

    return read


CASES = [
    pytest.param([0.9, 0.9], id="two-0.9"),
    pytest.param([0.5, 0.5, 0.5], id="three-0.5"),
]


def check(keys: list[str], grants: Sequence[float], read: Callable[[str], tuple[int, ...]]) -> None:
    cpusets = {key: read(key) for key in keys}
    assert granted_cpu_fits(cpusets, dict(zip(keys, grants, strict=True))), cpusets
    assert len(set().union(*cpusets.values())) == 2, cpusets  # both cores in use


@pytest.mark.parametrize("grants", CASES)
def test_tasks_started_together_on_the_process_runtime(
    process_runtime: ProcessRuntime, node_id: str, grants: list[float]
):
    agent = agent_on(Gated(process_runtime, len(grants)))
    keys = start_together(agent, grants)
    check(keys, grants, cgroup_cpuset(node_id))


@pytest.mark.parametrize("grants", CASES)
def test_tasks_started_together_in_docker(
    docker_runtime: DockerRuntime, docker_client: Any, node_id: str, grants: list[float]
):
    agent = agent_on(Gated(docker_runtime, len(grants)))
    keys = start_together(agent, grants)
    check(keys, grants, docker_cpuset(docker_client, node_id))


def test_a_job_master_then_two_tasks_together(process_runtime: ProcessRuntime, node_id: str):
    """The issue's scene: a 0.1-cpu job master runs; two 0.9-cpu tasks start together."""
    gated = Gated(process_runtime, 1)
    agent = agent_on(gated)
    agent.start_task("job", "jm", 1, "a-jm", SLEEP, Resources(0.1, 64), None)
    gated.barrier = threading.Barrier(2, timeout=WAIT_S)
    keys = [task_key("job", "jm", 1), *start_together(agent, [0.9, 0.9])]
    check(keys, [0.1, 0.9, 0.9], cgroup_cpuset(node_id))


def test_with_core_classes_a_speculative_task_gives_way(
    process_runtime: ProcessRuntime, node_id: str
):
    """RP mode: a speculative task runs on the second-class core; regular tasks started together
    are pinned by their grants as if it were not there (it holds no grant)."""
    gated = Gated(process_runtime, 1)
    agent = agent_on(gated, OversubscriptionMode.RESPONSIVENESS)
    agent.start_task(
        "spec", "s-0", 1, "", SLEEP, Resources(0.5, 64), None, speculative=True, cpuset=(1,)
    )
    gated.barrier = threading.Barrier(2, timeout=WAIT_S)
    keys = start_together(agent, [0.9, 0.9])
    check(keys, [0.9, 0.9], cgroup_cpuset(node_id))


def test_a_start_counts_until_a_monitor_pass_has_seen_it(
    process_runtime: ProcessRuntime, node_id: str
):
    """A monitor pass that looked before a task started must not make the next start forget
    it: the pass's snapshot replaces the agent's view after the first start returned."""
    gated = Gated(process_runtime, 1)
    agent = agent_on(gated)
    gated.hold_observe = True
    monitor = threading.Thread(target=agent.monitor_once, args=(0.0,))
    monitor.start()
    assert gated.looked.wait(WAIT_S)  # it looked: nothing runs yet
    agent.start_task("job", "t-0", 1, "a-0", SLEEP, Resources(0.9, 64), None)
    gated.release.set()
    monitor.join(WAIT_S)
    assert not monitor.is_alive()
    agent.start_task("job", "t-1", 1, "a-1", SLEEP, Resources(0.9, 64), None)
    keys = [task_key("job", "t-0", 1), task_key("job", "t-1", 1)]
    check(keys, [0.9, 0.9], cgroup_cpuset(node_id))
    agent.monitor_once(0.0)  # a pass that saw both: the reservations are no longer needed
    wait_until(lambda: not agent._reserved)
