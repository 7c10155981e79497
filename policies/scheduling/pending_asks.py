"""The asks waiting for containers, kept in serving order: a pass reads them without sorting.

Each ask is keyed by (job, kind, phase): a job master replaces its asks with every request
(absolute counts), so setting an ask replaces the one before.  The serving order is the queue
order plugin's ``sort_key``; insertion and removal are a bisect in a list (a memmove, cheap at
hundreds of thousands of asks), iteration is in order.

Asks are also kept per queue (:attr:`PendingAsk.queue`), in the same order, with what each
queue's asks want in all, so a shell with queues can serve the queues in its own order
(:meth:`PendingAsks.in_queues`) and read a queue's demand in O(1).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from policies.scheduling.framework import AllocationKind, AskShape, PendingAsk, QueueOrder
from policies.scheduling.resources import Resources

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
        self._by_queue: dict[str, list[tuple[tuple[int | str, ...], AskKey]]] = {}
        self._demand: dict[str, Resources] = {}  # queue -> what its asks want in all

    def __len__(self) -> int:
        return len(self._asks)

    def __iter__(self) -> Iterator[PendingAsk]:
        """In serving order.  Do not change the collection while iterating."""
        for _, key in self._sorted:
            yield self._asks[key]

    def in_queues(self, queues: list[str]) -> Iterator[PendingAsk]:
        """The asks of ``queues``, queue by queue in the order given, each in serving order
        (then those of any queue not named).  Do not change the collection while iterating."""
        named = set(queues)
        order = [*queues, *(q for q in self._by_queue if q not in named)]
        for queue in order:
            for _, key in self._by_queue.get(queue, ()):
                yield self._asks[key]

    def demand(self, queue: str) -> Resources:
        """What the asks of ``queue`` want in all (count × size, summed)."""
        return self._demand.get(queue, Resources())

    def queues(self) -> list[str]:
        """The queues with pending asks."""
        return list(self._by_queue)

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
            entry = (self._order.sort_key(ask), key)
            bisect.insort(self._sorted, entry, key=_sort_position)
            bisect.insort(self._by_queue.setdefault(ask.queue, []), entry, key=_sort_position)
            self._demand[ask.queue] = self.demand(ask.queue) + ask.resources * ask.count
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
            in_queue = self._by_queue[previous.queue]
            index = bisect.bisect_left(in_queue, _sort_position(entry), key=_sort_position)
            while in_queue[index][1] != key:
                index += 1
            del in_queue[index]
            if in_queue:
                self._demand[previous.queue] = (
                    self._demand[previous.queue] - previous.resources * previous.count
                )
            else:
                del self._by_queue[previous.queue]
                del self._demand[previous.queue]  # exactly zero: no float drift left behind
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
