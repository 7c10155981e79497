"""The job master's idle containers, indexed so that a round looks only at what may change.

A container is idle when it runs nothing: just granted, or kept (slot reservation) after its
task ended.  A round must find a task for each idle container whose phase has ready tasks,
give back those nobody needs, and leave the kept ones alone until their phase opens or their
deadline comes.  A phase of thousands of tasks keeps thousands of containers idle across its
barrier, so visiting every idle container every round would cost O(n) per round and O(n^2)
per phase; instead :class:`IdleContainers` keeps them by phase and by the phase they were kept
from (their *origin*), and remembers the ones that became idle since the last round.
"""

from __future__ import annotations

from collections.abc import Iterator


class IdleContainers:
    """Allocation ids of idle containers, each under its phase and, if kept, its origin."""

    def __init__(self) -> None:
        self._where: dict[str, tuple[str, str | None]] = {}  # id -> (phase, origin)
        self._by_phase: dict[str, dict[str, None]] = {}
        self._by_origin: dict[str, dict[str, None]] = {}
        self._fresh: dict[str, None] = {}  # idle since the last :meth:`take_fresh`

    def __contains__(self, allocation_id: object) -> bool:
        return allocation_id in self._where

    def __len__(self) -> int:
        return len(self._where)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def add(self, allocation_id: str, phase: str, origin: str | None) -> None:
        """The container runs nothing now, for ``phase`` (kept from ``origin``, if kept)."""
        self.discard(allocation_id)
        self._where[allocation_id] = (phase, origin)
        self._by_phase.setdefault(phase, {})[allocation_id] = None
        if origin is not None:
            self._by_origin.setdefault(origin, {})[allocation_id] = None
        self._fresh[allocation_id] = None

    def discard(self, allocation_id: str) -> None:
        where = self._where.pop(allocation_id, None)
        if where is None:
            return
        phase, origin = where
        _remove(self._by_phase, phase, allocation_id)
        if origin is not None:
            _remove(self._by_origin, origin, allocation_id)
        self._fresh.pop(allocation_id, None)

    def unkept(self, allocation_id: str) -> None:
        """The container is no longer kept (it stays idle, under its phase)."""
        where = self._where.get(allocation_id)
        if where is not None and where[1] is not None:
            _remove(self._by_origin, where[1], allocation_id)
            self._where[allocation_id] = (where[0], None)

    def touch_phase(self, phase: str) -> None:
        """Have the next round look at the phase's idle containers again (its barrier passed:
        they run its tasks now, or go back)."""
        self._fresh.update(dict.fromkeys(self._by_phase.get(phase, ())))

    def take_fresh(self) -> list[str]:
        """The containers that became idle since the last call."""
        fresh = list(self._fresh)
        self._fresh.clear()
        return fresh

    def of_phase(self, phase: str) -> list[str]:
        return list(self._by_phase.get(phase, ()))

    def of_origin(self, origin: str) -> list[str]:
        return list(self._by_origin.get(origin, ()))

    def origins(self) -> list[str]:
        """The phases some idle kept container was kept from."""
        return list(self._by_origin)


def _remove(index: dict[str, dict[str, None]], key: str, allocation_id: str) -> None:
    members = index.get(key)
    if members is not None:
        members.pop(allocation_id, None)
        if not members:
            del index[key]
