"""BIG-C preemption carried out by the node agent in the Docker runtime, checked through
``docker inspect``: immediate (pause, then the footprint with swap allowed), graceful (a step
per round, paused once it swaps), and resume (limits restored, then unpaused).

The machine has no swap by default: the module makes a 512 MiB swap file and removes it after.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import AgentConfig, NodeAgent, task_key
from node_agent.runtime.docker_runtime import DockerRuntime
from policies.scheduling.resources import Resources
from tests.integration.node_agent.conftest import unavailable, wait_until
from tests.integration.swapfile import swap_file

pytestmark = pytest.mark.integration
MiB = 1024 * 1024
GRANT = Resources(1.0, 512)
# Holds about 300 MiB in awk's memory (busybox), says so, then waits.
HOLD = (
    'awk \'BEGIN { s = sprintf("%300000000s", ""); print "held"; fflush(); system("sleep 600") }\''
)


@pytest.fixture(scope="module")
def swap() -> Iterator[Path]:
    with swap_file("512M", "docker-preemption", unavailable) as path:
        yield path


@pytest.fixture
def agent(swap: Path, docker_client: Any, node_id: str, state_dir: Path) -> Iterator[NodeAgent]:
    runtime = DockerRuntime(node_id, state_dir, docker_client)
    node = NodeAgent(AgentConfig(node_id, cpu_ids=(0, 1), capacity=Resources(2.0, 2048)), runtime)
    assert node.has_swap
    yield node
    runtime.purge(grace_seconds=0)


def holding(agent: NodeAgent, docker_client: Any, node_id: str) -> tuple[str, Any]:
    """A task holding ~300 MiB, running in its container: (its key, the container)."""
    agent.start_task("job", "t", 1, "alloc", ["sh", "-c", HOLD], GRANT, None)
    key = task_key("job", "t", 1)
    (container,) = docker_client.containers.list(
        all=True, filters={"label": [f"sluice.node={node_id}", f"sluice.task_key={key}"]}
    )
    wait_until(lambda: b"held" in agent.logs(key))
    return key, container


def host_config(container: Any) -> dict[str, Any]:
    container.reload()
    return dict(container.attrs["HostConfig"])


def paused(container: Any) -> bool:
    container.reload()
    return bool(container.attrs["State"]["Paused"])


def test_immediate_pauses_then_cuts_to_the_footprint_and_resume_restores_first(
    agent: NodeAgent, docker_client: Any, node_id: str
) -> None:
    key, container = holding(agent, docker_client, node_id)
    agent.suspend_allocation("job", "alloc", "test", Resources(0.01, 64))
    config = host_config(container)
    assert paused(container)
    assert config["Memory"] == 64 * MiB and config["MemorySwap"] == -1  # its pages went to swap
    assert config["CpuQuota"] == 1000  # 1 % of a 100 ms period (the quota's minimum)
    swapped = agent.tasks.swap_bytes(key)
    assert swapped is None or swapped > 0
    agent.resume_allocation("job", "alloc", GRANT)
    config = host_config(container)
    assert not paused(container)
    assert (config["Memory"], config["MemorySwap"], config["CpuQuota"]) == (
        512 * MiB,
        512 * MiB,
        100_000,
    )


def test_graceful_steps_down_once_a_round_and_pauses_once_it_swaps(
    agent: NodeAgent, docker_client: Any, node_id: str
) -> None:
    key, container = holding(agent, docker_client, node_id)
    agent.monitor_once(0.0)
    agent.resize_allocation(
        "job", "alloc", Resources(0.25, 128), Resources(0.5, 256), freeze_on_swap=True
    )
    assert host_config(container)["Memory"] == 512 * MiB  # nothing yet: a step per round
    agent.preemption_round()
    config = host_config(container)
    # one step: 1 -> 0.5 cpu, 512 -> 256 MiB, below the 300 MiB it holds: it swaps, so paused
    assert (config["CpuQuota"], config["Memory"]) == (50_000, 256 * MiB)
    assert paused(container)
    agent.preemption_round()  # frozen: no further step
    assert host_config(container)["Memory"] == 256 * MiB
    agent.monitor_once(1.0)
    (event,) = [e for e in agent.live_events() if e.task_id == "t"]
    assert event.state.value == "suspended" and event.limits == Resources(0.5, 256)
    del key
