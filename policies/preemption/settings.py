"""The knobs of container-based preemption (Sec. 3.2-3.3, 4.3) and the preemption modes.

The resources are the scheduler's two, ⟨cpu cores, memory MiB⟩ (:class:`Resources`). The
defaults are the paper's: a minimal footprint of 1% CPU and 64 MB (Sec. 3.2), a graceful step
of ⟨2 CPU, 4 GB⟩ (Sec. 5.3), CPU throttled first (Sec. 3.2) and a resumption delay D = 3
(Sec. 5.3).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from policies.preemption.vectors import RESOURCE_NAMES, ResourceName, check_resources
from policies.scheduling.resources import Resources

PAPER_FOOTPRINT: Final = Resources(cpu=0.01, memory_mb=64)
"""The minimal container footprint of Sec. 3.2: 1% CPU and 64 MB."""

PAPER_GRACEFUL_STEP: Final = Resources(cpu=2.0, memory_mb=4096)
"""r_GP of the evaluation (Sec. 5.3): ⟨2 CPU, 4 GB⟩."""


class Mode(enum.Enum):
    """How reclaimed resources are taken from a container."""

    KILL = "kill"
    """Kill whole containers (YARN's capacity scheduler): Alg. 1 with p = a (line 9), Alg. 2."""
    GRACEFUL = "graceful"
    """Shrink containers a step at a time, freezing those that swap (GP, Sec. 3.3): Alg. 1 with
    COMPUTEDR (line 9 as modified), Alg. 2 as modified (lines 7-8)."""
    IMMEDIATE = "immediate"
    """Suspend whole containers to the minimal footprint (IP, Sec. 3.2): the capacity
    scheduler's algorithms, unchanged (Sec. 4.3), with suspension instead of killing."""


@dataclass(frozen=True)
class PreemptionSettings:
    """Knobs shared by every preemption decision.

    Attributes:
        minimal_footprint: what a suspended or fully shrunk container keeps, so its heartbeat
            thread stays alive to the scheduler (Sec. 3.2: 1% CPU, 64 MB).
        graceful_step: r_GP, reclaimed from each container per round in graceful mode
            (Algorithm 2, line 7).
        throttle_first: the resource deprived first when a container is shrunk or suspended;
            CPU by default, because a container without CPU stops dirtying memory and its memory
            is then reclaimed faster (Sec. 3.2). A freeze is always of the CPU (Sec. 4.2).
        resume_after_offers: D, offers a preempted container declines before it resumes.
    """

    minimal_footprint: Resources = PAPER_FOOTPRINT
    graceful_step: Resources = PAPER_GRACEFUL_STEP
    throttle_first: ResourceName = "cpu"
    resume_after_offers: int = 3

    def __post_init__(self) -> None:
        check_resources("minimal_footprint", self.minimal_footprint)
        check_resources("graceful_step", self.graceful_step)
        if self.graceful_step.cpu <= 0 and self.graceful_step.memory_mb <= 0:
            raise ValueError("graceful_step: at least one value must be > 0")
        if self.throttle_first not in RESOURCE_NAMES:
            names = list(RESOURCE_NAMES)
            raise ValueError(f"throttle_first: must be one of {names}, got {self.throttle_first!r}")
        if self.resume_after_offers < 0:
            raise ValueError(f"resume_after_offers: must be >= 0, got {self.resume_after_offers}")

    @property
    def apply_order(self) -> tuple[ResourceName, ...]:
        """The resources in the order their new limits must be applied: throttle_first first."""
        first = self.throttle_first
        return (first, *(name for name in RESOURCE_NAMES if name != first))
