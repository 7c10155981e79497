"""Immutable inputs of the cluster aggregator's candidate selection (ROSE Sec. 4-5).

``MachineWindows`` is what the aggregator holds per period: the sliding windows of every machine's
metrics (Sec. 4.1-4.2). ``MachineLoads`` is the same cluster after load level approximation
(Alg. 1): one value per machine and metric, ready for machine filtering (Alg. 4).

Arrays are stored as read-only views (no copy), so a snapshot cannot be changed through it; the
caller must not mutate the arrays it passed in either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
_T = TypeVar("_T", bound=np.generic)


@dataclass(frozen=True, eq=False)
class MachineWindows:
    """Sliding metric windows of ``n`` machines. NaN marks a missing sample.

    * ``load``: (n, L, s) load metrics in the order of ``config.load_metrics``, in any unit;
    * ``load_capacity``: (n, L) each machine's capacity for each load metric in the same unit
      (``None``: the samples already are fractions of capacity, i.e. capacity 1);
    * ``queue``: (n, Q, s_q) queue metrics in the order of ``config.queue_metrics`` (counts);
    * ``cpi`` / ``mpki``: (n, s_c) hardware-counter windows; a machine without a PMU has an
      all-NaN row, and ``None`` means no machine has counters;
    * ``connected``: (n,) False for a machine that is disconnected or timing out.
    """

    load: FloatArray
    queue: FloatArray
    connected: BoolArray
    load_capacity: FloatArray | None = None
    cpi: FloatArray | None = None
    mpki: FloatArray | None = None

    def __post_init__(self) -> None:
        load = _frozen_float(self.load, "windows.load", ndim=3)
        machines = load.shape[0]
        object.__setattr__(self, "load", load)
        queue = _frozen_float(self.queue, "windows.queue", ndim=3)
        _check_machines("windows.queue", queue, machines)
        object.__setattr__(self, "queue", queue)
        connected = _frozen(np.asarray(self.connected, dtype=np.bool_))
        if connected.shape != (machines,):
            raise ValueError(f"windows.connected: expected shape ({machines},)")
        object.__setattr__(self, "connected", connected)
        if self.load_capacity is not None:
            capacity = _frozen_float(self.load_capacity, "windows.load_capacity", ndim=2)
            if capacity.shape != load.shape[:2]:
                raise ValueError(f"windows.load_capacity: expected shape {load.shape[:2]}")
            if not (np.isfinite(capacity).all() and (capacity > 0).all()):
                raise ValueError("windows.load_capacity: every capacity must be positive")
            object.__setattr__(self, "load_capacity", capacity)
        for name in ("cpi", "mpki"):
            window = getattr(self, name)
            if window is not None:
                frozen = _frozen_float(window, f"windows.{name}", ndim=2)
                _check_machines(f"windows.{name}", frozen, machines)
                object.__setattr__(self, name, frozen)

    @property
    def machine_count(self) -> int:
        """Number of machines ``n``."""
        return int(self.load.shape[0])

    def select(self, machines: NDArray[np.intp]) -> MachineWindows:
        """The windows of the given machines only, in the given order."""
        return MachineWindows(
            load=self.load[machines],
            queue=self.queue[machines],
            connected=self.connected[machines],
            load_capacity=None if self.load_capacity is None else self.load_capacity[machines],
            cpi=None if self.cpi is None else self.cpi[machines],
            mpki=None if self.mpki is None else self.mpki[machines],
        )


@dataclass(frozen=True, eq=False)
class MachineLoads:
    """Approximated state of ``n`` machines (the output of Alg. 1, input of Alg. 4).

    * ``load``: (n, L) approximated load metrics, NaN when a window had no sample;
    * ``load_capacity``: (n, L) capacities in the same unit (ones when samples are fractions);
    * ``queue``: (n, Q) approximated queue metrics;
    * ``cpi`` / ``mpki``: (n,) window averages, NaN on machines without counters;
    * ``connected``: (n,) connectivity as reported.
    """

    load: FloatArray
    load_capacity: FloatArray
    queue: FloatArray
    cpi: FloatArray
    mpki: FloatArray
    connected: BoolArray

    def __post_init__(self) -> None:
        load = _frozen_float(self.load, "loads.load", ndim=2)
        machines = load.shape[0]
        object.__setattr__(self, "load", load)
        capacity = _frozen_float(self.load_capacity, "loads.load_capacity", ndim=2)
        if capacity.shape != load.shape:
            raise ValueError(f"loads.load_capacity: expected shape {load.shape}")
        object.__setattr__(self, "load_capacity", capacity)
        queue = _frozen_float(self.queue, "loads.queue", ndim=2)
        _check_machines("loads.queue", queue, machines)
        object.__setattr__(self, "queue", queue)
        for name in ("cpi", "mpki"):
            values = _frozen_float(getattr(self, name), f"loads.{name}", ndim=1)
            _check_machines(f"loads.{name}", values, machines)
            object.__setattr__(self, name, values)
        connected = _frozen(np.asarray(self.connected, dtype=np.bool_))
        if connected.shape != (machines,):
            raise ValueError(f"loads.connected: expected shape ({machines},)")
        object.__setattr__(self, "connected", connected)

    @property
    def machine_count(self) -> int:
        """Number of machines ``n``."""
        return int(self.load.shape[0])


def _frozen_float(values: ArrayLike, name: str, *, ndim: int) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array, got {array.ndim}-D")
    return _frozen(array)


def _frozen(array: NDArray[_T]) -> NDArray[_T]:
    view = array.view()
    view.flags.writeable = False
    return view


def _check_machines(name: str, array: NDArray[np.generic], machines: int) -> None:
    if array.shape[0] != machines:
        raise ValueError(f"{name}: expected {machines} machines, got {array.shape[0]}")
