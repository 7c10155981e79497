"""Why a job's asks are pending (``GetJob`` → ``sluice job``): the core's pending asks judged
by :func:`policies.scheduling.diagnosis.why_pending` with the plugins the next pass would use.

A read: it runs between units of work, changes nothing, and costs O(nodes) per pending ask of
the job (a job has one ask per phase that waits, and its job master's), only when asked.
"""

from __future__ import annotations

from collections import Counter

from policies.scheduling.diagnosis import PendingWhy, why_pending
from policies.scheduling.framework import PendingAsk
from resource_manager.core import ResourceManagerCore
from resource_manager.records import NodeState, Now
from resource_manager.scheduling import pass_setup

MAX_ASKS_JUDGED = 20
"""At most this many of a job's pending asks are judged per call (its phases that wait)."""


def pending_reasons(core: ResourceManagerCore, job_id: str, now: Now) -> list[PendingWhy]:
    """Why each of ``job_id``'s pending asks is pending now, in serving order."""
    asks: list[PendingAsk] = [a for a in core.pending.of_job(job_id) if a.count > 0]
    if not asks:
        return []
    setup = pass_setup(core.state, now, due=False)  # (the next pass's plugins: no decision)
    # Nodes out of scheduling: the capacity index holds only ready nodes.
    unschedulable = Counter(
        node.state.value for node in core.nodes.values() if node.state is not NodeState.READY
    )
    return [
        why_pending(ask, setup.context, setup.profile, unschedulable=unschedulable)
        for ask in asks[:MAX_ASKS_JUDGED]
    ]
