"""How much to reclaim from each over-provisioned queue (Algorithm 1, generalised).

Algorithm 1 of the paper (Sec. 4.3), for two queues and ⟨CPU, memory⟩:

- line 3: the long queue's fair allocation f_l = ⟨C × φ_l, M × φ_l⟩;
- line 4: its over-provisioned amount a = r_l - f_l;
- lines 5-6: if the short jobs' request r_s is less than a, p = r_s;
- line 9: otherwise "p = a ⟹ p = COMPUTEDR(r_s, a)": the capacity scheduler reclaims all of a,
  and the paper's modification, *for GP only* ("While IP does not require algorithmic changes to
  capacity scheduler, we need to augment the fair sharing algorithm to support GP"), reclaims
  COMPUTEDR(r_s, a);
- lines 11-19, COMPUTEDR: the dominant resource of r_s against a (line 12) is reclaimed up to
  a, the other in r_s's proportion (lines 13-17). The listing is garbled; the worked example of
  Sec. 4.3 is authoritative: a = ⟨10 CPU, 15 GB⟩, r_s = ⟨20 CPU, 10 GB⟩, CPU dominant
  (20/10 > 10/15): the capacity scheduler "will compute p = a", GP p = ⟨10 CPU, 5 GB⟩.

:func:`_fit_or_all` is lines 5-9 for a mode: kill and immediate (IP) keep the capacity
scheduler's p = a, graceful (GP) takes COMPUTEDR. Lines 5-6 are read as "r_s fits in a"
(r_s <= a in every resource, not strictly less): a request that fits can be "fully satisfied"
(Sec. 4.3), and at equality both branches give the same p except where r_s asks less.

Generalisation to any number of queues (documented choice, not in the paper):

1. Queue q's fair allocation is f_q = capacity × φ_q (line 3), its over-provisioned amount
   a_q = max(r_q - f_q, 0) per resource (line 4).
2. Queue q's claim is its pending demand fitted by lines 5-9 of the mode into its headroom
   max(f_q - r_q, 0), so no queue is helped beyond its fair share.
3. The claims are summed and the unallocated capacity subtracted (nothing is preempted for what
   is already free); lines 5-9 of the mode, on that residual against A = Σ a_q, give the total p.
4. p is split over the over-provisioned queues in proportion to a_q, resource by resource, so
   p_q <= a_q for every queue and resource.

With two queues whose shares add up to 1 and a full cluster, the short queue's headroom is the
long queue's a, the residual is the claim, and this is the paper's Algorithm 1 in each mode.

The over-provisioned dominant resource (Algorithm 2 stops once it is reclaimed, Sec. 4.3) is
COMPUTEDR's (line 12): of the resources queue q is over-provisioned in, the one the short jobs'
request asks most of relative to A, the request taken in its own proportions (the residual of
step 3 computed with COMPUTEDR in step 2). Kill and IP need it from here: their p = a_q has
p_i / a_i = 1 in every resource and no longer tells which resource is dominant. When that
request asks nothing of the queue's over-provisioned resources, the mode's residual decides.

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

from policies.preemption.settings import Mode
from policies.preemption.vectors import (
    EPSILON,
    RESOURCE_NAMES,
    ResourceName,
    as_matrix,
    as_vector,
    check_resources,
    from_vector,
    is_nothing,
)
from policies.scheduling.resources import Resources


def _scale_into(
    request: NDArray[np.float64], available: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Algorithm 1, lines 5-6 and the modified line 9 (COMPUTEDR, lines 11-19) on float vectors.

    ``request × min(1, min_i available_i / request_i)``: a request that fits is returned as is
    (lines 5-6), otherwise it is scaled so that its dominant resource (the largest
    request_i / available_i, line 12) equals what is available and the other follows the
    request's proportion (lines 13-17). The minimum runs over the resources the request asks
    for; the result never exceeds ``available`` nor ``request``.
    """
    available = np.maximum(available, 0.0)
    asked = request > EPSILON
    if not asked.any():
        return np.zeros_like(request)
    scale = min(1.0, float((available[asked] / request[asked]).min()))
    return np.minimum(request * scale, available)


def _fit_or_all(
    request: NDArray[np.float64], available: NDArray[np.float64], mode: Mode
) -> NDArray[np.float64]:
    """Algorithm 1, lines 5-9, in ``mode``: what to reclaim from ``available`` for ``request``.

    Lines 5-6: a request that fits in ``available`` (every resource, within float residue) is
    reclaimed as is. Line 9: otherwise kill and IP reclaim all that is available (the capacity
    scheduler's p = a, which IP does not change, Sec. 4.3) and GP the request scaled by COMPUTEDR.
    """
    if mode is Mode.GRACEFUL:
        return _scale_into(request, available)
    available = np.maximum(available, 0.0)
    if bool((request <= available + EPSILON).all()):
        return np.minimum(request, available)
    return available.copy()


def _dominant_resource(
    over: NDArray[np.float64],
    total_over: NDArray[np.float64],
    request: NDArray[np.float64],
    residual: NDArray[np.float64],
) -> ResourceName | None:
    """The queue's over-provisioned dominant resource (Algorithm 1, line 12; module docstring).

    Among the resources the queue is over-provisioned in (``over`` > 0), the one ``request``
    (the short jobs' request in its own proportions) asks most of relative to ``total_over``;
    when it asks none of them, the one ``residual`` (the mode's) does; None when neither does.
    """
    for asked in (request, residual):
        candidates = (over > EPSILON) & (asked > EPSILON)
        if candidates.any():
            ratios = np.where(candidates, asked / np.maximum(total_over, EPSILON), -1.0)
            return RESOURCE_NAMES[int(np.argmax(ratios))]
    return None


def _least(one: Resources, other: Resources) -> Resources:
    return Resources(min(one.cpu, other.cpu), min(one.memory_mb, other.memory_mb))


def compute_dr(request: Resources, available: Resources) -> Resources:
    """COMPUTEDR (Algorithm 1, lines 11-19, and lines 5-6): the request scaled into ``available``.

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
        dominant: the over-provisioned dominant resource of p_q (line 12, see the module
            docstring): Algorithm 2 considers p_q satisfied once this resource is reclaimed.
            None when nothing is to be reclaimed from the queue.
    """

    queue: str
    over_provisioned: Resources
    preempt: Resources
    dominant: ResourceName | None = None


def preemption_amounts(
    capacity: Resources, queues: Sequence[QueueState], mode: Mode
) -> tuple[QueueAmount, ...]:
    """Per-queue amounts to reclaim (Algorithm 1, lines 3-9, in ``mode``), in ``queues``' order.

    Kill and immediate preemption compute p as the capacity scheduler does (line 9: p = a when
    the request does not fit); graceful preemption with COMPUTEDR. See the module docstring for
    the generalisation to N queues, the dominant resource and the whole-MiB rounding. Raises
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
    free = np.maximum(cap - alloc.sum(axis=0), 0.0)

    def residual_in(claim_mode: Mode) -> NDArray[np.float64]:
        """Steps 2-3: the claims, fitted into each queue's headroom, beyond what is free."""
        claims = np.zeros(len(cap))
        for i in range(len(queues)):
            claims += _fit_or_all(demand[i], headroom[i], claim_mode)
        residual: NDArray[np.float64] = np.maximum(claims - free, 0.0)
        return residual

    residual = residual_in(mode)
    # The short jobs' request in its own proportions, for the dominant resource (line 12).
    request = residual if mode is Mode.GRACEFUL else residual_in(Mode.GRACEFUL)
    total_over = over.sum(axis=0)
    total = _fit_or_all(residual, total_over, mode)
    share = np.divide(over, total_over, out=np.zeros_like(over), where=total_over > EPSILON)
    per_queue = np.minimum(share * total, over)
    amounts = []
    for i, q in enumerate(queues):
        # Rounded up, then capped: a_q <= r_q and p_q <= a_q hold in whole MiB, and since
        # ceil is monotone the caps only ever remove float residue, never part of p_q.
        over_q = from_vector(over[i], most=q.allocation)
        preempt = from_vector(per_queue[i], most=over_q)
        dominant = (
            None
            if is_nothing(preempt)
            else _dominant_resource(over[i], total_over, request, residual)
        )
        amounts.append(QueueAmount(q.name, over_q, preempt, dominant))
    return tuple(amounts)
