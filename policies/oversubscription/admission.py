"""Node-side admission of speculative tasks (ROSE Sec. 3.2 and 6.1, multi-resource threshold
control).

* Enqueue (Sec. 3.2): a task sent by a job master is accepted into the node queue only while the
  queue is shorter than the maximum queue length; otherwise it is rejected and the job master
  retries elsewhere.
* Launch (Sec. 6.1): the head of the queue is popped only if every resource metric is within
  its threshold and, with the task started, the oversubscribed amount of every resource stays
  within its quota (a fraction of capacity, Sec. 6.4 "oversubscription ratio"). Otherwise the
  queue stays blocked — the head is not skipped — until the condition holds again.
* In RP mode a performance anomaly (Sec. 6.2, see ``anomaly``) also blocks the queue; in UP mode
  the throttle is off and the flag is ignored.

All quantities are fractions of the node's capacity, per resource in the order of
``config.admission_resources``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from policies.oversubscription.config import OversubscriptionConfig

# Plain Python, not numpy: three numbers per decision, on the node agent, which imports no
# numpy (it starts fast; tests/unit/node_agent/test_start_imports.py).


@dataclass(frozen=True)
class NodeUsage:
    """A node's current state, as fractions of its capacity per admission resource.

    ``utilisation``: measured usage of each resource by everything running;
    ``oversubscribed``: the part held by running speculative tasks;
    ``queue_length``: speculative tasks waiting in the node queue.
    """

    utilisation: tuple[float, ...]
    oversubscribed: tuple[float, ...]
    queue_length: int


@dataclass(frozen=True)
class Admission:
    """A yes/no decision with the reason for a no (``""`` when admitted)."""

    admitted: bool
    reason: str = ""


def admit_to_queue(queue_length: int, config: OversubscriptionConfig) -> Admission:
    """Sec. 3.2 step 4: accept an incoming speculative task into a queue of ``queue_length``?"""
    if queue_length < 0:
        raise ValueError("queue_length: must be non-negative")
    if queue_length >= config.max_queue_length:
        return Admission(False, f"queue full ({queue_length} >= {config.max_queue_length})")
    return Admission(True)


def admit_launch(
    usage: NodeUsage,
    demand: Iterable[float],
    config: OversubscriptionConfig,
    *,
    throttled: bool = False,
) -> Admission:
    """Sec. 6.1: may the head of the queue, needing ``demand`` per resource, start now?"""
    names = config.admission_resources
    utilisation = _per_resource(usage.utilisation, "usage.utilisation", len(names))
    oversubscribed = _per_resource(usage.oversubscribed, "usage.oversubscribed", len(names))
    need = _per_resource(demand, "demand", len(names))
    if usage.queue_length == 0:
        return Admission(False, "queue empty")
    if throttled and config.is_responsiveness_prioritized:
        return Admission(False, "throttled: LRA performance anomaly")
    thresholds = config.admission_thresholds
    over = [
        i
        for i, (used, limit) in enumerate(zip(utilisation, thresholds, strict=True))
        if used > limit
    ]
    if over:
        i = over[0]
        return Admission(
            False, f"{names[i]} utilisation {utilisation[i]:.3g} over {thresholds[i]:.3g}"
        )
    quota = config.oversubscription_quota
    after = [held + more for held, more in zip(oversubscribed, need, strict=True)]
    exceeded = [
        i for i, (total, limit) in enumerate(zip(after, quota, strict=True)) if total > limit
    ]
    if exceeded:
        i = exceeded[0]
        return Admission(
            False, f"{names[i]} oversubscription {after[i]:.3g} would exceed quota {quota[i]:.3g}"
        )
    return Admission(True)


def _per_resource(values: Iterable[float], name: str, count: int) -> tuple[float, ...]:
    try:
        numbers = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected {count} values, one per admission resource") from None
    if len(numbers) != count:
        raise ValueError(f"{name}: expected {count} values, one per admission resource")
    if not all(math.isfinite(v) and v >= 0 for v in numbers):
        raise ValueError(f"{name}: values must be non-negative fractions of capacity")
    return numbers
