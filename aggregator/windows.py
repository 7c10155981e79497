"""The aggregator's sliding windows: the last ``window`` samples of every machine, in numpy.

One row per machine holds ring buffers of its load metrics, queue metrics, CPI and MPKI, plus the
latest load capacities. ``snapshot`` turns them into the immutable ``MachineWindows`` the
candidate ranking reads, in time order.

Layout, and why: each ring is stored twice over (a "mirrored" ring of ``2 * window`` slots, every
sample written at ``p`` and ``p + window``), so a machine's window in time order is always the
contiguous slice ``[p, p + window)`` where ``p`` is its next write position. A snapshot is then
one fancy-index gather of those slices over a ``sliding_window_view`` — no per-element index
array, no per-row roll — at the price of twice the ring memory (about 12 KB per machine at 60
samples). Slots never written hold NaN, which is the windows' "missing sample", so a machine
with fewer than ``window`` samples comes out NaN-padded on the old side for free.

Rows are allocated on a machine's first sample and kept while it is known; ``forget`` frees the
row for a later newcomer. When no row is free the arrays double.

``WindowStore`` is not thread-safe: callers serialise ``add``, ``forget`` and ``snapshot``.
"""

from __future__ import annotations

import heapq
from typing import TypeVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

from aggregator.samples import MachineSample
from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS
from policies.oversubscription.snapshot import MachineWindows

FloatArray = NDArray[np.float64]
_T = TypeVar("_T", bound=np.generic)

_LOADS = len(LOAD_METRICS)
_QUEUES = len(QUEUE_METRICS)


class WindowStore:
    """Ring buffers of the last ``window`` samples of each machine (see the module docstring).

    Not thread-safe.
    """

    def __init__(self, window: int = 60, initial_machines: int = 1024) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError("window: must be a positive integer")
        if (
            isinstance(initial_machines, bool)
            or not isinstance(initial_machines, int)
            or initial_machines < 1
        ):
            raise ValueError("initial_machines: must be a positive integer")
        self._window = window
        self._row_of: dict[str, int] = {}
        self._node_of: list[str | None] = []  # per allocated row; None once forgotten
        self._free: list[int] = []  # heap of forgotten rows, lowest reused first
        self._known_rows: NDArray[np.intp] | None = None  # cache, dropped on membership change
        self._known_ids: tuple[str, ...] | None = None
        mirrored = 2 * window
        # Per row: mirrored rings (see the module docstring), then plain per-machine values.
        self._load: FloatArray = np.empty((0, _LOADS, mirrored))
        self._queue: FloatArray = np.empty((0, _QUEUES, mirrored))
        self._cpi: FloatArray = np.empty((0, mirrored))
        self._mpki: FloatArray = np.empty((0, mirrored))
        self._times: FloatArray = np.empty((0, window))  # plain ring: only read per machine
        self._capacity: FloatArray = np.empty((0, _LOADS))  # the latest sample's
        self._position: NDArray[np.intp] = np.empty(0, dtype=np.intp)  # next write slot
        self._count: NDArray[np.int64] = np.empty(0, dtype=np.int64)  # samples ever added
        self._last_seen: FloatArray = np.empty(0)  # newest sample's timestamp
        self._cpi_seen: NDArray[np.bool_] = np.empty(0, dtype=np.bool_)  # ever reported CPI
        self._mpki_seen: NDArray[np.bool_] = np.empty(0, dtype=np.bool_)
        self._grow(initial_machines)

    @property
    def window(self) -> int:
        """Samples kept per machine."""
        return self._window

    @property
    def node_ids(self) -> tuple[str, ...]:
        """The known machines in row order (the order of ``snapshot``)."""
        if self._known_ids is None:
            self._known_ids = tuple(node for node in self._node_of if node is not None)
        return self._known_ids

    def __len__(self) -> int:
        return len(self._row_of)

    def add(self, sample: MachineSample) -> bool:
        """Append ``sample`` to its machine's window (creating the machine on first sight).

        Returns False, changing nothing, when the sample is not newer than the machine's newest
        one (a duplicate after a consumer rewinds, or one that arrived out of order).
        """
        row = self._row_of.get(sample.node_id)
        if row is None:
            row = self._new_row(sample.node_id)
        elif sample.timestamp <= self._last_seen[row]:
            return False
        w = self._window
        p = int(self._position[row])
        # Basic slicing with step w hits exactly the two mirrored slots p and p + w.
        self._load[row, :, p::w] = np.asarray(sample.load, dtype=np.float64)[:, None]
        self._queue[row, :, p::w] = np.asarray(sample.queue, dtype=np.float64)[:, None]
        cpi = np.nan if sample.cpi is None else sample.cpi
        mpki = np.nan if sample.mpki is None else sample.mpki
        self._cpi[row, p::w] = cpi
        self._mpki[row, p::w] = mpki
        self._times[row, p] = sample.timestamp
        self._capacity[row] = sample.load_capacity
        self._cpi_seen[row] |= sample.cpi is not None
        self._mpki_seen[row] |= sample.mpki is not None
        self._position[row] = (p + 1) % w
        self._count[row] += 1
        self._last_seen[row] = sample.timestamp
        return True

    def window_length(self, node_id: str) -> int:
        """How many samples the machine's window holds (0 for an unknown machine)."""
        row = self._row_of.get(node_id)
        return 0 if row is None else int(min(self._count[row], self._window))

    def last_seen(self, node_id: str) -> float | None:
        """The timestamp of the machine's newest sample, None for an unknown machine."""
        row = self._row_of.get(node_id)
        return None if row is None else float(self._last_seen[row])

    def window_times(self, node_id: str) -> tuple[float, ...]:
        """The timestamps of the samples in the machine's window, oldest first (empty for an
        unknown machine)."""
        row = self._row_of.get(node_id)
        if row is None:
            return ()
        ordered = np.roll(self._times[row], -int(self._position[row]))
        return tuple(float(t) for t in ordered[np.isfinite(ordered)])

    def forget(self, node_id: str) -> None:
        """Drop a machine and its window; later snapshots exclude it. Unknown ids are ignored.
        A later sample of the same machine starts a fresh window."""
        row = self._row_of.pop(node_id, None)
        if row is None:
            return
        self._node_of[row] = None
        heapq.heappush(self._free, row)
        self._membership_changed()

    def snapshot(self, now: float, stale_after: float) -> tuple[tuple[str, ...], MachineWindows]:
        """The known machines (``node_ids`` order) and their windows, oldest sample first.

        A machine with fewer than ``window`` samples has NaN in the oldest slots. ``connected``
        is False for a machine whose newest sample is older than ``now - stale_after``.
        ``cpi`` / ``mpki`` are None when no known machine ever reported that counter (rows of
        machines without it are all NaN otherwise). The arrays are copies: later ``add`` calls
        do not change a snapshot.
        """
        rows = self._rows()
        start = self._position[rows]
        w = self._window

        def ordered(ring: FloatArray) -> FloatArray:
            # view[..., s, :] is the slice [s, s + w) of the mirrored ring.
            view = sliding_window_view(ring, w, axis=-1)
            if ring.ndim == 3:
                gathered: FloatArray = view[rows, :, start]
            else:
                gathered = view[rows, start]
            return gathered

        return self.node_ids, MachineWindows(
            load=ordered(self._load),
            queue=ordered(self._queue),
            connected=self._last_seen[rows] >= now - stale_after,
            load_capacity=self._capacity[rows],
            cpi=ordered(self._cpi) if self._cpi_seen[rows].any() else None,
            mpki=ordered(self._mpki) if self._mpki_seen[rows].any() else None,
        )

    # -- rows ---------------------------------------------------------------------------------

    def _rows(self) -> NDArray[np.intp]:
        if self._known_rows is None:
            self._known_rows = np.fromiter(
                (row for row, node in enumerate(self._node_of) if node is not None),
                dtype=np.intp,
            )
        return self._known_rows

    def _new_row(self, node_id: str) -> int:
        if self._free:
            row = heapq.heappop(self._free)
            self._node_of[row] = node_id
        else:
            row = len(self._node_of)
            if row == self._capacity.shape[0]:
                self._grow(2 * row)
            self._node_of.append(node_id)
        self._row_of[node_id] = row
        self._reset_row(row)
        self._membership_changed()
        return row

    def _reset_row(self, row: int) -> None:
        # A reused row must not leak its previous machine's samples into the new window.
        for ring in (self._load, self._queue, self._cpi, self._mpki, self._times):
            ring[row] = np.nan
        self._capacity[row] = 1.0
        self._position[row] = 0
        self._count[row] = 0
        self._last_seen[row] = -np.inf
        self._cpi_seen[row] = False
        self._mpki_seen[row] = False

    def _membership_changed(self) -> None:
        self._known_rows = None
        self._known_ids = None

    def _grow(self, rows: int) -> None:
        """Reallocate every per-row array for ``rows`` rows, keeping the existing rows."""
        self._load = _grown(self._load, rows, np.nan)
        self._queue = _grown(self._queue, rows, np.nan)
        self._cpi = _grown(self._cpi, rows, np.nan)
        self._mpki = _grown(self._mpki, rows, np.nan)
        self._times = _grown(self._times, rows, np.nan)
        self._capacity = _grown(self._capacity, rows, 1.0)
        self._position = _grown(self._position, rows, 0)
        self._count = _grown(self._count, rows, 0)
        self._last_seen = _grown(self._last_seen, rows, -np.inf)
        self._cpi_seen = _grown(self._cpi_seen, rows, False)
        self._mpki_seen = _grown(self._mpki_seen, rows, False)


def _grown(array: NDArray[_T], rows: int, fill: float | bool) -> NDArray[_T]:
    fresh = np.full((rows, *array.shape[1:]), fill, dtype=array.dtype)
    fresh[: array.shape[0]] = array
    return fresh
