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
twice as many entries as there are nodes.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from policies.scheduling.resources import Resources

LEVELS = 100
"""Buckets of dominant allocated share: 1 % each."""


@dataclass(frozen=True)
class NodeCapacity:
    """One schedulable node: its capacity and what is allocated on it."""

    node_id: str
    capacity: Resources
    allocated: Resources

    @property
    def free(self) -> Resources:
        return self.capacity - self.allocated


def allocated_level(capacity: Resources, allocated: Resources) -> int:
    """The bucket of a node: its dominant allocated share in 1/LEVELS steps (full nodes last)."""
    share = allocated.dominant_share(capacity)
    return max(0, min(LEVELS - 1, int(share * LEVELS)))


class CapacityIndex:
    """Schedulable nodes by allocated share, with the cluster's total capacity and the largest
    free amount of each resource on any node.  See the module docstring."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[NodeCapacity, int]] = {}
        self._buckets: list[dict[str, None]] = [{} for _ in range(LEVELS)]
        self._holes = [0] * LEVELS  # deletions since each bucket was last compacted
        self._free_cpu: list[tuple[float, str]] = []  # (-free cpu, node): a max-heap, lazily
        self._free_memory: list[tuple[float, str]] = []
        self._total = Resources()
        self._shapes: dict[Resources, int] = {}  # distinct capacities -> how many nodes
        self._scratch: list[tuple[str, NodeCapacity | None]] | None = None

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    # ------------------------------------------------------------------ changes

    def set(self, node_id: str, capacity: Resources, allocated: Resources) -> None:
        """Add a node, or record its new capacity or allocation (nothing to do if unchanged)."""
        entry = self._nodes.get(node_id)
        if entry is not None and entry[0].capacity == capacity and entry[0].allocated == allocated:
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
        node, _ = self._nodes[node_id]
        self.set(node_id, node.capacity, node.allocated + amount)

    def scratch(self) -> Scratch:
        """A context in which changes are undone on exit: a pass plans against it."""
        return Scratch(self)

    # ------------------------------------------------------------------ queries

    def get(self, node_id: str) -> NodeCapacity | None:
        entry = self._nodes.get(node_id)
        return None if entry is None else entry[0]

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
                yield level, nodes[node_id][0]

    def nodes(self) -> Iterator[NodeCapacity]:
        for node, _ in self._nodes.values():
            yield node

    # ------------------------------------------------------------------ internals

    def _put(self, node: NodeCapacity) -> None:
        self._drop(node.node_id)
        level = allocated_level(node.capacity, node.allocated)
        self._nodes[node.node_id] = (node, level)
        self._buckets[level][node.node_id] = None
        self._total = self._total + node.capacity
        self._shapes[node.capacity] = self._shapes.get(node.capacity, 0) + 1
        free = node.free
        heapq.heappush(self._free_cpu, (-free.cpu, node.node_id))
        heapq.heappush(self._free_memory, (float(-free.memory_mb), node.node_id))
        if len(self._free_cpu) > 2 * len(self._nodes) + 64:
            self._rebuild_heaps()

    def _drop(self, node_id: str) -> None:
        entry = self._nodes.pop(node_id, None)
        if entry is not None:
            node, level = entry
            bucket = self._buckets[level]
            del bucket[node_id]
            # A dict keeps the slots of deleted keys until it grows again, and iterating it
            # walks them all: once a bucket holds more holes than nodes, compact it.
            self._holes[level] += 1
            if self._holes[level] > 32 and self._holes[level] > len(bucket):
                self._buckets[level] = dict(bucket)
                self._holes[level] = 0
            self._total = self._total - node.capacity
            left = self._shapes[node.capacity] - 1
            if left:
                self._shapes[node.capacity] = left
            else:
                del self._shapes[node.capacity]
            if not self._nodes:
                self._total = Resources()  # no float drift left behind

    def _top(self, heap: list[tuple[float, str]], *, cpu: bool) -> float | None:
        while heap:
            negative_free, node_id = heap[0]
            entry = self._nodes.get(node_id)
            if entry is not None:
                free = entry[0].free
                if -negative_free == (free.cpu if cpu else free.memory_mb):
                    return negative_free
            heapq.heappop(heap)
        return None

    def _rebuild_heaps(self) -> None:
        nodes = [node for node, _ in self._nodes.values()]
        self._free_cpu = [(-n.free.cpu, n.node_id) for n in nodes]
        self._free_memory = [(float(-n.free.memory_mb), n.node_id) for n in nodes]
        heapq.heapify(self._free_cpu)
        heapq.heapify(self._free_memory)

    def _record_undo(self, node_id: str) -> None:
        if self._scratch is not None:
            entry = self._nodes.get(node_id)
            self._scratch.append((node_id, None if entry is None else entry[0]))

    def _undo(self, log: list[tuple[str, NodeCapacity | None]]) -> None:
        for node_id, previous in reversed(log):
            if previous is None:
                self._drop(node_id)
            else:
                self._put(previous)


class Scratch:
    """Tentative changes to a :class:`CapacityIndex`, undone when the ``with`` block ends."""

    def __init__(self, index: CapacityIndex) -> None:
        self._index = index

    def __enter__(self) -> CapacityIndex:
        if self._index._scratch is not None:
            raise RuntimeError("a scratch pass is already open on this index")
        self._index._scratch = []
        return self._index

    def __exit__(self, *exc: object) -> None:
        log, self._index._scratch = self._index._scratch or [], None
        self._index._undo(log)
