"""The preemption package's edge: :class:`Resources` in and out, numpy vectors inside.

Every public function of :mod:`policies.preemption` takes and returns
:class:`policies.scheduling.resources.Resources`, the scheduler's one resource type. Algorithms 1
and 2 compute on float vectors ⟨cpu, memory_mb⟩ (:data:`RESOURCE_NAMES`, the fields of
``Resources`` in order); this module converts between the two and validates amounts.

Whole MiB (documented departure from the paper, whose algorithms work on real numbers):
``Resources.memory_mb`` is a whole number of MiB, but Algorithm 1 produces fractional MiB (a
fair allocation capacity × φ, COMPUTEDR's proportional scaling, the split of p over queues).
:func:`from_vector` converts such an amount by

1. taking a value within float residue of a whole MiB as that whole MiB (an exact 5120 computed
   as 5120.000000001 stays 5120, so the paper's worked examples hold exactly);
2. otherwise rounding **up** to the next whole MiB, so that a queue never gives back less than
   the target p — the short jobs' claim is always covered;
3. then capping at ``most``, what the amount is drawn from (a queue's allocation, its a_q, a
   container's holding), so nothing ever reclaims more than is held.

Since every cap the package uses is itself whole MiB and at least the exact value, step 3 only
ever removes float residue; the cost of step 2 is at most one MiB per queue beyond the exact
p_q (and a_q may take a queue below its fractional fair allocation by less than one MiB).
Algorithm 2's inputs are all whole MiB and it only takes differences and minima of them, so its
amounts are whole MiB before any rounding. CPU stays fractional; residue below :data:`EPSILON`
is set to zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Literal

import numpy as np
from numpy.typing import NDArray

from policies.scheduling.resources import Resources

ResourceName = Literal["cpu", "memory_mb"]
"""The name of one dimension: a field of :class:`Resources`."""

RESOURCE_NAMES: Final[tuple[ResourceName, ResourceName]] = ("cpu", "memory_mb")
"""The dimensions of every vector, in vector order (the order of the fields of Resources)."""

CPU: Final = 0
MEMORY: Final = 1

EPSILON: Final = 1e-9
"""Amounts this close to zero count as zero, so float residue never triggers another step."""

_MIB_RESIDUE: Final = 1e-6
"""Absolute float residue, in MiB, that is still taken as a whole MiB (step 1 above)."""

_MIB_RELATIVE_RESIDUE: Final = 1e-12
"""Relative float residue, for memory amounts large enough that one ulp exceeds _MIB_RESIDUE."""


def index(name: ResourceName) -> int:
    """The vector index of the resource ``name``."""
    return RESOURCE_NAMES.index(name)


def as_vector(amount: Resources) -> NDArray[np.float64]:
    """``amount`` as a fresh float vector ⟨cpu, memory_mb⟩ (callers may modify it)."""
    return np.array([amount.cpu, amount.memory_mb], dtype=np.float64)


def as_matrix(amounts: Sequence[Resources]) -> NDArray[np.float64]:
    """One vector per amount, as the rows of a (len(amounts), 2) float matrix."""
    rows = [[a.cpu, a.memory_mb] for a in amounts]
    return np.array(rows, dtype=np.float64).reshape(len(amounts), len(RESOURCE_NAMES))


def whole_mib(value: float) -> int:
    """``value`` MiB as whole MiB: residue snapped to the nearest MiB, anything more rounded up."""
    nearest = round(value)
    if abs(value - nearest) <= max(_MIB_RESIDUE, abs(value) * _MIB_RELATIVE_RESIDUE):
        return int(nearest)
    return math.ceil(value)


def from_vector(vector: NDArray[np.float64], most: Resources) -> Resources:
    """A vector ⟨cpu, memory_mb⟩ as Resources: memory in whole MiB, rounded up then capped.

    See the module docstring for the rule. ``most`` is what the amount is drawn from; the result
    never exceeds it in either dimension.
    """
    cpu = float(vector[CPU])
    if abs(cpu) < EPSILON:
        cpu = 0.0
    return Resources(
        cpu=min(cpu, most.cpu), memory_mb=min(whole_mib(float(vector[MEMORY])), most.memory_mb)
    )


def is_nothing(amount: Resources) -> bool:
    """True when ``amount`` asks for no resource at all (CPU residue counts as none)."""
    return amount.cpu <= EPSILON and amount.memory_mb <= 0


def check_resources(field: str, amount: Resources) -> None:
    """Raise ValueError naming ``field`` unless cpu is finite >= 0 and memory_mb an int >= 0."""
    if not math.isfinite(amount.cpu) or amount.cpu < 0:
        raise ValueError(f"{field}: cpu must be finite and >= 0, got {amount.cpu}")
    memory: object = amount.memory_mb
    # bool is an int subclass, and a float here (even 64.0) means a caller skipped the edge.
    if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
        raise ValueError(f"{field}: memory_mb must be a whole number of MiB >= 0, got {memory!r}")
