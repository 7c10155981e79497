"""A reserved slot yields to a strictly higher priority (Algorithm 1, TryAllocateTask, lines
18-22), as a post-filter of the scheduling framework.

In Sluice a reserved slot is a container its job keeps idle for a downstream phase: the RM
counts it as held, so no other job is placed on it (the *owner* and *refused* cases of
:func:`~policies.reservation.slot_approval.approve_allocation` need nothing more).  This plugin
is the rest of the rule: when a container fits nowhere, an idle kept container of a job with a
strictly lower priority, or one whose reservation has lapsed, is taken back (stopped; nothing
runs in it) so that the next pass can place the container there.  Per ask it takes the fewest
kept containers of one node that make the ask fit, the lowest priority and the earliest
deadline first; a container is taken once per pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from policies.reservation.slot_approval import Approval, Reservation, approve_allocation
from policies.scheduling.framework import PassContext, PendingAsk, Preemption, PreemptionAction
from policies.scheduling.resources import Resources

_TAKEABLE = (Approval.OVERRIDE, Approval.EXPIRED)


@dataclass(frozen=True)
class KeptContainer:
    """An idle container kept by ``job_id`` (of ``priority``) until ``expires_at`` (wall time;
    ``math.inf``: no deadline yet), holding ``holds`` of its node."""

    allocation_id: str
    job_id: str
    priority: int
    holds: Resources
    expires_at: float = math.inf


@dataclass
class ReservationOverride:
    """See the module docstring.  ``kept_on``: node id -> the idle kept containers there."""

    kept_on: Mapping[str, Sequence[KeptContainer]]
    now: float
    taken: set[str] = field(default_factory=set)
    name: ClassVar[str] = "ReservationOverride"

    def preempt(self, ask: PendingAsk, context: PassContext) -> Sequence[Preemption]:
        for node_id, kept in self.kept_on.items():
            node = context.cluster.get(node_id)
            if node is None:
                continue
            takeable = sorted(
                (k for k in kept if k.allocation_id not in self.taken and self._yields(k, ask)),
                key=lambda k: (k.priority, k.expires_at, k.allocation_id),
            )
            free, chosen = node.free, []
            for container in takeable:
                if ask.resources.fits_in(free):
                    break
                free = free + container.holds
                chosen.append(container)
            if chosen and ask.resources.fits_in(free):
                self.taken.update(k.allocation_id for k in chosen)
                return [
                    Preemption(
                        k.allocation_id,
                        PreemptionAction.KILL,
                        f"reservation of {k.job_id} yields to {ask.job_id} "
                        f"(priority {ask.priority} > {k.priority})"
                        if k.expires_at > self.now
                        else f"reservation of {k.job_id} lapsed",
                        by=self.name,
                    )
                    for k in chosen
                ]
        return ()

    def _yields(self, kept: KeptContainer, ask: PendingAsk) -> bool:
        reservation = Reservation(kept.job_id, kept.priority, kept.expires_at)
        return approve_allocation(reservation, ask.job_id, ask.priority, self.now) in _TAKEABLE
