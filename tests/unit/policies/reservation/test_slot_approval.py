"""Algorithm 1 (TryAllocateTask): reserved slots inherit their owner's priority."""

from __future__ import annotations

import math

import pytest

from policies.reservation.slot_approval import Approval, Reservation, approve_allocation

HELD = Reservation(job_id="etl", priority=5, expires_at=100.0)


@pytest.mark.parametrize(
    ("reservation", "job_id", "priority", "now", "expected"),
    [
        (None, "adhoc", 0, 0.0, Approval.FREE),
        (HELD, "etl", 0, 10.0, Approval.OWNER),  # the owner, even at a lower priority
        (HELD, "adhoc", 4, 10.0, Approval.REFUSED),  # lower priority
        (HELD, "adhoc", 5, 10.0, Approval.REFUSED),  # equal priority is refused too
        (HELD, "urgent", 6, 10.0, Approval.OVERRIDE),  # strictly higher overrides
        (HELD, "adhoc", 0, 100.0, Approval.EXPIRED),  # deadline reached
        (HELD, "adhoc", 0, 99.999, Approval.REFUSED),
        (Reservation("etl", 5), "adhoc", 5, 1e12, Approval.REFUSED),  # no deadline
    ],
)
def test_approval(
    reservation: Reservation | None, job_id: str, priority: int, now: float, expected: Approval
) -> None:
    outcome = approve_allocation(reservation, job_id, priority, now)
    assert outcome is expected
    assert outcome.allowed is (expected is not Approval.REFUSED)


def test_default_reservation_never_expires() -> None:
    assert Reservation("etl", 1).expires_at == math.inf
