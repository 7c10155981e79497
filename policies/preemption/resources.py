"""Resource vectors and the knobs of container-based preemption (Sec. 3.2-3.3, 4.3).

A resource vector is a tuple of non-negative floats, one per named resource; the names live in
:class:`PreemptionSettings` so that the policy works for any number of resources. The defaults
are the paper's: resources ⟨cpu cores, memory MB⟩, a minimal footprint of 1% CPU and 64 MB
(Sec. 3.2), a graceful step of ⟨2 CPU, 4 GB⟩ (Sec. 5.3) and a resumption delay D = 3 (Sec. 5.3).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Resources = tuple[float, ...]
"""An amount of each resource, in the order of :attr:`PreemptionSettings.resource_names`."""

EPSILON = 1e-9
"""Amounts this close to zero count as zero, so float residue never triggers another step."""


class Mode(enum.Enum):
    """How reclaimed resources are taken from a container."""

    KILL = "kill"
    """Kill whole containers (YARN's capacity scheduler)."""
    GRACEFUL = "graceful"
    """Shrink containers a step at a time, freezing those that swap (GP, Sec. 3.3)."""
    IMMEDIATE = "immediate"
    """Suspend whole containers to the minimal footprint (IP, Sec. 3.2)."""


def as_vector(values: Resources) -> NDArray[np.float64]:
    """A resource vector as a fresh float array (callers may modify it)."""
    return np.array(values, dtype=np.float64)


def as_resources(vector: NDArray[np.float64]) -> Resources:
    """An array as an immutable resource tuple, with float residue below EPSILON set to 0."""
    cleaned = np.where(np.abs(vector) < EPSILON, 0.0, vector)
    return tuple(float(v) for v in cleaned)


def check_resources(field: str, values: Resources, dimensions: int) -> None:
    """Raise ValueError naming ``field`` unless ``values`` has ``dimensions`` finite values >= 0."""
    if len(values) != dimensions:
        raise ValueError(f"{field}: expected {dimensions} values, got {len(values)}")
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError(f"{field}: values must be finite and >= 0, got {list(values)}")


@dataclass(frozen=True)
class PreemptionSettings:
    """Knobs shared by every preemption decision.

    Attributes:
        resource_names: the name of each dimension of every resource vector.
        minimal_footprint: what a suspended or fully shrunk container keeps, so its heartbeat
            thread stays alive to the scheduler (Sec. 3.2: 1% CPU, 64 MB).
        graceful_step: r_GP, reclaimed from each container per round in graceful mode.
        throttle_first: the resource deprived first when a container is shrunk or suspended;
            CPU by default, because a container without CPU stops dirtying memory and its memory
            is then reclaimed faster (Sec. 3.2).
        resume_after_offers: D, offers a preempted container declines before it resumes.
    """

    resource_names: tuple[str, ...] = ("cpu", "memory_mb")
    minimal_footprint: Resources = (0.01, 64.0)
    graceful_step: Resources = (2.0, 4096.0)
    throttle_first: str = "cpu"
    resume_after_offers: int = 3

    def __post_init__(self) -> None:
        dims = len(self.resource_names)
        if dims == 0 or len(set(self.resource_names)) != dims:
            raise ValueError("resource_names: need at least one name, all distinct")
        check_resources("minimal_footprint", self.minimal_footprint, dims)
        check_resources("graceful_step", self.graceful_step, dims)
        if not any(v > 0 for v in self.graceful_step):
            raise ValueError("graceful_step: at least one value must be > 0")
        if self.throttle_first not in self.resource_names:
            raise ValueError(f"throttle_first: {self.throttle_first!r} is not a resource name")
        if self.resume_after_offers < 0:
            raise ValueError(f"resume_after_offers: must be >= 0, got {self.resume_after_offers}")

    @property
    def dimensions(self) -> int:
        """Number of resources."""
        return len(self.resource_names)

    @property
    def apply_order(self) -> tuple[int, ...]:
        """Indices of the resources in the order their new limits must be applied."""
        first = self.resource_names.index(self.throttle_first)
        return (first, *(i for i in range(self.dimensions) if i != first))
