"""A job's DAG of phases as a state machine: the job master's deterministic core.

:class:`JobPlan` holds every task's lifecycle and every container the job holds; it consumes
observations (containers granted or lost, task events) and :meth:`JobPlan.decide` answers what to
do next: which task to launch in which container, which containers to give back, and how many
more to ask for per phase.  It does no I/O and reads no clock, so it is unit-tested directly and
a simulator can drive it.

Rules:
* Barrier: a phase's tasks become ready only when every task of every phase in its ``after``
  list has succeeded.
* A container is granted for one phase and runs one task attempt; it is given back as soon as
  that attempt ends (or at once, if its phase no longer needs it), so the RM's priority order
  decides who runs next.  Keeping slots across tasks and barriers is a policy of its own
  (speculative slot reservation), not a side effect of reuse.
* A failed, killed or lost attempt is retried (attempt + 1) while the task has failed at most
  ``max_retries`` times; one more failure fails the job.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from policies.scheduling.asks import PhaseAsk
from policies.scheduling.jobspec import JobSpec, PhaseSpec
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.progress import PhaseProgress
from policies.scheduling.resources import Resources


class Step(enum.Enum):
    """Where a task is in the job master's view (the lifecycle of its current attempt aside)."""

    WAITING = "waiting"  # its phase's barrier has not been passed
    READY = "ready"  # wants a container
    LAUNCHING = "launching"  # sent to a node agent
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    GAVE_UP = "gave_up"  # failed more than max_retries times


@dataclass
class Task:
    task_id: str
    phase: str
    index: int
    step: Step = Step.WAITING
    attempt: int = 0  # 0 until first launched
    failures: int = 0
    allocation_id: str | None = None
    last_problem: str = ""


@dataclass
class Container:
    allocation_id: str
    phase: str
    node_id: str
    node_address: str
    resources: Resources
    task_id: str | None = None  # the task running in it, if any


@dataclass(frozen=True)
class Launch:
    task_id: str
    attempt: int
    container: Container
    phase: PhaseSpec


@dataclass(frozen=True)
class AttemptRecord:
    """One task attempt as the RM recorded it (what an earlier job master attempt launched)."""

    task_id: str
    attempt: int
    state: TaskState
    allocation_id: str
    message: str = ""


@dataclass(frozen=True)
class Decisions:
    launches: tuple[Launch, ...] = ()
    releases: tuple[str, ...] = ()
    asks: tuple[PhaseAsk, ...] = ()


@dataclass
class JobPlan:
    spec: JobSpec
    tasks: dict[str, Task] = field(default_factory=dict)
    containers: dict[str, Container] = field(default_factory=dict)
    failed_attempts: dict[str, int] = field(default_factory=dict)  # per phase
    finished_containers: list[str] = field(default_factory=list)  # to give back next round
    outcome: tuple[JobState, str] | None = None

    def __post_init__(self) -> None:
        for phase in self.spec.phases:
            for index in range(phase.tasks):
                task_id = f"{phase.name}-{index}"
                self.tasks[task_id] = Task(task_id, phase.name, index)
        self._open_barriers()

    # ------------------------------------------------------------------ observations

    def on_granted(self, container: Container) -> None:
        """A container arrived (or was re-announced after an RM restart)."""
        self.containers.setdefault(container.allocation_id, container)

    def on_allocation_lost(self, allocation_id: str) -> None:
        container = self.containers.pop(allocation_id, None)
        if container is not None and container.task_id is not None:
            task = self.tasks[container.task_id]
            self._attempt_failed(task, "its node was lost")

    def on_task_event(
        self, task_id: str, attempt: int, state: TaskState, exit_code: int, message: str
    ) -> None:
        """An agent-observed state of one attempt; stale attempts are ignored."""
        task = self.tasks.get(task_id)
        if (
            task is None
            or attempt != task.attempt
            or task.step not in (Step.LAUNCHING, Step.RUNNING)
        ):
            return
        if state in (TaskState.RUNNING, TaskState.SUSPENDED):
            task.step = Step.RUNNING
        elif state is TaskState.SUCCEEDED:
            task.step = Step.SUCCEEDED
            self._free_container(task)
            self._open_barriers()
            self._check_done()
        elif state.is_final:
            problem = message or f"{state.value} (exit code {exit_code})"
            self._attempt_failed(task, problem)

    def on_launch_failed(self, task_id: str, attempt: int, problem: str) -> None:
        task = self.tasks[task_id]
        if task.attempt == attempt and task.step is Step.LAUNCHING:
            self._attempt_failed(task, f"launch failed: {problem}")

    def adopt(self, history: Iterable[AttemptRecord]) -> None:
        """Take the job over from an earlier job master attempt.

        ``history`` is every task attempt the RM recorded, in sequence order, and the containers
        the job holds have been announced with :meth:`on_granted`.  A task that succeeded once
        stays done; a live attempt in a held container keeps running there; every failed
        attempt counts against ``max_retries`` as before; attempt numbers continue, so no attempt
        is ever launched twice under one name."""
        latest: dict[str, AttemptRecord] = {}
        succeeded: set[str] = set()
        for record in history:
            task = self.tasks.get(record.task_id)
            if task is None:
                continue
            task.attempt = max(task.attempt, record.attempt)
            if record.state is TaskState.SUCCEEDED:
                succeeded.add(task.task_id)
            elif record.state.is_final:
                task.failures += 1
                task.last_problem = record.message or record.state.value
                self.failed_attempts[task.phase] = self.failed_attempts.get(task.phase, 0) + 1
            if record.attempt >= latest.get(task.task_id, record).attempt:
                latest[task.task_id] = record
        for task_id, record in latest.items():
            task = self.tasks[task_id]
            container = self.containers.get(record.allocation_id)
            if task_id in succeeded:
                task.step = Step.SUCCEEDED
            elif not record.state.is_final and container is not None:
                task.step = Step.RUNNING
                task.allocation_id = container.allocation_id
                container.task_id = task_id
            elif task.failures > self.spec.max_retries:
                task.step = Step.GAVE_UP
                if self.outcome is None:
                    self.outcome = (
                        JobState.FAILED,
                        f"task {task_id} failed {task.failures} times; last: {task.last_problem}",
                    )
        self._open_barriers()
        self._check_done()

    def kill(self, reason: str) -> None:
        if self.outcome is None:
            self.outcome = (JobState.KILLED, reason)

    # ------------------------------------------------------------------ decisions

    def decide(self) -> Decisions:
        """Assign ready tasks to idle containers of their phase, release idle containers nobody
        needs, and ask for what is still missing.  Marks launched tasks LAUNCHING."""
        if self.outcome is not None:
            # Everything goes back; the map is kept so the caller can still stop what runs.
            return Decisions(releases=(*self.finished_containers, *self.containers))
        launches: list[Launch] = []
        ready_by_phase: dict[str, list[Task]] = {}
        for task in self.tasks.values():
            if task.step is Step.READY:
                ready_by_phase.setdefault(task.phase, []).append(task)
        for container in sorted(self.containers.values(), key=lambda c: c.allocation_id):
            if container.task_id is not None:
                continue
            queue = ready_by_phase.get(container.phase)
            if not queue:
                continue
            task = queue.pop(0)
            task.attempt += 1
            task.step = Step.LAUNCHING
            task.allocation_id = container.allocation_id
            container.task_id = task.task_id
            launches.append(
                Launch(task.task_id, task.attempt, container, self.spec.phase(task.phase))
            )
        releases = [
            c.allocation_id
            for c in self.containers.values()
            if c.task_id is None and not ready_by_phase.get(c.phase)
        ]
        for allocation_id in releases:
            del self.containers[allocation_id]
        releases = [*self.finished_containers, *releases]
        self.finished_containers.clear()
        asks = tuple(
            PhaseAsk(phase, len(tasks), self.spec.phase(phase).resources)
            for phase, tasks in ready_by_phase.items()
            if tasks
        )
        return Decisions(tuple(launches), tuple(releases), asks)

    def progress(self) -> list[PhaseProgress]:
        counts = []
        for phase in self.spec.phases:
            tasks = [t for t in self.tasks.values() if t.phase == phase.name]
            counts.append(
                PhaseProgress(
                    name=phase.name,
                    tasks=phase.tasks,
                    pending=sum(1 for t in tasks if t.step in (Step.WAITING, Step.READY)),
                    running=sum(1 for t in tasks if t.step in (Step.LAUNCHING, Step.RUNNING)),
                    succeeded=sum(1 for t in tasks if t.step is Step.SUCCEEDED),
                    failed=self.failed_attempts.get(phase.name, 0),
                    dropped=sum(1 for t in tasks if t.step is Step.GAVE_UP),
                )
            )
        return counts

    def running_tasks(self) -> Iterable[Task]:
        return (t for t in self.tasks.values() if t.step in (Step.LAUNCHING, Step.RUNNING))

    # ------------------------------------------------------------------ internals

    def _attempt_failed(self, task: Task, problem: str) -> None:
        self._free_container(task)
        task.failures += 1
        task.last_problem = problem
        self.failed_attempts[task.phase] = self.failed_attempts.get(task.phase, 0) + 1
        if task.failures > self.spec.max_retries:
            task.step = Step.GAVE_UP
            if self.outcome is None:  # the job's first ending stands (a kill, an earlier failure)
                self.outcome = (
                    JobState.FAILED,
                    f"task {task.task_id} failed {task.failures} times; last: {problem}",
                )
        else:
            task.step = Step.READY

    def _free_container(self, task: Task) -> None:
        """The task's attempt ended: its container goes back to the RM at the next round."""
        if task.allocation_id is not None:
            container = self.containers.get(task.allocation_id)
            if container is not None and container.task_id == task.task_id:
                del self.containers[task.allocation_id]
                self.finished_containers.append(task.allocation_id)
        task.allocation_id = None

    def _open_barriers(self) -> None:
        done = {
            phase.name
            for phase in self.spec.phases
            if all(t.step is Step.SUCCEEDED for t in self.tasks.values() if t.phase == phase.name)
        }
        for phase in self.spec.phases:
            if all(upstream in done for upstream in phase.after):
                for task in self.tasks.values():
                    if task.phase == phase.name and task.step is Step.WAITING:
                        task.step = Step.READY

    def _check_done(self) -> None:
        if self.outcome is None and all(t.step is Step.SUCCEEDED for t in self.tasks.values()):
            self.outcome = (JobState.SUCCEEDED, "")
