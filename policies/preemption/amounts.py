"""How much to reclaim from each over-provisioned queue (Algorithm 1, generalised).

The paper states Algorithm 1 for two queues and ⟨CPU, memory⟩; its listing is garbled, and the
worked example of Sec. 4.3 is authoritative: with over-provisioned a = ⟨10 CPU, 15 GB⟩ and a
request r_s = ⟨20 CPU, 10 GB⟩, CPU is dominant (20/10 > 10/15) and p = ⟨10 CPU, 5 GB⟩. That is
COMPUTEDR: the request scaled down until its dominant resource (the largest r_i / a_i) equals
what is available, so the other resources follow the request's proportions and no resource
exceeds a; a request that fits entirely is granted as is (lines 5-6).

Generalisation to any number of queues and resources (documented choice, not in the paper):

1. Queue q's fair allocation is f_q = capacity × φ_q (line 3), its over-provisioned amount
   a_q = max(r_q - f_q, 0) per resource (line 4).
2. Queue q's claim is its pending demand scaled by COMPUTEDR into its headroom
   max(f_q - r_q, 0), so no queue is helped beyond its fair share.
3. The claims are summed and the unallocated capacity subtracted (nothing is preempted for what
   is already free); COMPUTEDR of that residual against A = Σ a_q gives the total p.
4. p is split over the over-provisioned queues in proportion to a_q, resource by resource, so
   p_q <= a_q for every queue and resource.

With two queues, an idle cluster share of zero and a demand within the short queue's headroom,
this reduces to the paper's Algorithm 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from policies.preemption.resources import (
    EPSILON,
    Resources,
    as_resources,
    as_vector,
    check_resources,
)


def compute_dr(request: NDArray[np.float64], available: NDArray[np.float64]) -> NDArray[np.float64]:
    """COMPUTEDR (Algorithm 1, lines 11-19): the request scaled to fit ``available``.

    Returns ``request × min(1, min_i available_i / request_i)`` over the resources the request
    asks for. The dominant resource is reclaimed up to ``available``, the others in the
    request's proportion; the result never exceeds ``available`` nor ``request``.
    """
    available = np.maximum(available, 0.0)
    asked = request > EPSILON
    if not asked.any():
        return np.zeros_like(request)
    scale = min(1.0, float((available[asked] / request[asked]).min()))
    return np.minimum(request * scale, available)


@dataclass(frozen=True)
class QueueState:
    """One job queue, as the resource monitor sees it.

    Attributes:
        name: the queue's name.
        fair_share: φ, the fraction of capacity the queue is entitled to (0 <= φ <= 1).
        allocation: r, the resources its containers hold now.
        demand: resources its pending tasks ask for.
    """

    name: str
    fair_share: float
    allocation: Resources
    demand: Resources


@dataclass(frozen=True)
class QueueAmount:
    """What Algorithm 1 decides for one queue.

    Attributes:
        queue: the queue's name.
        over_provisioned: a_q, what it holds beyond its fair allocation.
        preempt: p_q, what to reclaim from it now (p_q <= a_q).
    """

    queue: str
    over_provisioned: Resources
    preempt: Resources


def preemption_amounts(
    capacity: Resources, queues: Sequence[QueueState]
) -> tuple[QueueAmount, ...]:
    """Per-queue amounts to reclaim, in the order of ``queues`` (see the module docstring)."""
    dims = len(capacity)
    check_resources("capacity", capacity, dims)
    names = [q.name for q in queues]
    if len(set(names)) != len(names):
        raise ValueError("queues: queue names must be distinct")
    for i, q in enumerate(queues):
        if not 0.0 <= q.fair_share <= 1.0:
            raise ValueError(f"queues[{i}].fair_share: must be in [0, 1], got {q.fair_share}")
        check_resources(f"queues[{i}].allocation", q.allocation, dims)
        check_resources(f"queues[{i}].demand", q.demand, dims)
    if not queues:
        return ()
    cap = as_vector(capacity)
    alloc = np.array([q.allocation for q in queues], dtype=np.float64).reshape(len(queues), dims)
    demand = np.array([q.demand for q in queues], dtype=np.float64).reshape(len(queues), dims)
    fair = np.outer([q.fair_share for q in queues], cap)
    over = np.maximum(alloc - fair, 0.0)
    headroom = np.maximum(fair - alloc, 0.0)
    claims = sum(
        (compute_dr(demand[i], headroom[i]) for i in range(len(queues))), start=np.zeros(dims)
    )
    free = np.maximum(cap - alloc.sum(axis=0), 0.0)
    residual = np.maximum(claims - free, 0.0)
    total_over = over.sum(axis=0)
    total = compute_dr(residual, total_over)
    share = np.divide(over, total_over, out=np.zeros_like(over), where=total_over > EPSILON)
    per_queue = np.minimum(share * total, over)
    return tuple(
        QueueAmount(q.name, as_resources(over[i]), as_resources(per_queue[i]))
        for i, q in enumerate(queues)
    )
