"""A kept container yields to a strictly higher priority, or to anyone once its reservation has
lapsed (Alg. 1, TryAllocateTask), as a post-filter."""

from __future__ import annotations

import math

import pytest

from policies.reservation.override import KeptContainer, ReservationOverride
from policies.scheduling.capacity_index import CapacityIndex
from policies.scheduling.framework import PassContext, PendingAsk, PreemptionAction
from tests.builders import res


def kept(allocation_id: str, priority: int, expires_at: float = math.inf) -> KeptContainer:
    return KeptContainer(allocation_id, f"job-{allocation_id}", priority, res(1, 256), expires_at)


def ask(priority: int, cpu: float = 1.0) -> PendingAsk:
    return PendingAsk("asker", priority, 1, "p", 1, res(cpu, 256))


def taken(
    kept_here: list[KeptContainer], asking: PendingAsk, *, free_cpu: float = 0.5
) -> list[str]:
    index = CapacityIndex()
    index.set("n1", res(4, 4096), res(4 - free_cpu, 4096 - 512))
    plugin = ReservationOverride({"n1": kept_here}, now=100.0)
    context = PassContext(now=0.0, cluster=index, held={})
    preemptions = plugin.preempt(asking, context)
    assert all(p.action is PreemptionAction.KILL for p in preemptions)
    return [p.allocation_id for p in preemptions]


@pytest.mark.parametrize(
    ("kept_here", "asking", "expected"),
    [
        ([kept("a", 0)], ask(5), ["a"]),  # strictly higher priority overrides
        ([kept("a", 5)], ask(5), []),  # equal priority is refused ...
        ([kept("a", 5, expires_at=99.0)], ask(5), ["a"]),  # ... until the deadline has passed
        ([kept("a", 9)], ask(5), []),  # higher priority is refused
        ([kept("a", 1), kept("b", 0)], ask(5), ["b"]),  # the lowest priority goes first
        ([kept("a", 0), kept("b", 0)], ask(5, cpu=2.0), ["a", "b"]),  # as many as it needs
        ([kept("a", 0)], ask(5, cpu=3.0), []),  # not enough even with it: nothing taken
    ],
)
def test_which_kept_containers_yield(kept_here, asking, expected):
    assert taken(kept_here, asking) == expected


def test_a_container_is_taken_once_per_pass():
    index = CapacityIndex()
    index.set("n1", res(4, 4096), res(3.5, 3584))
    plugin = ReservationOverride({"n1": [kept("a", 0)]}, now=100.0)
    context = PassContext(now=0.0, cluster=index, held={})
    assert [p.allocation_id for p in plugin.preempt(ask(5), context)] == ["a"]
    assert list(plugin.preempt(ask(5), context)) == []
