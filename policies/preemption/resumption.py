"""Delayed resumption of a preempted container (Sec. 4.3, "Delayed resumption factor D").

A preempted container asks for its resources back like any task, but only on the machine it was
preempted on; it declines the first D offers that could resume it and resumes on the next one,
so that a burst of short jobs does not resume and preempt it again and again. D = 0 resumes at
the first fitting offer; the paper uses D = 3 (Sec. 5.3).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from policies.scheduling.resources import Resources


@dataclass(frozen=True)
class PreemptedContainer:
    """A suspended or shrunk container waiting to be resumed.

    Attributes:
        container_id: the container.
        node: the machine it runs on; only offers there can resume it.
        held: what it holds now (the minimal footprint once suspended).
        original: what it held before preemption, restored on resumption.
        declined_offers: fitting offers declined so far.
    """

    container_id: str
    node: str
    held: Resources
    original: Resources
    declined_offers: int = 0


class Verdict(enum.Enum):
    """What to do with an offer."""

    RESUME = "resume"
    """Restore the container to ``original``."""
    DECLINE = "decline"
    """A fitting offer, declined to delay resumption; it counts towards D."""
    IGNORE = "ignore"
    """The offer is on another machine or too small; it does not count."""


@dataclass(frozen=True)
class ResumeDecision:
    """The verdict and the container's state after it."""

    verdict: Verdict
    container: PreemptedContainer


def consider_offer(
    container: PreemptedContainer, node: str, free: Resources, delay_offers: int = 3
) -> ResumeDecision:
    """Resume on the first offer that fits after ``delay_offers`` fitting offers were declined.

    An offer fits when ``free`` on the container's node covers what the container lacks,
    ``original - held``, in both resources (:meth:`Resources.fits_in`: CPU with float
    tolerance, memory exactly in whole MiB). Offers that do not fit neither resume nor count.
    """
    if delay_offers < 0:
        raise ValueError(f"delay_offers: must be >= 0, got {delay_offers}")
    fits = (container.original - container.held).fits_in(free)
    if node != container.node or not fits:
        return ResumeDecision(Verdict.IGNORE, container)
    if container.declined_offers >= delay_offers:
        return ResumeDecision(Verdict.RESUME, container)
    declined = replace(container, declined_offers=container.declined_offers + 1)
    return ResumeDecision(Verdict.DECLINE, declined)
