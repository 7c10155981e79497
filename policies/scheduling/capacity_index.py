"""Nodes indexed by how much of them is allocated: node choice at 15,000 nodes without a scan.

The filter and score points must not look at every node for every container: at 15,000 nodes an
exhaustive least-allocated search costs milliseconds per container.  :class:`CapacityIndex` keeps
each schedulable node in one of :data:`LEVELS` buckets by its dominant allocated share (DRF: the
largest fraction of its capacity allocated in any resource), so the least-allocated nodes come
first without sorting, and it keeps the cluster-wide maximum free amount per resource, so an ask
that fits on no node is refused in O(1) (it may still fit nowhere when no single node has both
resources free; the search then finds out once per pass, see :mod:`framework`).

Changes are O(1) per node (a bucket move, a heap push): the shell calls :meth:`CapacityIndex.set`
when a node's allocation changes (grant, release, resize) and :meth:`CapacityIndex.remove` when
it stops being schedulable.  A scheduling pass places containers tentatively through
:meth:`CapacityIndex.scratch`, whose changes are undone when the pass ends: the pass reads a
consistent view while it plans, and the shell applies the plan to its own records (which set the
index again), so the index always mirrors the records.

Iteration order is deterministic: buckets ascending, and within a bucket the order in which nodes
entered it, so the same sequence of changes gives the same placements (the simulator's seeds
rely on it).

The maximum-free heaps invalidate lazily: every change pushes the node's new free amount, stale
entries are dropped when they reach the top, and the heaps are rebuilt when they hold more than
four times as many entries as there are nodes (a rebuild costs O(nodes): rarer is cheaper, and
the memory stays small).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from policies.scheduling.resources import Resources

LEVELS = 100
"""Buckets of dominant allocated share: 1 % each."""


class NodeCapacity:
    """One schedulable node: its capacity, what is allocated on it and what is free (kept, not
    recomputed: every placement reads it).  Immutable by convention: the index replaces it."""

    __slots__ = ("allocated", "capacity", "free", "level", "node_id")

    def __init__(self, node_id: str, capacity: Resources, allocated: Resources) -> None:
        self.node_id = node_id
        self.capacity = capacity
        self.allocated = allocated
        self.free = Resources(
            capacity.cpu - allocated.cpu, capacity.memory_mb - allocated.memory_mb
        )
        self.level = allocated_level(capacity, allocated)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeCapacity) and (
            self.node_id,
            self.capacity,
            self.allocated,
        ) == (other.node_id, other.capacity, other.allocated)

    def __hash__(self) -> int:
        return hash((self.node_id, self.capacity, self.allocated))

    def __repr__(self) -> str:
        return f"NodeCapacity({self.node_id!r}, {self.capacity!r}, {self.allocated!r})"


def allocated_level(capacity: Resources, allocated: Resources) -> int:
    """The bucket of a node: its dominant allocated share in 1/LEVELS steps (full nodes last)."""
    share = 0.0
    if capacity.cpu > 0:
        share = allocated.cpu / capacity.cpu
    if capacity.memory_mb > 0:
        share = max(share, allocated.memory_mb / capacity.memory_mb)
    return max(0, min(LEVELS - 1, int(share * LEVELS)))


class CapacityIndex:
    """Schedulable nodes by allocated share, with the cluster's total capacity and the largest
    free amount of each resource on any node.  See the module docstring."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeCapacity] = {}
        self._buckets: list[dict[str, None]] = [{} for _ in range(LEVELS)]
        self._holes = [0] * LEVELS  # deletions since each bucket was last compacted
        self._free_cpu: list[tuple[float, str]] = []  # (-free cpu, node): a max-heap, lazily
        self._free_memory: list[tuple[float, str]] = []
        self._total = Resources()
        self._shapes: dict[Resources, int] = {}  # distinct capacities -> how many nodes
        self._scratch: list[tuple[str, NodeCapacity | None]] | None = None
        self._gains: list[str] = []  # nodes whose free amount grew (or that joined), in order
        self._gains_base = 0  # the generation of _gains[0]

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    # ------------------------------------------------------------------ changes

    def set(self, node_id: str, capacity: Resources, allocated: Resources) -> None:
        """Add a node, or record its new capacity or allocation (nothing to do if unchanged)."""
        node = self._nodes.get(node_id)
        if node is not None and node.allocated == allocated and node.capacity == capacity:
            return
        self._record_undo(node_id)
        self._put(NodeCapacity(node_id, capacity, allocated))

    def remove(self, node_id: str) -> None:
        """The node takes no more containers (lost, draining)."""
        if node_id in self._nodes:
            self._record_undo(node_id)
            self._drop(node_id)

    def take(self, node_id: str, amount: Resources) -> None:
        """Allocate ``amount`` more on a node (a tentative placement inside :meth:`scratch`)."""
        node = self._nodes[node_id]
        self.set(node_id, node.capacity, node.allocated + amount)

    def scratch(self) -> Scratch:
        """A context in which changes are undone on exit: a pass plans against it."""
        return Scratch(self)

    # ------------------------------------------------------------------ queries

    def get(self, node_id: str) -> NodeCapacity | None:
        return self._nodes.get(node_id)

    @property
    def total_capacity(self) -> Resources:
        return self._total

    def capacity_shapes(self) -> list[Resources]:
        """The distinct node capacities (a cluster has few): "does this fit on some node"
        without visiting every node."""
        return list(self._shapes)

    def max_free(self) -> Resources:
        """The largest free cpu on any node and the largest free memory on any node (perhaps
        not the same node): nothing larger can fit anywhere."""
        cpu = self._top(self._free_cpu, cpu=True)
        memory = self._top(self._free_memory, cpu=False)
        return Resources(cpu=-cpu if cpu is not None else 0.0, memory_mb=-int(memory or 0))

    def least_allocated_first(self) -> Iterator[NodeCapacity]:
        """Every node, the least allocated buckets first.  Do not change the index while
        iterating; collect what you need first."""
        for _, node in self.by_level():
            yield node

    def by_level(self) -> Iterator[tuple[int, NodeCapacity]]:
        """(bucket, node) for every node, the least allocated buckets first."""
        nodes = self._nodes
        for level, bucket in enumerate(self._buckets):
            for node_id in bucket:
                yield level, nodes[node_id]

    def nodes(self) -> Iterator[NodeCapacity]:
        yield from self._nodes.values()

    # ------------------------------------------------------------------ internals

    @property
    def generation(self) -> int:
        """Counts the times a node's free amount grew or a node joined."""
        return self._gains_base + len(self._gains)

    def gained_since(self, generation: int) -> list[str] | None:
        """The nodes whose free amount grew (or that joined) since ``generation``, or None if
        that is too long ago to tell.  What fitted on no node then can fit now only on them."""
        if generation < self._gains_base:
            return None
        return self._gains[generation - self._gains_base :]

    def _put(self, node: NodeCapacity) -> None:
        previous = self._nodes.get(node.node_id)
        if (
            previous is None
            or node.free.cpu > previous.free.cpu
            or node.free.memory_mb > previous.free.memory_mb
        ):
            self._gains.append(node.node_id)
            if len(self._gains) > 4 * len(self._nodes) + 1024:  # forget the older half
                half = len(self._gains) // 2
                del self._gains[:half]
                self._gains_base += half
        if previous is not None and previous.capacity == node.capacity:
            # The common case, a new allocation: move buckets only if the level changed.
            if previous.level != node.level:
                self._leave_bucket(node.node_id, previous.level)
                self._buckets[node.level][node.node_id] = None
            self._nodes[node.node_id] = node
        else:
            self._drop(node.node_id)
            self._nodes[node.node_id] = node
            self._buckets[node.level][node.node_id] = None
            self._total = self._total + node.capacity
            self._shapes[node.capacity] = self._shapes.get(node.capacity, 0) + 1
        free = node.free
        heapq.heappush(self._free_cpu, (-free.cpu, node.node_id))
        heapq.heappush(self._free_memory, (float(-free.memory_mb), node.node_id))
        if len(self._free_cpu) > 4 * len(self._nodes) + 64:
            self._rebuild_heaps()

    def _drop(self, node_id: str) -> None:
        node = self._nodes.pop(node_id, None)
        if node is not None:
            self._leave_bucket(node_id, node.level)
            self._total = self._total - node.capacity
            left = self._shapes[node.capacity] - 1
            if left:
                self._shapes[node.capacity] = left
            else:
                del self._shapes[node.capacity]
            if not self._nodes:
                self._total = Resources()  # no float drift left behind

    def _leave_bucket(self, node_id: str, level: int) -> None:
        bucket = self._buckets[level]
        del bucket[node_id]
        # A dict keeps the slots of deleted keys until it grows again, and iterating it walks
        # them all: once a bucket holds more holes than nodes, compact it.
        self._holes[level] += 1
        if self._holes[level] > 32 and self._holes[level] > len(bucket):
            self._buckets[level] = dict(bucket)
            self._holes[level] = 0

    def _top(self, heap: list[tuple[float, str]], *, cpu: bool) -> float | None:
        while heap:
            negative_free, node_id = heap[0]
            node = self._nodes.get(node_id)
            if node is not None:
                free = node.free
                if -negative_free == (free.cpu if cpu else free.memory_mb):
                    return negative_free
            heapq.heappop(heap)
        return None

    def _rebuild_heaps(self) -> None:
        nodes = list(self._nodes.values())
        self._free_cpu = [(-n.free.cpu, n.node_id) for n in nodes]
        self._free_memory = [(float(-n.free.memory_mb), n.node_id) for n in nodes]
        heapq.heapify(self._free_cpu)
        heapq.heapify(self._free_memory)

    def _record_undo(self, node_id: str) -> None:
        if self._scratch is not None:
            self._scratch.append((node_id, self._nodes.get(node_id)))

    def _undo(self, log: list[tuple[str, NodeCapacity | None]]) -> None:
        for node_id, previous in reversed(log):
            if previous is None:
                self._drop(node_id)
            else:
                self._put(previous)


class Scratch:
    """Tentative changes to a :class:`CapacityIndex`, undone when the ``with`` block ends unless
    :meth:`keep` was called.  A scratch opened inside another joins it: the outer one decides."""

    def __init__(self, index: CapacityIndex) -> None:
        self._index = index
        self._nested = False

    def __enter__(self) -> CapacityIndex:
        self._nested = self._index._scratch is not None
        if not self._nested:
            self._index._scratch = []
        return self._index

    def keep(self) -> None:
        """Keep the changes made so far: the shell applied the plan, and its records now say
        what the index already does (so applying them changed nothing in the index)."""
        if not self._nested and self._index._scratch is not None:
            self._index._scratch = []

    def __exit__(self, *exc: object) -> None:
        if self._nested:
            return
        log, self._index._scratch = self._index._scratch or [], None
        self._index._undo(log)
