"""What the resource manager keeps about its queues between passes (soft state, in memory).

* The queue configuration, where it came from and when it was loaded.
* **Claims**: capacity a preemption freed, or is freeing, on a node for a queue
  (:class:`policies.preemption.cluster.QueueClaims` keeps other queues off it).  A claim is
  consumed by that queue's placements on the node, dropped once the queue has no pending demand
  left, and expires after :data:`CLAIM_TTL_S` (a claim outliving its use would keep capacity
  idle).  Claims are soft: after an RM restart the next decision makes them again.
* **Declined offers** of each preempted container (delayed resumption, BIG-C Sec. 4.3).
* When the last decision ran: decisions run at most every ``preemption_interval`` seconds
  (the paper's resource monitor runs every 3 s, Sec. 4.2), and a pass that wanted one earlier
  asks for a pass when it is due.

Every change is journalled with the tables' unit of work, so a request that fails leaves the
book as it was.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from policies.preemption.queues import QueueConfig
from policies.scheduling.resources import Resources

__all__ = ["CLAIM_TTL_S", "QueueBook"]

CLAIM_TTL_S = 60.0
"""How long capacity freed for a queue stays held for it if that queue does not place there.
Freezing a container whose gigabytes go to swap takes seconds (3 s per GB, Sec. 5.4); a minute
covers that and a job master's next rounds."""


@dataclass(frozen=True)
class _Claim:
    amount: Resources
    since: float  # monotonic


Journal = Callable[[Callable[[], None]], None]


class _ClaimsView(Mapping[str, Mapping[str, Resources]]):
    """node -> queue -> amount, read from the book as a pass asks (a pass visits few nodes;
    copying every claim for each pass would cost O(claims))."""

    def __init__(self, claims: dict[str, dict[str, _Claim]]) -> None:
        self._claims = claims

    def __getitem__(self, node_id: str) -> Mapping[str, Resources]:
        return {queue: claim.amount for queue, claim in self._claims[node_id].items()}

    def __iter__(self) -> Iterator[str]:
        return iter(self._claims)

    def __len__(self) -> int:
        return len(self._claims)


class QueueBook:
    """See the module docstring."""

    def __init__(
        self, config: QueueConfig, journal: Journal, *, source: str = "", loaded_at: float = 0.0
    ) -> None:
        self.config = config
        self.source = source
        self.loaded_at = loaded_at
        self._journal = journal
        self._claims: dict[str, dict[str, _Claim]] = {}  # node -> queue -> claim
        self._nodes_of: dict[str, set[str]] = {}  # queue -> nodes it has a claim on
        self._by_age: list[tuple[float, str, str]] = []  # heap of (since, node, queue), lazy
        self._declined: dict[str, int] = {}  # allocation -> fitting offers declined
        self.last_decision = float("-inf")  # monotonic
        self.wanted = False  # a pass wanted a decision before it was due

    # ------------------------------------------------------------------ configuration

    def replace_config(self, config: QueueConfig, source: str, loaded_at: float) -> None:
        before = (self.config, self.source, self.loaded_at)

        def undo() -> None:
            self.config, self.source, self.loaded_at = before

        self._journal(undo)
        self.config, self.source, self.loaded_at = config, source, loaded_at

    # ------------------------------------------------------------------ claims

    def claims(self) -> Mapping[str, Mapping[str, Resources]]:
        """node -> queue -> capacity held there for the queue (a read-only view)."""
        return _ClaimsView(self._claims)

    def has_claims(self) -> bool:
        return bool(self._claims)

    def claimed_for(self, queue: str) -> Resources:
        total = Resources()
        for by_queue in self._claims.values():
            claim = by_queue.get(queue)
            if claim is not None:
                total = total + claim.amount
        return total

    def held_on(self, node_id: str, *, except_queue: str) -> Resources:
        """Capacity held on ``node_id`` for queues other than ``except_queue``."""
        total = Resources()
        for queue, claim in self._claims.get(node_id, {}).items():
            if queue != except_queue:
                total = total + claim.amount
        return total

    def claim(self, node_id: str, queue: str, amount: Resources, now: float) -> None:
        """Hold ``amount`` more on ``node_id`` for ``queue``."""
        if amount.cpu <= 0 and amount.memory_mb <= 0:
            return
        previous = self._claims.get(node_id, {}).get(queue)
        total = amount if previous is None else previous.amount + amount
        self._set(node_id, queue, _Claim(total, now))

    def consume(self, node_id: str, queue: str, placed: Resources) -> None:
        """``queue`` placed ``placed`` on ``node_id``: that much of its claim there is used."""
        previous = self._claims.get(node_id, {}).get(queue)
        if previous is None:
            return
        left = previous.amount - placed
        left = Resources(max(left.cpu, 0.0), max(left.memory_mb, 0))
        self._set(
            node_id,
            queue,
            None if left.cpu <= 1e-9 and left.memory_mb <= 0 else _Claim(left, previous.since),
        )

    def expire(self, now: float, queues_with_demand: set[str]) -> None:
        """Drop claims older than :data:`CLAIM_TTL_S`, and those of queues that want nothing.
        O(claims dropped + queues with claims), whatever the claims held: it runs every pass."""
        for queue in [q for q in self._nodes_of if q not in queues_with_demand]:
            for node_id in list(self._nodes_of.get(queue, ())):
                self._set(node_id, queue, None)
        while self._by_age and now - self._by_age[0][0] > CLAIM_TTL_S:
            since, node_id, queue = heapq.heappop(self._by_age)
            claim = self._claims.get(node_id, {}).get(queue)
            if claim is not None and claim.since == since:  # (else replaced or gone since)
                self._set(node_id, queue, None)

    def _set(self, node_id: str, queue: str, claim: _Claim | None) -> None:
        previous = self._claims.get(node_id, {}).get(queue)
        self._journal(lambda: self._put(node_id, queue, previous))
        self._put(node_id, queue, claim)

    def _put(self, node_id: str, queue: str, claim: _Claim | None) -> None:
        by_queue = self._claims.setdefault(node_id, {})
        if claim is None:
            by_queue.pop(queue, None)
            if not by_queue:
                del self._claims[node_id]
            nodes = self._nodes_of.get(queue)
            if nodes is not None:
                nodes.discard(node_id)
                if not nodes:
                    del self._nodes_of[queue]
        else:
            if by_queue.get(queue) != claim:
                heapq.heappush(self._by_age, (claim.since, node_id, queue))
            by_queue[queue] = claim
            self._nodes_of.setdefault(queue, set()).add(node_id)

    # ------------------------------------------------------------------ delayed resumption

    def declined(self, allocation_id: str) -> int:
        return self._declined.get(allocation_id, 0)

    def set_declined(self, allocation_id: str, count: int | None) -> None:
        """Record the offers a preempted container declined (None: forget it)."""
        previous = self._declined.get(allocation_id)

        def undo() -> None:
            if previous is None:
                self._declined.pop(allocation_id, None)
            else:
                self._declined[allocation_id] = previous

        self._journal(undo)
        if count is None:
            self._declined.pop(allocation_id, None)
        else:
            self._declined[allocation_id] = count

    # ------------------------------------------------------------------ decisions

    def decided(self, now: float) -> None:
        before = (self.last_decision, self.wanted)

        def undo() -> None:
            self.last_decision, self.wanted = before

        self._journal(undo)
        self.last_decision, self.wanted = now, False
