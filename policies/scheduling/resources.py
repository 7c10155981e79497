"""Resource vectors: CPU in cores and memory in MiB."""

from __future__ import annotations

from typing import NamedTuple

# CPU amounts are compared after rounding to a thousandth of a core, so that sums of float
# fractions (0.1 + 0.2) never make a fitting request look one ulp too large.
_CPU_EPSILON = 1e-9


class Resources(NamedTuple):
    """An amount of CPU (cores, fractional) and memory (MiB). Never negative in valid use.

    Immutable, compared and ordered as (cpu, memory_mb).  A named tuple rather than a frozen
    dataclass because every grant, release and capacity update makes several: a tuple is built,
    compared and hashed several times faster.  ``+``, ``-`` and ``*`` are the vector operations
    (never tuple concatenation or repetition)."""

    cpu: float = 0.0
    memory_mb: int = 0

    def __add__(self, other: Resources) -> Resources:  # type: ignore[override]
        return _new(Resources, (self[0] + other[0], self[1] + other[1]))

    def __sub__(self, other: Resources) -> Resources:
        return _new(Resources, (self[0] - other[0], self[1] - other[1]))

    def __mul__(self, factor: int) -> Resources:  # type: ignore[override]
        return _new(Resources, (self[0] * factor, self[1] * factor))

    def __rmul__(self, factor: int) -> Resources:  # type: ignore[override]
        return _new(Resources, (self[0] * factor, self[1] * factor))

    def fits_in(self, available: Resources) -> bool:
        """True when this amount fits within ``available`` in every dimension."""
        return self[0] <= available[0] + _CPU_EPSILON and self[1] <= available[1]

    def dominant_share(self, capacity: Resources) -> float:
        """The largest fraction of ``capacity`` this amount takes in any dimension (DRF)."""
        shares = []
        if capacity.cpu > 0:
            shares.append(self.cpu / capacity.cpu)
        if capacity.memory_mb > 0:
            shares.append(self.memory_mb / capacity.memory_mb)
        return max(shares, default=0.0)

    def is_positive(self) -> bool:
        return self.cpu > 0 and self.memory_mb > 0


_new = tuple.__new__

ZERO = Resources()
