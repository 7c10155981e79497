"""The RM's side of slot reservation: the containers jobs keep for a downstream phase (reported
by their job masters, recorded on the allocations) seen by the override post-filter
(:mod:`policies.reservation.override`), read lazily: a pass pays only for the nodes it looks at,
and only when a container fits nowhere."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence

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
