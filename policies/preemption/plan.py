"""One preemption round for the whole cluster: Algorithm 1 per queue, then Algorithm 2.

The resource monitor (every 3 s in the paper, Sec. 4.2) calls :func:`plan_preemption` with an
immutable snapshot of queues and containers and sends the resulting actions to the node agents.
Every amount is a :class:`policies.scheduling.resources.Resources` (memory in whole MiB, see
:mod:`policies.preemption.vectors` for the rounding of Algorithm 1's fractional MiB).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.preemption.amounts import QueueAmount, QueueState, preemption_amounts
from policies.preemption.settings import Mode, PreemptionSettings
from policies.preemption.vectors import is_nothing
from policies.preemption.victims import (
    Container,
    ContainerAction,
    PreemptionPlan,
    choose_victims,
)
from policies.scheduling.resources import Resources


@dataclass(frozen=True)
class ClusterPlan:
    """Amounts per queue and, for each queue with something to reclaim, its plan."""

    amounts: tuple[QueueAmount, ...]
    plans: tuple[tuple[str, PreemptionPlan], ...]

    @property
    def actions(self) -> tuple[ContainerAction, ...]:
        """Every container action, queue by queue."""
        return tuple(action for _, plan in self.plans for action in plan.actions)


def plan_preemption(
    capacity: Resources,
    queues: Sequence[QueueState],
    containers: Sequence[Container],
    mode: Mode,
    settings: PreemptionSettings,
) -> ClusterPlan:
    """Decide what to reclaim from which queue and which of its containers give it back.

    Algorithm 1 in ``mode`` (:func:`.amounts.preemption_amounts`: p = a for kill and IP,
    COMPUTEDR for GP) gives each queue's p_q, a_q and over-provisioned dominant resource; for
    every queue with a p_q, Algorithm 2 (:func:`.victims.choose_victims`) picks from that queue's
    containers only, until that dominant resource is reclaimed. Raises ValueError naming the
    first malformed field.
    """
    known = {q.name for q in queues}
    for c in containers:
        if c.queue not in known:
            raise ValueError(f"containers[{c.container_id}].queue: unknown queue {c.queue!r}")
    amounts = preemption_amounts(capacity, queues, mode)
    plans = tuple(
        (
            amount.queue,
            choose_victims(
                [c for c in containers if c.queue == amount.queue],
                amount.preempt,
                amount.over_provisioned,
                mode,
                settings,
                dominant=amount.dominant,
            ),
        )
        for amount in amounts
        if not is_nothing(amount.preempt)
    )
    return ClusterPlan(amounts=amounts, plans=plans)
