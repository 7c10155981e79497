"""The node agent's decisions, pure: events in, instructions out (as dask's ``WorkerState``).

:class:`NodeCore` holds what a node knows of its live tasks (:class:`TaskView`: limits, frozen
or not, resident memory where the node can tell) and the preemptions and sprints under way, and
answers each event with the instructions that carry it out.  It reads no clock, starts no
thread, does no I/O and draws nothing at random.  Two shells carry its instructions out: the
agent (:mod:`node_agent.agent`) on the runtimes, and the simulator's nodes
(:mod:`simulator.engine`) on simulated tasks, so a simulation takes the agent's decisions.

Events: the RM's commands themselves, as the one node protocol types them
(:mod:`plumbing.node_protocol`: ``SuspendAllocation``, ``ResumeAllocation``, ``ResizeAllocation``,
``SprintAllocation``, ``StopAllocation``; an empty ``allocation_id`` means every task of the
job), what the node sees (:class:`Observed`, :class:`Started`, :class:`Snapshot`, :class:`Gone`,
:class:`SwapPresence`), a monitor round (:class:`Tick`) and
the outcome of an instruction (:class:`Stepped`, :class:`Refused`).  Instructions:
:class:`Freeze`, :class:`Thaw`, :class:`SetLimits`, :class:`Kill`, :class:`RaiseClock`,
:class:`RestoreClock`.  The shells tell the core what changed (an ``Observed`` after a freeze
or a resize); the core does not assume its instructions succeeded, except a sprint's, which a
:class:`Refused` undoes.

Container preemption (BIG-C Sec. 3.2-3.3, 4.2; node_agent/preemption.py has the host side):

* **immediate** (``SuspendAllocation`` with limits, the footprint): freeze, then cut the limits
  to the footprint (:attr:`Purpose.CUT`: CPU first, then memory, whose pages go to swap).  A
  cut never raises a limit, and without swap it leaves the memory no lower than the task has
  resident (or, where the node cannot tell, where it is: lowering it would wake the OOM
  killer, not the swap).
* **graceful** (``ResizeAllocation`` with a step r_GP): each :class:`Tick` lowers the limits by
  at most the step (:func:`~policies.preemption.steps.next_step`, CPU and memory) down to the
  target; a task that swaps is frozen where it is when asked (``freeze_on_swap``, Alg. 2 line
  8).  Where the node knows the task's resident memory (the simulator) a step below it is
  swapping foreseen: the task is frozen and cut to that step.  Where it does not (the agent),
  it takes the step and reports how much the task's swap grew (:class:`Stepped`); more than
  :data:`SWAP_GROWTH_BYTES` is swapping.  A step the kernel refuses (:class:`Refused`) means
  its memory could not be reclaimed: the shrink ends there, frozen when asked.
* **resume**: restore the limits the RM names, then thaw.

Sprints (DiAS Sec. 3.2-3.3, :mod:`node_agent.sprint`): by DVFS every CPU runs at its maximum
while any task sprints (:class:`RaiseClock`, :class:`RestoreClock`); by CPU quota a sprinting
task's CPU goes from its grant ``g`` to ``min(g * factor, g + idle)`` and back when the sprint
ends, refitted when a regular task starts.  Reported limits stay the unsprinted ones
(:meth:`NodeCore.base_of`), with the factor beside them (:meth:`NodeCore.factor_of`).

Not thread-safe: a shell calls :meth:`NodeCore.handle` under its own lock and carries the
instructions out after releasing it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from node_agent.sprint import Mechanism, Sprinting, sprinted_cpu
from plumbing.node_protocol import (
    ResizeAllocation,
    ResumeAllocation,
    SprintAllocation,
    StopAllocation,
    SuspendAllocation,
)
from policies.preemption.steps import next_step
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources

SWAP_GROWTH_BYTES = 1 << 20
"""Swap grown by more than this since the last look counts as swapping (a page or two moving
does not)."""


@dataclass(frozen=True)
class TaskView:
    """A live task as its node sees it (``key``: its name on the node).  ``resident_mb``: what
    it has in memory, where the node can tell (None: it cannot)."""

    key: str
    job_id: str
    allocation_id: str
    limits: Resources
    frozen: bool = False
    speculative: bool = False
    resident_mb: int | None = None


def reported_state(
    *,
    exited: bool,
    frozen: bool,
    exit_code: int,
    evicted: str | None = None,
    fenced: str | None = None,
    stop_requested: bool = False,
) -> tuple[TaskState, str]:
    """What the node reports of a task (its state and message) from what it sees of it: live
    (RUNNING, or SUSPENDED while frozen), or ended, and then why: evicted from the speculative
    queue (``evicted``: why), stopped by fencing (``fenced``: the reason), stopped by a command
    (KILLED), else by its exit code (0: SUCCEEDED; above 128: killed by signal code - 128)."""
    if not exited:
        return (TaskState.SUSPENDED if frozen else TaskState.RUNNING), ""
    if evicted is not None:
        return TaskState.KILLED, f"evicted: {evicted}"
    if fenced is not None:
        return TaskState.KILLED, fenced
    if stop_requested:
        return TaskState.KILLED, f"stopped (exit code {exit_code})"
    if exit_code == 0:
        return TaskState.SUCCEEDED, ""
    if exit_code > 128:
        return TaskState.FAILED, f"killed by signal {exit_code - 128}"
    return TaskState.FAILED, f"exit code {exit_code}"


@dataclass(frozen=True)
class GracefulShrink:
    """A graceful preemption under way: step the limits down to ``target`` by ``step`` per
    round; freeze the task once it swaps (``freeze_on_swap``)."""

    target: Resources
    step: Resources
    freeze_on_swap: bool


# ---------------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Observed:
    """The node sees ``task`` live now (after a start, a freeze, a resize, ...)."""

    task: TaskView


@dataclass(frozen=True)
class Started:
    """``task`` was started: observed, and CPU-quota sprints make room for a regular one."""

    task: TaskView


@dataclass(frozen=True)
class Snapshot:
    """A monitor pass saw these live tasks and no others."""

    tasks: tuple[TaskView, ...]


@dataclass(frozen=True)
class Gone:
    """The task ended (or vanished): nothing is under way for it any more."""

    key: str


@dataclass(frozen=True)
class SwapPresence:
    """Whether the machine has swap now (it may be turned on or off)."""

    has_swap: bool


@dataclass(frozen=True)
class Tick:
    """A monitor round: one step of each graceful preemption under way (``only``: of one)."""

    only: str | None = None


@dataclass(frozen=True)
class Stepped:
    """A graceful step was carried out; the task's swap grew by ``swap_growth_bytes``."""

    key: str
    swap_growth_bytes: int = 0


@dataclass(frozen=True)
class Refused:
    """The runtime refused ``instruction`` (``error`` says why)."""

    instruction: Instruction
    error: str = ""


Event = (
    Observed
    | Started
    | Snapshot
    | Gone
    | SwapPresence
    | SuspendAllocation
    | ResumeAllocation
    | ResizeAllocation
    | SprintAllocation
    | StopAllocation
    | Tick
    | Stepped
    | Refused
)

# ---------------------------------------------------------------------------- instructions


class Purpose(Enum):
    """Why limits are set, which says how a shell carries it out and what a refusal means."""

    CUT = "cut"  # an immediate preemption's footprint: CPU first, then memory to swap
    STEP = "step"  # a graceful step: CPU first, then memory; report Stepped or Refused
    RESTORE = "restore"  # a resumption's limits, before the thaw
    RESIZE = "resize"  # the RM's plain resize
    SPRINT = "sprint"  # a CPU-quota sprint begins
    REFIT = "refit"  # a CPU-quota sprint takes only what is idle now (a task started)
    SPRINT_END = "sprint-end"  # back to the limits before the sprint


@dataclass(frozen=True)
class Freeze:
    key: str
    why: str = ""


@dataclass(frozen=True)
class Thaw:
    key: str


@dataclass(frozen=True)
class SetLimits:
    """Set the task's CPU and memory (its CPUs chosen afresh).  ``note``: worth a warning."""

    key: str
    limits: Resources
    purpose: Purpose
    note: str = ""


@dataclass(frozen=True)
class Kill:
    key: str
    reason: str


@dataclass(frozen=True)
class RaiseClock:
    """DVFS: every CPU to its maximum frequency (a task sprints)."""


@dataclass(frozen=True)
class RestoreClock:
    """DVFS: the CPU frequencies as found (no task sprints)."""


Instruction = Freeze | Thaw | SetLimits | Kill | RaiseClock | RestoreClock


class NodeCore:
    """A node's tasks as it knows them, and its decisions.  See the module docstring."""

    def __init__(
        self,
        capacity_cpu: float,
        *,
        has_swap: bool,
        mechanism: Mechanism = Mechanism.CPU_QUOTA,
    ) -> None:
        self.capacity_cpu = capacity_cpu
        self.has_swap = has_swap
        self.mechanism = mechanism
        self._tasks: dict[str, TaskView] = {}
        self._graceful: dict[str, GracefulShrink] = {}
        self._stepping: dict[str, bool] = {}  # key -> its last step reached the target
        self._sprints: dict[str, Sprinting] = {}
        self._clock_raised = False

    # ------------------------------------------------------------------ queries

    def task(self, key: str) -> TaskView | None:
        return self._tasks.get(key)

    def live_keys(self, job_id: str, allocation_id: str) -> list[str]:
        """The live tasks of an allocation (empty ``allocation_id``: of the job)."""
        return [
            key
            for key, task in self._tasks.items()
            if task.job_id == job_id and (not allocation_id or task.allocation_id == allocation_id)
        ]

    def shrinking(self, key: str) -> bool:
        """Is a graceful preemption of ``key`` under way?"""
        return key in self._graceful

    def shrink_of(self, key: str) -> GracefulShrink | None:
        """The graceful preemption of ``key`` under way, if any."""
        return self._graceful.get(key)

    def graceful(self) -> dict[str, GracefulShrink]:
        return dict(self._graceful)

    def factor_of(self, key: str) -> float:
        sprinting = self._sprints.get(key)
        return sprinting.factor if sprinting is not None else 1.0

    def base_of(self, key: str) -> Resources | None:
        """The limits a sprinting task had before its sprint (None: it does not sprint)."""
        sprinting = self._sprints.get(key)
        return sprinting.base if sprinting is not None else None

    @property
    def any_sprinting(self) -> bool:
        return bool(self._sprints)

    # ------------------------------------------------------------------ events

    def handle(self, event: Event, now: float) -> list[Instruction]:
        """The instructions that carry ``event`` out, in order.  ``now``: the event's time (the
        shell's clock, virtual in the simulator)."""
        del now  # no decision here waits for time yet; the contract keeps it for those that will
        if isinstance(event, Observed):
            self._tasks[event.task.key] = event.task
            return []
        if isinstance(event, Started):
            self._tasks[event.task.key] = event.task
            return [] if event.task.speculative else self._refit()
        if isinstance(event, Snapshot):
            return self._snapshot(event.tasks)
        if isinstance(event, Gone):
            return self._forget([event.key])
        if isinstance(event, SwapPresence):
            self.has_swap = event.has_swap
            return []
        if isinstance(event, SuspendAllocation):
            return self._suspend(event)
        if isinstance(event, ResumeAllocation):
            return self._resume(event)
        if isinstance(event, ResizeAllocation):
            return self._resize(event)
        if isinstance(event, SprintAllocation):
            return self._sprint(event)
        if isinstance(event, StopAllocation):
            keys = self.live_keys(event.job_id, event.allocation_id)
            return [Kill(key, event.reason) for key in keys]
        if isinstance(event, Tick):
            keys = list(self._graceful) if event.only is None else [event.only]
            return [i for key in keys if key in self._graceful for i in self._step(key)]
        if isinstance(event, Stepped):
            return self._stepped(event)
        return self._refused(event)

    def _snapshot(self, tasks: Iterable[TaskView]) -> list[Instruction]:
        seen = {task.key: task for task in tasks}
        gone = [key for key in self._tasks if key not in seen]
        gone += [key for key in (*self._graceful, *self._sprints) if key not in seen]
        self._tasks = seen
        return self._forget(gone)

    def _forget(self, keys: Iterable[str]) -> list[Instruction]:
        for key in keys:
            self._tasks.pop(key, None)
            self._graceful.pop(key, None)
            self._stepping.pop(key, None)
            self._sprints.pop(key, None)
        if self._clock_raised and not self._sprints:
            self._clock_raised = False
            return [RestoreClock()]
        return []

    # ------------------------------------------------------------------ preemption

    def _suspend(self, event: SuspendAllocation) -> list[Instruction]:
        out: list[Instruction] = []
        for key in self.live_keys(event.job_id, event.allocation_id):
            self._end_shrink(key)
            task = self._tasks[key]
            if not task.frozen:
                out.append(Freeze(key, event.reason))
            if event.limits is not None:
                out.extend(self._cut(task, event.limits))
        return out

    def _cut(self, task: TaskView, limits: Resources) -> list[Instruction]:
        """Cut a frozen task to ``limits``; never raise a limit; without swap, keep the memory
        it has resident (see the module docstring)."""
        current = task.limits
        if (current.cpu, current.memory_mb) == (limits.cpu, limits.memory_mb):
            return []
        keep = Resources(limits.cpu, current.memory_mb)
        if limits.memory_mb >= current.memory_mb:
            return [SetLimits(task.key, keep, Purpose.CUT)]
        memory = limits.memory_mb
        if not self.has_swap:
            memory = max(memory, self._floor(task))
            if memory >= current.memory_mb:
                note = (
                    f"not cutting its memory to {limits.memory_mb} MiB: this machine has no "
                    f"swap, so it keeps {current.memory_mb} MiB (the RM counts it as held)"
                )
                return [SetLimits(task.key, keep, Purpose.CUT, note)]
        return [SetLimits(task.key, Resources(limits.cpu, memory), Purpose.CUT)]

    def _floor(self, task: TaskView) -> int:
        """How low its memory limit may go without swap."""
        return task.limits.memory_mb if task.resident_mb is None else task.resident_mb

    def _resume(self, event: ResumeAllocation) -> list[Instruction]:
        out: list[Instruction] = []
        for key in self.live_keys(event.job_id, event.allocation_id):
            self._end_shrink(key)
            current = self._tasks[key].limits
            if event.limits is not None and current != event.limits:
                out.append(SetLimits(key, event.limits, Purpose.RESTORE))
            out.append(Thaw(key))
        return out

    def _resize(self, event: ResizeAllocation) -> list[Instruction]:
        """A repeated graceful command changes nothing under way; a frozen task (frozen on
        swapping) stays where it is until resumed; a graceful command that lowers nothing is a
        plain resize."""
        out: list[Instruction] = []
        for key in self.live_keys(event.job_id, event.allocation_id):
            shrink = None
            if event.step is not None:
                shrink = GracefulShrink(event.limits, event.step, event.freeze_on_swap)
            if shrink is not None and self._graceful.get(key) == shrink:
                continue
            self._end_shrink(key)
            task = self._tasks[key]
            if task.frozen:
                continue
            current = task.limits
            lowering = (
                event.limits.cpu < current.cpu - 1e-9 or event.limits.memory_mb < current.memory_mb
            )
            if shrink is not None and lowering:
                self._graceful[key] = shrink
                continue
            out.append(SetLimits(key, event.limits, Purpose.RESIZE))
        return out

    def _end_shrink(self, key: str) -> GracefulShrink | None:
        self._stepping.pop(key, None)
        return self._graceful.pop(key, None)

    def _step(self, key: str) -> list[Instruction]:
        """One graceful round of ``key``: a step towards the target (CPU and memory at most one
        step each); swapping foreseen freezes it there (module docstring)."""
        shrink = self._graceful[key]
        task = self._tasks.get(key)
        if task is None:
            self._end_shrink(key)
            return []
        current = task.limits
        target = shrink.target
        if not self.has_swap:  # memory cannot be taken from a live task here
            target = Resources(target.cpu, max(target.memory_mb, self._floor(task)))
        following = next_step(current, target, shrink.step)
        resident = task.resident_mb
        if shrink.freeze_on_swap and resident is not None and following.memory_mb < resident:
            self._end_shrink(key)
            why = f"its step to {following.memory_mb} MiB is below the {resident} MiB it uses"
            return [Freeze(key, why), SetLimits(key, following, Purpose.CUT)]
        self._stepping[key] = following == target
        return [SetLimits(key, following, Purpose.STEP)]

    def _stepped(self, event: Stepped) -> list[Instruction]:
        key = event.key
        at_target = self._stepping.pop(key, None)
        shrink = self._graceful.get(key)
        if shrink is None:
            return []
        if event.swap_growth_bytes > SWAP_GROWTH_BYTES:
            grown = event.swap_growth_bytes >> 20
            return self._freeze_shrunk(key, f"swapping (its swap grew by {grown} MiB)")
        if at_target:
            self._end_shrink(key)
        return []

    def _freeze_shrunk(self, key: str, why: str) -> list[Instruction]:
        shrink = self._end_shrink(key)
        return [Freeze(key, why)] if shrink is not None and shrink.freeze_on_swap else []

    def _refused(self, event: Refused) -> list[Instruction]:
        instruction = event.instruction
        if not isinstance(instruction, SetLimits):
            return []
        if instruction.purpose is Purpose.STEP:
            return self._freeze_shrunk(instruction.key, "its memory could not be reclaimed")
        if instruction.purpose is Purpose.SPRINT:
            # Not carried out, so not reported as sprinting either: the RM, seeing the task
            # unsprinted, asks again at its next heartbeat (a resize can fail on a busy node).
            sprinting = self._sprints.get(instruction.key)
            if sprinting is not None and abs(sprinting.cpu - instruction.limits.cpu) < 1e-9:
                del self._sprints[instruction.key]
        if instruction.purpose is Purpose.REFIT:
            # It sprints at what it had: unknown here, so the next refit sets it again.
            sprinting = self._sprints.get(instruction.key)
            if sprinting is not None:
                self._sprints[instruction.key] = replace(sprinting, cpu=0.0)
        return []

    # ------------------------------------------------------------------ sprints

    def _sprint(self, event: SprintAllocation) -> list[Instruction]:
        out: list[Instruction] = []
        for key in self.live_keys(event.job_id, event.allocation_id):
            base = self.base_of(key) or self._tasks[key].limits
            if event.factor <= 1.0:
                out.extend(self._end_sprint(key))
                continue
            sprinting = self._sprints.get(key)
            if sprinting is not None and sprinting.factor == event.factor:
                continue  # asked again while it sprints
            self._sprints[key] = Sprinting(event.factor, base)
            if self.mechanism is Mechanism.DVFS:
                self._clock_raised = True
                out.append(RaiseClock())
            else:
                out.extend(self._fit(key))
        return out

    def _others_cpu(self, key: str) -> float:
        """The CPU limits of the live tasks other than ``key`` (sprinted ones as sprinted)."""
        return sum(task.limits.cpu for other, task in self._tasks.items() if other != key)

    def _fit(self, key: str, purpose: Purpose = Purpose.SPRINT) -> list[Instruction]:
        sprinting = self._sprints[key]
        base = sprinting.base
        idle = self.capacity_cpu - base.cpu - self._others_cpu(key)
        cpu = sprinted_cpu(base.cpu, sprinting.factor, idle)
        if abs(cpu - sprinting.cpu) < 1e-9:
            return []
        self._sprints[key] = replace(sprinting, cpu=cpu)
        return [SetLimits(key, Resources(cpu, base.memory_mb), purpose)]

    def _refit(self) -> list[Instruction]:
        """A regular task started: each CPU-quota sprint takes only what is idle now, so the
        new task gets its grant."""
        if self.mechanism is Mechanism.DVFS:
            return []
        return [i for key in list(self._sprints) for i in self._fit(key, Purpose.REFIT)]

    def _end_sprint(self, key: str) -> list[Instruction]:
        sprinting = self._sprints.pop(key, None)
        if sprinting is None:
            return []
        if self.mechanism is Mechanism.DVFS:
            if self._sprints or not self._clock_raised:
                return []
            self._clock_raised = False
            return [RestoreClock()]
        return [SetLimits(key, sprinting.base, Purpose.SPRINT_END)]
