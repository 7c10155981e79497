"""Why an ask is pending, node by node (policies.scheduling.diagnosis), and that it agrees with
what a pass does: an ask told "0/N nodes are available" is one the pass cannot place."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policies.preemption.cluster import QueueCap, QueueClaims
from policies.scheduling.diagnosis import describe, why_pending
from policies.scheduling.framework import (
    AllocationKind,
    NodeCapacity,
    PassContext,
    PendingAsk,
    PriorityFifo,
    Profile,
    baseline_profile,
    schedule_pass,
)
from tests.builders import res
from tests.unit.scheduling.test_framework import index_of, pending

NODES = (
    ("small-1", 1, 4096, 0, 0),  # too little cpu for 2
    ("small-2", 1, 4096, 0, 0),
    ("thin", 4, 256, 0, 0),  # too little memory for 512
    ("busy", 4, 4096, 3.5, 3900),  # both
    ("free", 4, 4096, 0, 0),
)


class _NotOn:
    """A filter refusing one node."""

    name = "NotOnFree"
    shape_only = True

    def feasible(self, ask: PendingAsk, node: NodeCapacity, context: PassContext) -> bool:
        return node.node_id != "free"


@pytest.mark.parametrize(
    ("case", "ask", "profile", "unschedulable", "text"),
    [
        (
            "one node fits",
            pending("j", cpu=2, memory_mb=512),
            baseline_profile(),
            {},
            "1/5 nodes are available: 3 insufficient cpu, 2 insufficient memory: the next "
            "pass places it, unless asks served before it take them",
        ),
        (
            "a filter refuses the one that fits; two nodes are draining",
            pending("j", cpu=2, memory_mb=512),
            Profile(queue_order=PriorityFifo(), filters=(_NotOn(),)),
            {"draining": 2},
            "0/7 nodes are available: 3 insufficient cpu, 2 draining, 2 insufficient memory, "
            "1 refused by NotOnFree",
        ),
        (
            "capacity held for another queue",
            replace(pending("j", cpu=2, memory_mb=512), queue="batch"),
            Profile(
                queue_order=PriorityFifo(),
                reserves=(QueueClaims({"free": {"prod": res(3, 0)}}),),
            ),
            {},
            "0/5 nodes are available: 3 insufficient cpu, 2 insufficient memory, "
            "1 held for others (QueueClaims)",
        ),
        (
            "the queue is at its max_share",
            replace(pending("j", cpu=2, memory_mb=512), queue="batch"),
            Profile(
                queue_order=PriorityFifo(),
                permits=(QueueCap({"batch": res(4, 4096)}, {"batch": res(3, 1024)}),),
            ),
            {},
            "held back: queue 'batch' is at its max_share (4 CPU, 4096 MB) (QueueCap); "
            "1/5 nodes are available: 3 insufficient cpu, 2 insufficient memory",
        ),
        (
            "waiting for a node near its input",
            replace(
                pending("j", cpu=2, memory_mb=512),
                preferred_nodes=frozenset({"busy"}),
                local_until=3.0,
            ),
            baseline_profile(),
            {},
            "held back: waits for one of 1 nodes near its input until 3 s (locality wait) "
            "(Locality); 0/5 nodes are available: 4 not near its input (locality wait), "
            "1 insufficient cpu, 1 insufficient memory",
        ),
    ],
)
def test_why_an_ask_is_pending(
    case: str,
    ask: PendingAsk,
    profile: Profile,
    unschedulable: dict[str, int],
    text: str,
) -> None:
    context = PassContext(now=1.0, cluster=index_of(*NODES))
    why = why_pending(ask, context, profile, unschedulable=unschedulable)
    assert why.text() == text
    # The pass agrees: nothing is placed when the diagnosis finds no node or holds it back.
    plan = schedule_pass([ask], PassContext(now=1.0, cluster=index_of(*NODES)), profile)
    placeable = why.available > 0 and why.held_back is None
    assert bool(plan.placements) == placeable


def test_a_description_names_what_is_pending() -> None:
    master = pending("j", cpu=0.5, memory_mb=128, phase="", kind=AllocationKind.JOB_MASTER)
    context = PassContext(now=0.0, cluster=index_of(("a", 0.25, 4096, 0, 0)))
    assert describe(why_pending(master, context, baseline_profile())) == (
        "its job master: a container of 0.5 CPU, 128 MB: 0/1 nodes are available: "
        "1 insufficient cpu"
    )
    tasks = pending("j", count=3, cpu=1, memory_mb=8192)
    assert describe(why_pending(tasks, context, baseline_profile())).startswith(
        "phase p: 3 containers of 1 CPU, 8192 MB: 0/1 nodes are available: "
    )
