"""The RM's side of slot reservation: the containers jobs keep for a downstream phase (reported
by their job masters, recorded on the allocations) seen by the override post-filter
(:mod:`policies.reservation.override`), read lazily: a pass pays only for the nodes it looks at,
and only when a container fits nowhere; and :class:`KeptLog`, how each kept container's keeping
ended (for `sluice job` and the simulator's results)."""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from policies.reservation.override import KeptContainer, ReservationOverride
from policies.scheduling.containers import Goal, Shown
from resource_manager.tables import Tables


class _KeptView(Mapping[str, Sequence[KeptContainer]]):
    """node -> its idle kept containers, as the override plugin reads them."""

    def __init__(self, tables: Tables, kept: Mapping[str, Iterable[str]]) -> None:
        self._tables = tables
        self._kept = kept

    def __getitem__(self, node_id: str) -> Sequence[KeptContainer]:
        tables = self._tables
        idle = []
        for allocation_id in self._kept[node_id]:
            allocation = tables.allocations[allocation_id]
            job = tables.jobs.get(allocation.job_id)
            if job is None or allocation.goal is not Goal.RUN or allocation.shown is not Shown.IDLE:
                continue  # (a task runs in it again: it is no longer idle)
            idle.append(
                KeptContainer(
                    allocation.allocation_id,
                    allocation.job_id,
                    job.spec.priority,
                    allocation.holds,
                    allocation.kept_until or math.inf,
                )
            )
        return idle

    def __iter__(self) -> Iterator[str]:
        return iter(self._kept)

    def __len__(self) -> int:
        return len(self._kept)


def override_plugin(tables: Tables, now_wall: float) -> ReservationOverride | None:
    """The post-filter that lets a strictly higher priority (or anyone, once the deadline has
    passed) take an idle kept container; None while no container is kept."""
    kept = tables.kept_on_nodes()
    if not kept:
        return None
    return ReservationOverride(_KeptView(tables, kept), now_wall)


@dataclass(frozen=True)
class KeptEnded:
    """A container of ``job_id`` kept for ``phase`` on ``node_id`` stopped being kept at ``at``
    (wall time) because of ``reason``: its job master's (``used``, ``deadline``, ``released``)
    or the RM's own (``taken: ...`` by a higher priority or after its deadline, ``node ...
    lost``)."""

    job_id: str
    allocation_id: str
    node_id: str
    phase: str
    reason: str
    at: float

    @property
    def kind(self) -> str:
        """The reason without its detail: used, deadline, released, taken, lost."""
        return "lost" if self.reason.startswith("node ") else self.reason.split(":", 1)[0]


class KeptLog:
    """Per job, the last :attr:`PER_JOB` ends of its kept containers and a count of every end
    by kind; the last :attr:`JOBS` jobs are remembered (memory only: O(1) per end)."""

    PER_JOB = 100
    JOBS = 10_000

    def __init__(self) -> None:
        self._ends: OrderedDict[str, deque[KeptEnded]] = OrderedDict()
        self._counts: dict[str, Counter[str]] = {}

    def record(self, end: KeptEnded) -> None:
        ends = self._ends.get(end.job_id)
        if ends is None:
            ends = self._ends[end.job_id] = deque(maxlen=self.PER_JOB)
            self._counts[end.job_id] = Counter()
            if len(self._ends) > self.JOBS:
                oldest, _ = self._ends.popitem(last=False)
                self._counts.pop(oldest, None)
        ends.append(end)
        self._counts[end.job_id][end.kind] += 1

    def of(self, job_id: str) -> list[KeptEnded]:
        """The job's recorded ends, oldest first."""
        return list(self._ends.get(job_id, ()))

    def counts(self, job_id: str) -> Mapping[str, int]:
        """Kind -> how many of the job's kept containers ended so."""
        return dict(self._counts.get(job_id, {}))
