"""How much to reclaim from each over-provisioned queue (Algorithm 1, generalised).

The paper states Algorithm 1 for two queues and ⟨CPU, memory⟩; its listing is garbled, and the
worked example of Sec. 4.3 is authoritative: with over-provisioned a = ⟨10 CPU, 15 GB⟩ and a
request r_s = ⟨20 CPU, 10 GB⟩, CPU is dominant (20/10 > 10/15) and p = ⟨10 CPU, 5 GB⟩. That is
COMPUTEDR: the request scaled down until its dominant resource (the largest r_i / a_i) equals
what is available, so the other resources follow the request's proportions and no resource
exceeds a; a request that fits entirely is granted as is (lines 5-6).

Generalisation to any number of queues (documented choice, not in the paper):

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

Whole MiB (documented departure, :mod:`policies.preemption.vectors`): the computation runs on
real numbers; a_q and p_q are then rounded up to whole MiB and capped (a_q at the queue's
allocation, p_q at a_q), so p_q is never less than the exact p_q, Σ p_q never less than p, and
p_q <= a_q <= r_q still holds. COMPUTEDR on Resources rounds the same way, capped at the request
and at what is available.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from policies.preemption.vectors import (
    EPSILON,
    as_matrix,
    as_vector,
    check_resources,
    from_vector,
)
from policies.scheduling.resources import Resources


def _scale_into(
    request: NDArray[np.float64], available: NDArray[np.float64]
) -> NDArray[np.float64]:
    """COMPUTEDR on float vectors: ``request × min(1, min_i available_i / request_i)``.

    The minimum runs over the resources the request asks for; the result never exceeds
    ``available`` nor ``request``.
    """
    available = np.maximum(available, 0.0)
    asked = request > EPSILON
    if not asked.any():
        return np.zeros_like(request)
    scale = min(1.0, float((available[asked] / request[asked]).min()))
    return np.minimum(request * scale, available)


def _least(one: Resources, other: Resources) -> Resources:
    return Resources(min(one.cpu, other.cpu), min(one.memory_mb, other.memory_mb))


def compute_dr(request: Resources, available: Resources) -> Resources:
    """COMPUTEDR (Algorithm 1, lines 11-19): the request scaled to fit ``available``.

    The dominant resource (the largest request_i / available_i) is reclaimed up to
    ``available``, the other in the request's proportion; a request that fits is returned as is.
    Memory is rounded up to whole MiB and capped at ``request`` and ``available``, so the
    result never exceeds either.
    """
    check_resources("request", request)
    check_resources("available", available)
    exact = _scale_into(as_vector(request), as_vector(available))
    return from_vector(exact, most=_least(request, available))


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
        over_provisioned: a_q, what it holds beyond its fair allocation (memory rounded up to
            whole MiB, at most its allocation).
        preempt: p_q, what to reclaim from it now (memory rounded up to whole MiB; p_q <= a_q).
    """

    queue: str
    over_provisioned: Resources
    preempt: Resources


def preemption_amounts(
    capacity: Resources, queues: Sequence[QueueState]
) -> tuple[QueueAmount, ...]:
    """Per-queue amounts to reclaim (Algorithm 1), in the order of ``queues``.

    See the module docstring for the generalisation and the whole-MiB rounding. Raises
    ValueError naming the first malformed field.
    """
    check_resources("capacity", capacity)
    names = [q.name for q in queues]
    if len(set(names)) != len(names):
        raise ValueError("queues: queue names must be distinct")
    for i, q in enumerate(queues):
        if not 0.0 <= q.fair_share <= 1.0:
            raise ValueError(f"queues[{i}].fair_share: must be in [0, 1], got {q.fair_share}")
        check_resources(f"queues[{i}].allocation", q.allocation)
        check_resources(f"queues[{i}].demand", q.demand)
    if not queues:
        return ()
    cap = as_vector(capacity)
    alloc = as_matrix([q.allocation for q in queues])
    demand = as_matrix([q.demand for q in queues])
    fair = np.outer([q.fair_share for q in queues], cap)
    over = np.maximum(alloc - fair, 0.0)
    headroom = np.maximum(fair - alloc, 0.0)
    claims = sum(
        (_scale_into(demand[i], headroom[i]) for i in range(len(queues))),
        start=np.zeros(len(cap)),
    )
    free = np.maximum(cap - alloc.sum(axis=0), 0.0)
    residual = np.maximum(claims - free, 0.0)
    total_over = over.sum(axis=0)
    total = _scale_into(residual, total_over)
    share = np.divide(over, total_over, out=np.zeros_like(over), where=total_over > EPSILON)
    per_queue = np.minimum(share * total, over)
    amounts = []
    for i, q in enumerate(queues):
        # Rounded up, then capped: a_q <= r_q and p_q <= a_q hold in whole MiB, and since
        # ceil is monotone the caps only ever remove float residue, never part of p_q.
        over_q = from_vector(over[i], most=q.allocation)
        amounts.append(QueueAmount(q.name, over_q, from_vector(per_queue[i], most=over_q)))
    return tuple(amounts)
