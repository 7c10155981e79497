"""The RM's locality wait: an ask naming the nodes its input is on waits for them up to
``locality_wait``, measured from when its phase first named them, then takes any node."""

from __future__ import annotations

import pytest

from policies.scheduling.asks import PhaseAsk
from tests.builders import res
from tests.unit.resource_manager.harness import Driver, add_node, new_core, running_job, spec_of


def busy_cluster(wait: float) -> tuple[Driver, str]:
    """Node "a" full with another job's containers, node "b" empty; a job ready to ask."""
    core = new_core(locality_wait=wait, node_timeout=1e4)  # no node is lost meanwhile
    add_node(core, "a", 2.0, 4096)
    add_node(core, "b", 2.0, 4096)
    filler = running_job(core, spec_of(4, priority=9))
    granted = core.allocate(filler, [PhaseAsk("p", 4, res(1, 256))], [], [], 0, now=1.0).granted
    assert {g.node_id for g in granted} == {"a", "b"}
    for allocation in granted:  # keep the two on "a", give "b" back
        if allocation.node_id == "b":
            core.allocate(filler, [], [allocation.allocation_id], [], 0, now=1.0)
    return core, running_job(core, spec_of(1))


def ask_near_a(core: Driver, job_id: str, now: float) -> list[str]:
    answer = core.allocate(job_id, [PhaseAsk("p", 1, res(1, 256), ("a",))], [], [], 0, now=now)
    return [g.node_id for g in answer.granted]


def test_without_a_wait_an_ask_takes_another_node_at_once_when_its_nodes_are_full():
    core, job_id = busy_cluster(0.0)
    assert ask_near_a(core, job_id, 2.0) == ["b"]


@pytest.mark.parametrize("wake_by", ["tick", "end_locality_waits"])
def test_an_ask_waits_for_its_nodes_then_takes_any_once_the_wait_is_over(wake_by: str):
    core, job_id = busy_cluster(3.0)
    assert ask_near_a(core, job_id, 2.0) == []
    assert ask_near_a(core, job_id, 4.0) == []  # asking again does not restart the wait
    assert core.next_locality_end() == 5.0
    assert core.next_wakeup() <= 5.0  # the live RM's timer wakes for it
    wake = core.tick if wake_by == "tick" else lambda t: core.end_locality_waits(now=t)
    wake(4.9)
    assert ask_near_a(core, job_id, 4.9) == []
    wake(5.0)  # the pass it makes due places the container on "b"
    assert ask_near_a(core, job_id, 5.0) == ["b"]
    assert core.next_locality_end() is None


def pre_reserve_near_a(core: Driver, job_id: str, now: float, *, local_only: bool) -> list[str]:
    ask = PhaseAsk("p", 1, res(1, 256), ("a",), local_only=local_only)
    return [g.node_id for g in core.allocate(job_id, [ask], [], [], 0, now=now).granted]


def test_a_local_only_ask_waits_for_its_nodes_until_it_asks_as_usual():
    core, job_id = busy_cluster(3.0)
    assert pre_reserve_near_a(core, job_id, 2.0, local_only=True) == []
    assert core.next_locality_end() is None  # no end to wake for
    core.tick(500.0)
    assert pre_reserve_near_a(core, job_id, 500.0, local_only=True) == []
    # the phase opens and asks as usual: the usual wait starts now
    assert pre_reserve_near_a(core, job_id, 501.0, local_only=False) == []
    core.tick(504.0)
    assert pre_reserve_near_a(core, job_id, 504.0, local_only=False) == ["b"]


def test_without_a_locality_wait_a_local_only_ask_takes_any_node():
    core, job_id = busy_cluster(0.0)
    assert pre_reserve_near_a(core, job_id, 2.0, local_only=True) == ["b"]
