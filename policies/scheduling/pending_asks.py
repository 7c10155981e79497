"""The asks waiting for containers, kept in serving order: a pass reads them without sorting.

Each ask is keyed by (job, kind, phase): a job master replaces its asks with every request
(absolute counts), so setting an ask replaces the one before.  The serving order is the queue
order plugin's ``sort_key``; insertion and removal are a bisect in a list (a memmove, cheap at
hundreds of thousands of asks), iteration is in order.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from policies.scheduling.framework import AllocationKind, AskShape, PendingAsk, QueueOrder

AskKey = tuple[str, AllocationKind, str]
"""(job id, kind, phase)."""


def ask_key(ask: PendingAsk) -> AskKey:
    return (ask.job_id, ask.kind, ask.phase)


class PendingAsks:
    """Asks in serving order.  Not thread-safe."""

    def __init__(self, order: QueueOrder) -> None:
        self._order = order
        self._asks: dict[AskKey, PendingAsk] = {}
        self._sorted: list[tuple[tuple[int | str, ...], AskKey]] = []
        self._by_job: dict[str, dict[AskKey, None]] = {}
        self._shapes: dict[AskShape, int] = {}  # (kind, container size) -> how many asks

    def __len__(self) -> int:
        return len(self._asks)

    def __iter__(self) -> Iterator[PendingAsk]:
        """In serving order.  Do not change the collection while iterating."""
        for _, key in self._sorted:
            yield self._asks[key]

    def shapes(self) -> list[AskShape]:
        """The distinct (kind, container size) pairs pending asks want (a pass stops once none
        can be placed)."""
        return list(self._shapes)

    def get(self, key: AskKey) -> PendingAsk | None:
        return self._asks.get(key)

    def of_job(self, job_id: str) -> list[PendingAsk]:
        return [self._asks[key] for key in self._by_job.get(job_id, ())]

    def put(self, ask: PendingAsk) -> PendingAsk | None:
        """Add or replace an ask (a count of 0 removes it); return the one it replaced."""
        key = ask_key(ask)
        previous = self.discard(key)
        if ask.count > 0:
            self._asks[key] = ask
            bisect.insort(self._sorted, (self._order.sort_key(ask), key), key=_sort_position)
            self._by_job.setdefault(ask.job_id, {})[key] = None
            shape = (ask.kind, ask.resources)
            self._shapes[shape] = self._shapes.get(shape, 0) + 1
        return previous

    def discard(self, key: AskKey) -> PendingAsk | None:
        previous = self._asks.pop(key, None)
        if previous is not None:
            entry = (self._order.sort_key(previous), key)
            index = bisect.bisect_left(self._sorted, _sort_position(entry), key=_sort_position)
            while self._sorted[index][1] != key:
                index += 1
            del self._sorted[index]
            keys = self._by_job[key[0]]
            del keys[key]
            if not keys:
                del self._by_job[key[0]]
            shape = (previous.kind, previous.resources)
            left = self._shapes[shape] - 1
            if left:
                self._shapes[shape] = left
            else:
                del self._shapes[shape]
        return previous

    def discard_job(self, job_id: str) -> list[PendingAsk]:
        """Remove every ask of a job; return them."""
        return [
            ask
            for key in list(self._by_job.get(job_id, ()))
            if (ask := self.discard(key)) is not None
        ]


def _sort_position(
    entry: tuple[tuple[int | str, ...], AskKey],
) -> tuple[tuple[int | str, ...], str, str, str]:
    """Comparable position: the sort key, then the ask key (enum as its value)."""
    sort_key, (job_id, kind, phase) = entry
    return (sort_key, job_id, kind.value, phase)
