"""Resource vectors: CPU in cores and memory in MiB."""

from __future__ import annotations

from dataclasses import dataclass

# CPU amounts are compared after rounding to a thousandth of a core, so that sums of float
# fractions (0.1 + 0.2) never make a fitting request look one ulp too large.
_CPU_EPSILON = 1e-9


@dataclass(frozen=True, order=True)
class Resources:
    """An amount of CPU (cores, fractional) and memory (MiB). Never negative in valid use."""

    cpu: float = 0.0
    memory_mb: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory_mb + other.memory_mb)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory_mb - other.memory_mb)

    def __mul__(self, factor: int) -> Resources:
        return Resources(self.cpu * factor, self.memory_mb * factor)

    def fits_in(self, available: Resources) -> bool:
        """True when this amount fits within ``available`` in every dimension."""
        return self.cpu <= available.cpu + _CPU_EPSILON and self.memory_mb <= available.memory_mb

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


ZERO = Resources()
