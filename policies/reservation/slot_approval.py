"""Whether a slot may be given to a task (Algorithm 1, TryAllocateTask, lines 18-22).

A reserved slot inherits its owner's priority (Sec. III-B, "Support of priority scheduling"): a
task of another job with a priority lower than or equal to it is refused, a strictly higher
priority overrides the reservation, and the owner itself may always use its slot. A reservation
with a deadline (Sec. IV-B) no longer binds once the deadline has passed; the clock is passed in.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class Approval(enum.Enum):
    """Why a slot may or may not run the requesting task."""

    FREE = "free"
    """The slot is not reserved."""
    OWNER = "owner"
    """The slot is reserved by the requesting task's own job."""
    OVERRIDE = "override"
    """The slot is reserved by another job with a strictly lower priority."""
    EXPIRED = "expired"
    """The slot was reserved but its reservation deadline has passed."""
    REFUSED = "refused"
    """The slot is reserved by another job with a priority >= the requester's."""

    @property
    def allowed(self) -> bool:
        """Whether the slot may be allocated to the task."""
        return self is not Approval.REFUSED


@dataclass(frozen=True)
class Reservation:
    """A slot's reservation: its owner, the priority it inherited and when it lapses.

    ``expires_at`` is an absolute time on the caller's clock (``math.inf`` for no deadline);
    the reservation binds while ``now < expires_at``.
    """

    job_id: str
    priority: int
    expires_at: float = math.inf


def approve_allocation(
    reservation: Reservation | None, job_id: str, job_priority: int, now: float
) -> Approval:
    """Decide whether a task of ``job_id`` at ``job_priority`` may take a slot at time ``now``.

    Higher numbers mean higher priority. ``reservation`` is ``None`` for an unreserved slot.
    """
    if reservation is None:
        return Approval.FREE
    if now >= reservation.expires_at:
        return Approval.EXPIRED
    if reservation.job_id == job_id:
        return Approval.OWNER
    if job_priority > reservation.priority:
        return Approval.OVERRIDE
    return Approval.REFUSED
