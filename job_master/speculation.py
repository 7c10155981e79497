"""Speculative tasks, as the job master keeps them (ROSE Alg. 5 and Sec. 6.3).

A job whose spec has a ``speculative`` block does not only wait for the RM: when a phase's
asks have gone unfulfilled for ``after_s``, its job master puts ready tasks straight into the
queues of node agents chosen from its candidate replica (Alg. 5 lines 1-3), one task per
candidate per round, round-robin across rounds from a random first place on the replica
(Sec. 3.3: "in a random or round-robin way"; every job master starting at the head of the same
list would herd them all onto its first machines).  A node that refuses (its queue is full) is left
out for :data:`REFUSAL_BACKOFF_S`.  A task waiting in a node's queue longer than
``queue_timeout_s`` is moved to another candidate (Sec. 6.3,
:func:`policies.oversubscription.task_upgrade.reschedule_timed_out`).

When a container is granted for a phase (Alg. 5 lines 5-19,
:func:`policies.oversubscription.task_upgrade.on_resource_approved`), the plan first looks for a
ready task of the phase whose speculative attempt runs on the container's node and upgrades it
in place; otherwise the phase's next ready task takes the container, and its speculative
attempt, if any, is cancelled (queued), kept with the container in reserve (running, progress
over tau) or killed (running, progress at most tau).  Which task a container serves is not in
the paper, which pairs each request with its own speculative task; preferring the in-place
upgrade is what it calls ideal ("no additional initialization time").

A task's *progress* (the paper's, for tau) is how long its speculative attempt has run over the
mean duration of the phase's finished tasks; before any has finished it is 0, so Alg. 5 kills
and restarts on the container (a departure would need an estimate the job does not have).

This module keeps the bookkeeping and answers questions; :class:`job_master.plan.JobPlan` owns
the attempts and calls it.  It reads no clock: times are the plan's ``now``.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from policies.oversubscription.config import OversubscriptionConfig
from policies.scheduling.speculative_spec import SpeculativeSpec

REFUSAL_BACKOFF_S = 5.0
"""A node that refused a speculative task (queue full) gets none for this long."""


@dataclass(frozen=True)
class Candidate:
    """A machine of the candidate list, with its agent's address."""

    node_id: str
    address: str


@dataclass
class SpeculationCounts:
    """What the job's speculation did (``sluice job`` shows it)."""

    dispatched: int = 0
    refused: int = 0
    started: int = 0
    succeeded: int = 0
    evicted: int = 0
    rescheduled: int = 0
    upgraded: int = 0  # in place, Alg. 5 line 11
    kept: int = 0  # kept with a reserved container, line 13
    cancelled: int = 0  # queued when a container came, line 8
    killed: int = 0  # running, progress at most tau, line 16


@dataclass
class _Durations:
    total: float = 0.0
    count: int = 0


@dataclass
class SpeculationBook:
    """See the module docstring."""

    spec: SpeculativeSpec
    # READY tasks without a live speculative attempt, per phase, in the order they became so.
    bare: dict[str, dict[str, None]] = field(default_factory=dict)
    # When each phase with ready tasks last got a container (or first had ready tasks).
    starving_since: dict[str, float] = field(default_factory=dict)
    refused_until: dict[str, float] = field(default_factory=dict)
    durations: dict[str, _Durations] = field(default_factory=dict)
    counts: SpeculationCounts = field(default_factory=SpeculationCounts)
    live: int = 0  # live speculative attempts
    _cursor: int | None = None  # None: not drawn yet

    @functools.cached_property
    def config(self) -> OversubscriptionConfig:
        """The pure policy's view of the spec's knobs (tau, the time-out)."""
        return OversubscriptionConfig(
            upgrade_progress_threshold=self.spec.upgrade_progress,
            queue_timeout_s=self.spec.queue_timeout_s,
        )

    # ------------------------------------------------------------------ the plan's events

    def task_ready(self, phase: str, task_id: str, now: float) -> None:
        self.bare.setdefault(phase, {})[task_id] = None
        self.starving_since.setdefault(phase, now)

    def task_not_bare(self, phase: str, task_id: str) -> None:
        tasks = self.bare.get(phase)
        if tasks is not None:
            tasks.pop(task_id, None)

    def phase_granted(self, phase: str, now: float) -> None:
        """A container came for the phase: its asks are being fulfilled."""
        if phase in self.starving_since:
            self.starving_since[phase] = now

    def phase_satisfied(self, phase: str) -> None:
        """The phase has no ready task left."""
        self.starving_since.pop(phase, None)

    def refused(self, node_id: str, now: float) -> None:
        self.counts.refused += 1
        self.refused_until[node_id] = now + REFUSAL_BACKOFF_S

    def finished(self, phase: str, seconds: float) -> None:
        """A task of the phase succeeded after running ``seconds``."""
        durations = self.durations.setdefault(phase, _Durations())
        durations.total += seconds
        durations.count += 1

    # ------------------------------------------------------------------ questions

    def starving(self, now: float) -> list[str]:
        """Phases whose ready tasks have waited ``after_s`` for a container (Alg. 5 line 1)."""
        return [
            phase
            for phase, since in self.starving_since.items()
            if now - since >= self.spec.after_s and self.bare.get(phase)
        ]

    def next_dispatch(self) -> float:
        """When a phase will have starved ``after_s`` (``math.inf``: none has ready tasks
        without a speculative attempt)."""
        return min(
            (
                since + self.spec.after_s
                for phase, since in self.starving_since.items()
                if self.bare.get(phase)
            ),
            default=math.inf,
        )

    def room(self) -> int:
        """How many more speculative attempts may be live (``max_tasks``)."""
        limit = self.spec.max_tasks
        return sys.maxsize if limit is None else max(0, limit - self.live)

    def usable(
        self, candidates: Sequence[Candidate], now: float, rng: np.random.Generator
    ) -> list[Candidate]:
        """The candidates to use this round, round-robin from where the last round stopped,
        without the nodes backing off after a refusal.  The first round starts at a random
        place on the list: every job master holds the same list, and starting all of them at
        its head would herd their tasks onto its first few machines."""
        if not candidates:
            return []
        if self._cursor is None:
            self._cursor = int(rng.integers(len(candidates)))
        start = self._cursor % len(candidates)
        rotated = [*candidates[start:], *candidates[:start]]
        self._cursor = start + 1
        return [c for c in rotated if self.refused_until.get(c.node_id, 0.0) <= now]

    def progress(self, phase: str, running_for: float) -> float:
        """Alg. 5 line 12's progress: time run over the phase's mean task time (0 unknown)."""
        durations = self.durations.get(phase)
        if durations is None or durations.count == 0 or durations.total <= 0:
            return 0.0
        return min(1.0, max(0.0, running_for / (durations.total / durations.count)))
