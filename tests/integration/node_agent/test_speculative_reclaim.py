"""Admission while memory is reclaimed, on a real agent with real cgroups (issue 28 section 3):
once a regular task has reclaimed the memory speculative tasks borrowed, a re-placed task is
not admitted into it, until the regular task is gone and the hold has passed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from tests.integration.node_agent.conftest import wait_until
from tests.integration.node_agent.test_speculative_queue import SLEEP, Node, config, queued

pytestmark = pytest.mark.integration


@pytest.fixture
def node(cgroup_v1: Path, node_id: str, tmp_path: Path) -> Iterator[Node]:
    built = Node(cgroup_v1, node_id, tmp_path / "agent")
    built.agent.speculative.config = config(reclaim_hold_s=0.5)
    yield built
    built.agent.tasks.purge(grace_seconds=0.2)


def second_attempt(node: Node) -> TaskState | None:
    node.agent.monitor_once(time.time())
    for status in node.agent.speculative_statuses("job"):
        if status.task_id == "map-0" and status.attempt == 2:
            return status.state
    return None


def test_a_re_placed_task_waits_out_the_reclaim_instead_of_being_evicted_again(
    node: Node,
) -> None:
    node.enqueue(queued("map-0", memory_mb=600))
    node.agent.start_task("job", "reduce-0", 1, "alloc-1", SLEEP, Resources(0.5, 1800), None)
    node.agent.monitor_once(time.time())  # evicts map-0: 2,400 MiB of limits on 2,048
    node.agent.monitor_once(time.time())
    assert node.agent.speculative.eviction_of("job.map-0.1") is not None
    # Its job master places it again (a new attempt): the old agent admitted it (the machine's
    # memory was far under its threshold) and the next pass evicted it again.
    node.enqueue(replace(queued("map-0", memory_mb=600), attempt=2))
    for _ in range(3):
        node.agent.monitor_once(time.time())
    assert node.agent.speculative.is_queued("job.map-0.2")
    assert node.agent.speculative.blocked.startswith("memory reclaimed for regular tasks")
    # The regular task ends: the hold lifts (past reclaim_hold_s, and room for the quota again).
    node.agent.stop("job.reduce-0.1", 0.2)
    wait_until(lambda: second_attempt(node) is TaskState.RUNNING, 30)
    assert node.agent.speculative.eviction_of("job.map-0.2") is None
