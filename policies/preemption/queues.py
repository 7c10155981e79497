"""Job queues with fair shares, and how each one's containers are preempted (BIG-C Sec. 4.3, 5.3).

A queue file (``sluice rm --queues FILE``, docs/preemption.md) reads, for example::

    default: long            # where jobs that name no queue go (default: the first queue)
    queues:
      short:
        share: 0.95          # φ, its fair share of the cluster (Alg. 1 line 3)
      long:
        share: 0.05
        mode: graceful       # how its containers give resources back when it is over its share
        graceful_step: {cpu: 2, memory_mb: 4096}   # r_GP (Alg. 2 line 7)
        minimal_footprint: {cpu: 0.01, memory_mb: 64}
        resume_after_offers: 3                     # D (Sec. 4.3, "delayed resumption")
        max_suspended_s: 3600                      # then it is killed and re-queued

Every field but ``share`` has the paper's value as its default: graceful preemption, r_GP = ⟨2
CPU, 4 GB⟩ and D = 3 (Sec. 5.3), a footprint of 1% CPU and 64 MB (Sec. 3.2); the paper sets no
limit on how long a container stays suspended, so neither does the default.

Beyond the paper (documented extensions): ``mode: none`` (this queue's containers are never
preempted) and ``max_share`` (the most of the cluster the queue may hold, YARN's
maximum-capacity).  Together they express the paper's *reserve* baseline: no preemption, the
long queue capped at 40%.  Without a queue file the RM has one queue, ``default``, with the whole
cluster and ``mode: none``: nothing is ever preempted.

:func:`parse_queue_config` validates a plain document (the YAML already loaded) and refuses the
first problem with a one-line :class:`QueueError` naming the field, e.g.
``queues.long.share: must be a number in (0, 1], got 1.5``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from policies.preemption.settings import (
    PAPER_FOOTPRINT,
    PAPER_GRACEFUL_STEP,
    Mode,
    PreemptionSettings,
)
from policies.scheduling.resources import Resources

__all__ = [
    "DEFAULT_QUEUE",
    "MAX_QUEUES",
    "QueueConfig",
    "QueueError",
    "QueueSpec",
    "parse_queue_config",
    "single_queue",
]

DEFAULT_QUEUE: Final = "default"
"""The one queue of an RM started without a queue file."""

MAX_QUEUES: Final = 64
"""More queues than this is a mistake, not a policy: every pass reads each queue."""

PAPER_RESUME_AFTER_OFFERS: Final = 3
"""D of the evaluation (Sec. 5.3)."""

_SHARE_SLACK: Final = 1e-9  # shares written as decimals (0.95 + 0.05) may sum to 1 + residue

_QUEUE_NAME_MAX: Final = 64


class QueueError(ValueError):
    """A queue file's first problem, as ``field: problem`` on one line."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class QueueSpec:
    """One queue: its fair share, its cap, and how its containers are preempted.

    ``mode`` None means its containers are never preempted (``mode: none``).
    ``max_suspended_s`` None means no limit."""

    name: str
    share: float
    mode: Mode | None = Mode.GRACEFUL
    max_share: float = 1.0
    graceful_step: Resources = PAPER_GRACEFUL_STEP
    minimal_footprint: Resources = PAPER_FOOTPRINT
    resume_after_offers: int = PAPER_RESUME_AFTER_OFFERS
    max_suspended_s: float | None = None

    @property
    def settings(self) -> PreemptionSettings:
        """The knobs Algorithm 2 and delayed resumption read for this queue's containers."""
        return PreemptionSettings(
            minimal_footprint=self.minimal_footprint,
            graceful_step=self.graceful_step,
            resume_after_offers=self.resume_after_offers,
        )

    @property
    def mode_name(self) -> str:
        return "none" if self.mode is None else self.mode.value


@dataclass(frozen=True)
class QueueConfig:
    """The cluster's queues, in the order the file lists them, and the default queue."""

    queues: tuple[QueueSpec, ...]
    default: str

    def __post_init__(self) -> None:
        names = [q.name for q in self.queues]
        if not names or len(set(names)) != len(names) or self.default not in names:
            raise ValueError("QueueConfig: distinct queue names, and the default among them")

    def get(self, name: str) -> QueueSpec | None:
        for queue in self.queues:
            if queue.name == name:
                return queue
        return None

    def queue_of(self, requested: str) -> str:
        """The queue a job asking for ``requested`` (empty: none) goes to.  Raises
        QueueError(``queue``) naming the queues when there is no such queue."""
        if not requested:
            return self.default
        if self.get(requested) is None:
            names = ", ".join(q.name for q in self.queues)
            raise QueueError("queue", f"unknown queue {requested!r} (queues: {names})")
        return requested

    @property
    def preempts(self) -> bool:
        """Can any container ever be preempted under these queues?"""
        return len(self.queues) > 1 and any(q.mode is not None for q in self.queues)

    @property
    def caps(self) -> bool:
        """Does any queue have a cap below the whole cluster?"""
        return any(q.max_share < 1.0 for q in self.queues)


def single_queue() -> QueueConfig:
    """The RM's queues without a queue file: one queue, the whole cluster, no preemption."""
    return QueueConfig((QueueSpec(DEFAULT_QUEUE, 1.0, mode=None),), DEFAULT_QUEUE)


# ------------------------------------------------------------------------------ parsing

_TOP_FIELDS: Final = ("queues", "default")
_QUEUE_FIELDS: Final = (
    "share",
    "max_share",
    "mode",
    "graceful_step",
    "minimal_footprint",
    "resume_after_offers",
    "max_suspended_s",
)
_MODES: Final = {"kill": Mode.KILL, "immediate": Mode.IMMEDIATE, "graceful": Mode.GRACEFUL}


def parse_queue_config(document: object) -> QueueConfig:
    """Validate a queue file's document (module docstring); raise QueueError on the first
    problem."""
    top = _mapping(document, "queue file")
    _known_keys(top, "", _TOP_FIELDS)
    if "queues" not in top:
        raise QueueError("queues", "is required")
    listed = _mapping(top["queues"], "queues")
    if not listed:
        raise QueueError("queues", "must name at least one queue")
    if len(listed) > MAX_QUEUES:
        raise QueueError("queues", f"lists {len(listed)} queues; at most {MAX_QUEUES}")
    queues = tuple(_queue(name, body) for name, body in listed.items())
    total = math.fsum(q.share for q in queues)
    if total > 1.0 + _SHARE_SLACK:
        raise QueueError("queues", f"shares add up to {total:g}; at most 1")
    default = top.get("default", queues[0].name)
    if not isinstance(default, str) or default not in listed:
        names = ", ".join(q.name for q in queues)
        raise QueueError("default", f"must name one of the queues ({names}), got {default!r}")
    return QueueConfig(queues, default)


def _queue(name: object, body: object) -> QueueSpec:
    if not isinstance(name, str) or not _valid_name(name):
        raise QueueError(
            f"queues.{name}",
            f"a queue name is 1 to {_QUEUE_NAME_MAX} letters, digits, '-', '_' or '.', "
            "starting with a letter or digit",
        )
    where = f"queues.{name}"
    fields = _mapping(body, where)
    _known_keys(fields, where, _QUEUE_FIELDS)
    if "share" not in fields:
        raise QueueError(f"{where}.share", "is required")
    share = _fraction(fields["share"], f"{where}.share", zero_ok=True)
    max_share = _fraction(fields.get("max_share", 1.0), f"{where}.max_share", zero_ok=False)
    if max_share < share:
        raise QueueError(f"{where}.max_share", f"is {max_share:g}, below its share {share:g}")
    mode_text = fields.get("mode", Mode.GRACEFUL.value)
    if mode_text != "none" and mode_text not in _MODES:
        raise QueueError(
            f"{where}.mode", f"must be kill, immediate, graceful or none, got {mode_text!r}"
        )
    footprint = _resources(
        fields.get("minimal_footprint"), f"{where}.minimal_footprint", PAPER_FOOTPRINT
    )
    step = _resources(fields.get("graceful_step"), f"{where}.graceful_step", PAPER_GRACEFUL_STEP)
    if step.cpu <= 0 and step.memory_mb <= 0:
        raise QueueError(f"{where}.graceful_step", "must take some cpu or memory per round")
    offers = fields.get("resume_after_offers", PAPER_RESUME_AFTER_OFFERS)
    if isinstance(offers, bool) or not isinstance(offers, int) or not 0 <= offers <= 1000:
        raise QueueError(
            f"{where}.resume_after_offers", f"must be a whole number 0..1000, got {offers!r}"
        )
    limit = fields.get("max_suspended_s")
    if limit is not None:
        limit = _number(limit, f"{where}.max_suspended_s")
        if limit <= 0:
            raise QueueError(f"{where}.max_suspended_s", f"must be > 0 seconds, got {limit:g}")
    return QueueSpec(
        name=name,
        share=share,
        mode=None if mode_text == "none" else _MODES[str(mode_text)],
        max_share=max_share,
        graceful_step=step,
        minimal_footprint=footprint,
        resume_after_offers=offers,
        max_suspended_s=limit,
    )


def _valid_name(name: str) -> bool:
    return (
        0 < len(name) <= _QUEUE_NAME_MAX
        and name[0].isascii()
        and name[0].isalnum()
        and all(c.isascii() and (c.isalnum() or c in "-_.") for c in name)
    )


def _mapping(value: object, field: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise QueueError(field, f"must be a mapping, got {_kind(value)}")
    return value


def _known_keys(fields: Mapping[str, object], where: str, allowed: tuple[str, ...]) -> None:
    for key in fields:
        if key not in allowed:
            name = f"{where}.{key}" if where else str(key)
            raise QueueError(name, f"unknown field (allowed: {', '.join(allowed)})")


def _number(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise QueueError(field, f"must be a number, got {value!r}")
    return float(value)


def _fraction(value: object, field: str, *, zero_ok: bool) -> float:
    number = _number(value, field)
    low_ok = number >= 0 if zero_ok else number > 0
    if not (low_ok and number <= 1):
        interval = "[0, 1]" if zero_ok else "(0, 1]"
        raise QueueError(field, f"must be a number in {interval}, got {number:g}")
    return number


def _resources(value: object, field: str, default: Resources) -> Resources:
    if value is None:
        return default
    fields = _mapping(value, field)
    _known_keys(fields, field, ("cpu", "memory_mb"))
    cpu = _number(fields.get("cpu", default.cpu), f"{field}.cpu")
    memory = fields.get("memory_mb", default.memory_mb)
    if isinstance(memory, bool) or not isinstance(memory, int):
        raise QueueError(f"{field}.memory_mb", f"must be a whole number of MiB, got {memory!r}")
    if cpu < 0 or memory < 0:
        raise QueueError(field, f"must not be negative, got cpu {cpu:g}, memory_mb {memory}")
    return Resources(cpu=cpu, memory_mb=memory)


def _kind(value: object) -> str:
    return "nothing" if value is None else type(value).__name__
