"""What job masters report of their speculative attempts (ROSE), for ``sluice job``.

A speculative attempt never passes through the RM: its job master places it on a node agent
directly.  So that an operator still sees which tasks ran speculatively, were upgraded or were
evicted, each Allocate carries the attempts that changed since the last one, and ``GetJob``
lists them.  Nothing decides on this log; it is kept in memory only (an RM restart forgets
it), bounded per job and in the number of jobs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from resource_manager.errors import InvalidRequestError
from sluice_pb import resource_manager_pb2 as rm_pb

OUTCOMES = frozenset(
    {
        "placed",
        "queued",
        "refused",
        "running",
        "kept",
        "upgraded",
        "succeeded",
        "failed",
        "evicted",
        "cancelled",
        "killed",
        "rescheduled",
        "lost",
    }
)
MAX_JOBS = 1_000
MAX_PER_JOB = 10_000
MAX_FIELD = 200


class SpeculativeLog:
    """Per job, the last report of each (task, attempt)."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, dict[tuple[str, int], rm_pb.SpeculativeAttempt]] = (
            OrderedDict()
        )

    @staticmethod
    def check(attempts: Sequence[rm_pb.SpeculativeAttempt]) -> None:
        """A bad report is an InvalidRequestError naming it (before anything is applied)."""
        for index, attempt in enumerate(attempts):
            field = f"speculative[{index}]"
            if attempt.outcome not in OUTCOMES:
                raise InvalidRequestError(
                    f"{field}.outcome", f"must be one of {', '.join(sorted(OUTCOMES))}"
                )
            for name in ("task_id", "node_id", "message"):
                if len(getattr(attempt, name)) > MAX_FIELD:
                    raise InvalidRequestError(f"{field}.{name}", f"at most {MAX_FIELD} characters")

    def record(self, job_id: str, attempts: Sequence[rm_pb.SpeculativeAttempt]) -> None:
        """Keep a round's reports (checked already)."""
        if not attempts:
            return
        kept = self._jobs.setdefault(job_id, {})
        self._jobs.move_to_end(job_id)
        for attempt in attempts:
            key = (attempt.task_id, attempt.attempt)
            kept.pop(key, None)  # a changed attempt moves to the end
            kept[key] = attempt
        while len(kept) > MAX_PER_JOB:
            del kept[next(iter(kept))]
        while len(self._jobs) > MAX_JOBS:
            self._jobs.popitem(last=False)

    def of(self, job_id: str) -> list[rm_pb.SpeculativeAttempt]:
        """The job's attempts, by task and attempt number."""
        kept = self._jobs.get(job_id, {})
        return [kept[key] for key in sorted(kept)]
