"""The baseline placement decision as one exhaustive function: strict priority between jobs,
FIFO within a priority, work-conserving, no preemption, every node scored for every container.

The resource manager and the simulator place through the scheduling framework
(:mod:`policies.scheduling.framework`, with its baseline plugins), which scales to 15,000 nodes;
this function is the *reference* it is held to: on clusters of up to ``exhaustive_below`` nodes
the framework's pass must place exactly as :func:`place` does (a property test pins it), and
``bench/bench_placement.py`` compares the two at scale.

This is what every later policy (slot reservation, container preemption, approximation) is
measured against.  It is a pure function of an immutable snapshot, so a simulator can call it
with virtual time exactly as the resource manager does.

Order: asks are served by (priority descending, submission order ascending, ask order).  An ask
that fits nowhere does not block the asks behind it — that is what work-conserving means here,
and also why a large high-priority ask can wait while smaller low-priority ones run (the
baseline's known weakness, which reservation and preemption address).

Placement: each container goes to the node with the most free capacity left (lowest dominant
share of allocation after placing it), ties broken by node id, which spreads load evenly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.scheduling.resources import Resources


@dataclass(frozen=True)
class NodeSlot:
    """A schedulable node: its capacity and what is already allocated on it."""

    node_id: str
    capacity: Resources
    allocated: Resources


@dataclass(frozen=True)
class Ask:
    """``count`` more containers of ``resources`` wanted by one phase of one job.

    ``submit_seq`` is the job's submission order (lower = earlier).  ``master`` marks the ask
    for the job's own job master container (``phase`` is then empty)."""

    job_id: str
    priority: int
    submit_seq: int
    phase: str
    count: int
    resources: Resources
    master: bool = False


@dataclass(frozen=True)
class Placement:
    """One container granted: ``resources`` of ``node_id`` for ``phase`` of ``job_id``."""

    job_id: str
    phase: str
    node_id: str
    resources: Resources
    master: bool = False


def order_asks(asks: Sequence[Ask]) -> list[Ask]:
    """Serving order: priority descending, then submission order, then the given order."""
    indexed = sorted(
        enumerate(asks), key=lambda item: (-item[1].priority, item[1].submit_seq, item[0])
    )
    return [ask for _, ask in indexed]


def place(nodes: Sequence[NodeSlot], asks: Sequence[Ask]) -> tuple[Placement, ...]:
    """Grant as many asked containers as fit, in serving order.  Never over-allocates a node."""
    free = {node.node_id: node.capacity - node.allocated for node in nodes}
    capacity = {node.node_id: node.capacity for node in nodes}
    node_ids = sorted(free)
    placements: list[Placement] = []
    for ask in order_asks(asks):
        for _ in range(ask.count):
            node_id = _emptiest_fitting_node(node_ids, free, capacity, ask.resources)
            if node_id is None:
                break  # identical containers: if one fits nowhere, the rest do not either
            free[node_id] = free[node_id] - ask.resources
            placements.append(
                Placement(ask.job_id, ask.phase, node_id, ask.resources, master=ask.master)
            )
    return tuple(placements)


def _emptiest_fitting_node(
    node_ids: Sequence[str],
    free: dict[str, Resources],
    capacity: dict[str, Resources],
    request: Resources,
) -> str | None:
    best: str | None = None
    best_share = 0.0
    for node_id in node_ids:
        if not request.fits_in(free[node_id]):
            continue
        used_after = capacity[node_id] - free[node_id] + request
        share = used_after.dominant_share(capacity[node_id])
        if best is None or share < best_share:
            best, best_share = node_id, share
    return best
