"""The plan's speculative attempts (ROSE Alg. 5 and Sec. 6.3), a part of
:class:`job_master.plan.JobPlan` kept in a module of its own.

:mod:`job_master.speculation` keeps the bookkeeping (which ready tasks nothing serves, how long
each phase has starved, refusals, the phases' task times); this mixin places, reschedules and
follows the attempts, and gives a granted container to the task Alg. 5 says
(:meth:`SpeculativeAttempts._serve`).  It reads no clock: times are the plan's ``now``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from job_master.idle import IdleContainers
from job_master.plan_model import (
    Attempt,
    AttemptKind,
    Container,
    Launch,
    PhaseState,
    SpeculativeLaunch,
    SpeculativeRecord,
    Step,
    StopAttempt,
    Task,
    Upgrade,
)
from job_master.speculation import Candidate, SpeculationBook
from policies.oversubscription.task_upgrade import (
    SpeculativeState,
    SpeculativeTask,
    UpgradeAction,
    on_resource_approved,
    reschedule_timed_out,
)
from policies.scheduling.lifecycle import TaskState


class SpeculativeAttempts:
    """The speculative half of :class:`job_master.plan.JobPlan` (see the module docstring)."""

    # The plan's state and steps this part works with (JobPlan sets and defines them).
    tasks: dict[str, Task]
    containers: dict[str, Container]
    finished_containers: list[str]
    now: float
    speculation: SpeculationBook | None
    _phases: dict[str, PhaseState]
    _idle: IdleContainers
    _stops: list[StopAttempt]
    _upgrades: list[Upgrade]
    _queued: dict[tuple[str, int], None]
    _speculative: dict[tuple[str, int], Attempt]
    _records: dict[tuple[str, int], SpeculativeRecord]
    _records_changed: dict[tuple[str, int], None]
    _speculating_on: dict[str, dict[str, None]]

    if TYPE_CHECKING:

        def _move(self, task: Task, step: Step) -> None: ...
        def _launch(self, task: Task, container: Container, kind: AttemptKind) -> Launch: ...
        def _stop_attempt(self, task: Task, attempt: Attempt, reason: str) -> None: ...
        def _end_attempt(self, task: Task, attempt: Attempt, *, stopping: bool = False) -> None: ...
        def _attempt_ended(
            self, task: Task, attempt: Attempt, problem: str, *, preempted: bool
        ) -> None: ...
        def _succeeded(self, task: Task, winner: Attempt) -> None: ...
        def _unkeep(self, container: Container) -> None: ...
        def _next_ready(self, phase_name: str) -> Task | None: ...
        def _set_idle(self, container: Container) -> None: ...
        def _make_ready(self, task: Task) -> None: ...

    def _serve(self, container: Container) -> Launch | bool:
        """Give an idle container work: a launch, True when it was used otherwise (an upgrade
        in place, a reserve), False when its phase has no ready task (Alg. 5 lines 5-19)."""
        book = self.speculation
        if book is not None:
            here = self._speculating_here(container)
            if here is not None:
                self._unkeep(container)
                self._upgrade(here, container)
                return True
        # A ready task nothing serves yet goes first: a speculative attempt elsewhere is kept
        # going while the phase has such tasks (Alg. 5 applies to the requests it serves).
        task = self._next_bare(container.phase) or self._next_ready(container.phase)
        if task is None:
            return False
        self._unkeep(container)
        if book is not None and task.speculative is not None:
            attempt = task.attempts[task.speculative]
            action = on_resource_approved(
                self._as_policy_task(task, attempt), container.node_id, book.config
            )
            if action is UpgradeAction.UPGRADE_IN_PLACE:
                self._upgrade(task, container)
                return True
            if action is UpgradeAction.KEEP_AND_RESERVE:  # lines 12-14
                book.counts.kept += 1
                self._note(attempt, "kept", f"allocation {container.allocation_id} in reserve")
                container.task_id = task.task_id
                self._idle.discard(container.allocation_id)
                task.allocation_id = container.allocation_id
                self._move(task, Step.COVERED)
                return True
            if action is UpgradeAction.CANCEL_AND_START_REGULAR:  # lines 7-9
                book.counts.cancelled += 1
                self._note(attempt, "cancelled", "a container was granted")
                why = "a container was granted: cancelled from its queue"
            else:  # lines 15-17
                book.counts.killed += 1
                self._note(attempt, "killed", "a container was granted, its progress below tau")
                why = "a container was granted: killed at little progress"
            self._stop_attempt(task, attempt, why)
        return self._launch(task, container, AttemptKind.REGULAR)

    def _next_bare(self, phase: str) -> Task | None:
        """The phase's ready task without a speculative attempt that has waited longest."""
        if self.speculation is None:
            return None
        bare = self.speculation.bare.get(phase)
        return self.tasks[next(iter(bare))] if bare else None

    def _speculating_here(self, container: Container) -> Task | None:
        """A ready task of the container's phase whose speculative attempt runs on its node."""
        for task_id in self._speculating_on.get(container.node_id, {}):
            task = self.tasks[task_id]
            if task.phase == container.phase and task.step is Step.READY:
                return task
        return None

    def _as_policy_task(self, task: Task, attempt: Attempt) -> SpeculativeTask:
        assert self.speculation is not None
        if attempt.running:
            state = SpeculativeState.RUNNING
            started = attempt.started_at if attempt.started_at is not None else self.now
            progress = self.speculation.progress(task.phase, self.now - started)
        else:
            state = SpeculativeState.QUEUED
            progress = 0.0
        return SpeculativeTask(task.task_id, state, attempt.node_id, progress)

    def _upgrade(self, task: Task, container: Container) -> None:
        """Alg. 5 line 11: the running speculative attempt becomes the task's regular one."""
        assert self.speculation is not None and task.speculative is not None
        attempt = task.attempts[task.speculative]
        self._speculation_over(task, attempt)
        attempt.kind = AttemptKind.REGULAR
        attempt.allocation_id = container.allocation_id
        container.task_id = task.task_id
        self._idle.discard(container.allocation_id)
        task.allocation_id = container.allocation_id
        self._move(task, Step.LAUNCHING)
        self.speculation.counts.upgraded += 1
        self._note(attempt, "upgraded", f"to allocation {container.allocation_id}")
        self._upgrades.append(Upgrade(task.task_id, attempt.number, container))

    def _speculate(
        self, candidates: Sequence[Candidate], rng: np.random.Generator
    ) -> list[SpeculativeLaunch]:
        """Sec. 6.3 rescheduling, then Alg. 5 lines 1-3: one ready task per usable candidate,
        for the phases that have waited ``after_s`` for containers."""
        book = self.speculation
        assert book is not None
        placed = self._reschedule(candidates, rng)
        starving = book.starving(self.now)
        if not starving:
            return placed
        usable = iter(book.usable(candidates, self.now, rng))
        room = book.room()
        for phase in starving:
            for task_id in list(book.bare[phase]):
                node = next(usable, None) if room > 0 else None
                if node is None:
                    return placed
                placed.append(self._dispatch(self.tasks[task_id], node))
                room -= 1
        return placed

    def _reschedule(
        self, candidates: Sequence[Candidate], rng: np.random.Generator
    ) -> list[SpeculativeLaunch]:
        """Sec. 6.3: an attempt queued longer than the time-out moves to another candidate."""
        assert self.speculation is not None
        queued = [
            SpeculativeTask(
                task_id, SpeculativeState.QUEUED, attempt.node_id, 0.0, attempt.queued_at
            )
            for task_id, attempt in self._queued_attempts()
            if attempt.queued_at is not None
        ]
        if not queued:
            return []
        by_node = {c.node_id: c for c in candidates}
        moves = reschedule_timed_out(queued, list(by_node), self.now, rng, self.speculation.config)
        placed = []
        for move in moves:
            task = self.tasks[move.task_id]
            if task.speculative is None:
                continue
            attempt = task.attempts[task.speculative]
            waited = self.now - (attempt.queued_at or self.now)
            self._note(attempt, "rescheduled", f"after {waited:.0f} s in its queue")
            self._stop_attempt(task, attempt, f"rescheduled after {waited:.0f} s in its queue")
            self.speculation.counts.rescheduled += 1
            placed.append(self._dispatch(task, by_node[move.destination]))
        return placed

    def _queued_attempts(self) -> Iterator[tuple[str, Attempt]]:
        for key in list(self._queued):
            task_id, number = key
            attempt = self.tasks[task_id].attempts.get(number)
            if attempt is None or attempt.running:
                del self._queued[key]
                continue
            yield task_id, attempt

    def _dispatch(self, task: Task, node: Candidate) -> SpeculativeLaunch:
        assert self.speculation is not None
        task.attempt += 1
        attempt = Attempt(
            task.task_id,
            task.attempt,
            AttemptKind.SPECULATIVE,
            "",
            node_id=node.node_id,
            node_address=node.address,
        )
        task.attempts[attempt.number] = attempt
        task.speculative = attempt.number
        self._speculative[(task.task_id, attempt.number)] = attempt
        self.speculation.task_not_bare(task.phase, task.task_id)
        self.speculation.live += 1
        self.speculation.counts.dispatched += 1
        self._note(attempt, "placed")
        return SpeculativeLaunch(
            task.task_id,
            attempt.number,
            node.node_id,
            node.address,
            self._phases[task.phase].spec,
        )

    def _note(self, attempt: Attempt, outcome: str, message: str = "") -> None:
        key = (attempt.task_id, attempt.number)
        self._records[key] = SpeculativeRecord(
            attempt.task_id, attempt.number, attempt.node_id, outcome, message
        )
        self._records_changed[key] = None

    def speculative_changes(self) -> list[SpeculativeRecord]:
        """The speculative attempts whose outcome changed since the last call (for the RM)."""
        changed = [self._records[key] for key in self._records_changed]
        self._records_changed.clear()
        return changed

    def speculative_records(self) -> list[SpeculativeRecord]:
        """Every speculative attempt of the job so far, with its latest outcome."""
        return list(self._records.values())

    def speculation_ended(self, why: str) -> None:
        """The job is over: its speculative attempts still live are stopped (by the caller)."""
        for attempt in self._speculative.values():
            self._note(attempt, "killed", why)

    def is_speculative(self, task_id: str, attempt: int) -> bool:
        """Whether that attempt is a live speculative one."""
        return (task_id, attempt) in self._speculative

    def speculative_attempts(self) -> list[Attempt]:
        """Every live speculative attempt (queued or running on its node)."""
        return list(self._speculative.values())

    def on_speculative_answer(self, task_id: str, attempt: int, accepted: bool) -> None:
        """The node's queue took the attempt, or refused it (full: the attempt is gone, and the
        node gets no more for a while)."""
        task = self.tasks.get(task_id)
        live = task.attempts.get(attempt) if task is not None else None
        if task is None or live is None or live.kind is not AttemptKind.SPECULATIVE:
            return
        assert self.speculation is not None
        if accepted:
            if live.queued_at is None and not live.running:
                live.queued_at = self.now
                self._queued[(task_id, attempt)] = None
                self._note(live, "queued")
            return
        self.speculation.refused(live.node_id, self.now)
        self._note(live, "refused")
        self._end_attempt(task, live)

    def on_speculative_status(
        self,
        task_id: str,
        attempt: int,
        state: TaskState,
        *,
        evicted: bool = False,
        message: str = "",
    ) -> None:
        """What the node's agent says of a speculative attempt (its ListSpeculative); LOST when
        the node no longer knows it."""
        task = self.tasks.get(task_id)
        live = task.attempts.get(attempt) if task is not None else None
        if task is None or live is None or live.kind is not AttemptKind.SPECULATIVE:
            return
        assert self.speculation is not None
        counts = self.speculation.counts
        if state is TaskState.PENDING:
            return
        if state in (TaskState.RUNNING, TaskState.SUSPENDED):
            if not live.running:
                live.running = True
                live.started_at = self.now
                counts.started += 1
                self._note(live, "running")
            if task.step is Step.READY:
                self._speculating_on.setdefault(live.node_id, {})[task_id] = None
            return
        if state is TaskState.SUCCEEDED:
            counts.succeeded += 1
            self._note(live, "succeeded")
            self._succeeded(task, live)
            return
        self._note(live, "evicted" if evicted else state.value, message)
        if evicted:
            counts.evicted += 1
        self._attempt_ended(task, live, message or state.value, preempted=True)

    def on_upgrade_failed(self, task_id: str, attempt: int, problem: str) -> None:
        """The agent could not upgrade the attempt in place: it is stopped there, the container
        goes back, and the task is ready again (no retry used: it did nothing wrong)."""
        task = self.tasks.get(task_id)
        live = task.attempts.get(attempt) if task is not None else None
        if task is None or live is None or live.kind is not AttemptKind.REGULAR:
            return
        container = self.containers.get(live.allocation_id)
        if container is not None:
            self._stops.append(
                StopAttempt(
                    task_id,
                    attempt,
                    "",
                    container.node_address,
                    f"upgrade failed: {problem}",
                )
            )
        self._attempt_ended(task, live, f"upgrade failed: {problem}", preempted=True)

    def _speculation_over(self, task: Task, attempt: Attempt) -> None:
        """The task's speculative attempt is no longer one (ended, or upgraded)."""
        assert self.speculation is not None
        if task.speculative == attempt.number:
            task.speculative = None
            self.speculation.live -= 1
        self._speculative.pop((task.task_id, attempt.number), None)
        self._queued.pop((task.task_id, attempt.number), None)
        on_node = self._speculating_on.get(attempt.node_id)
        if on_node is not None:
            on_node.pop(task.task_id, None)
            if not on_node:
                del self._speculating_on[attempt.node_id]

    def _release_reserve(self, task: Task) -> None:
        """A covered task's reserved container goes back to the RM."""
        container = self.containers.get(task.allocation_id or "")
        task.allocation_id = None
        if container is not None and container.task_id == task.task_id:
            del self.containers[container.allocation_id]
            self.finished_containers.append(container.allocation_id)

    def _uncover(self, task: Task) -> None:
        """A covered task's speculative attempt ended badly: the task is ready again and its
        reserved container idle, for the phase's next ready task (this one, or an equal)."""
        container = self.containers.get(task.allocation_id or "")
        task.allocation_id = None
        self._make_ready(task)
        if container is not None and container.task_id == task.task_id:
            container.task_id = None
            self._set_idle(container)
