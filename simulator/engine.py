"""The discrete-event engine: the resource manager's core and the job master's plan, driven with
virtual time and the network removed (like Hadoop's SLS).

What runs is the product's own code: :class:`resource_manager.core.ResourceManagerCore` over
:class:`resource_manager.tables.Tables` on a :class:`~resource_manager.store.MemoryStore`, called
through the entry points the gRPC services use (submit, register, heartbeat, report events,
register master, allocate, finish), each call one unit of work; and one
:class:`job_master.plan.JobPlan` per job, driven as ``job_master.master`` drives it.  What is
simulated is everything around them:

* **Node agents.**  Each node heartbeats every ``heartbeat_interval`` seconds at its own phase
  and carries out the answer's commands (a job master launch); it observes its tasks every
  ``monitor_interval`` and reports what changed at once, as the live agent does.  A task runs
  for its duration divided by its rate (its current CPU limit over its grant: a shrunk task
  slows down, a frozen one makes no progress; a killed one loses its work).  What a node
  decides about a preemption or a sprint is the agent's own :class:`node_agent.core.NodeCore`;
  the simulated node carries its instructions out.
* **Coupled phases** (a workload's ``coupled: true``): tasks that share state, as the
  executors of the paper's Spark jobs or MPI ranks.  A preemption kill of one loses the
  phase's progress: its running siblings start their work again (BIG-C Sec. 5.4: killed long
  Spark jobs "suffered significant slowdown due to job re-launch"), counted as lost work.
  Otherwise coupled tasks progress on their own: the siblings' idling at Spark's stage
  barriers is not modelled, since here a task that has finished gives its container back.
* **Memory and swap** (BIG-C preemption, docs/preemption.md).  A task's working set is
  ``working_set`` of its grant's memory.  Lowering its memory limit below what it has resident
  pushes the difference to swap at ``swap_mb_per_s`` (the paper's ~3 s per GB, Sec. 5.4); the
  node reports the lower limit only once that is done, so the RM frees the memory late, as on a
  real node.  An immediate preemption freezes the task at once, then swaps it out down to the
  footprint.  A graceful one takes one step r_GP per monitor round (:func:`next_step`), CPU and
  memory; a step below the working set means the task swaps, so it is frozen there.  A resumed
  task first reads its swapped memory back at the same rate, then runs.  On nodes without swap
  (``has_swap`` False) no memory limit goes below the working set.  A node holding a preempted
  task heartbeats, so that it is offered resumption (delayed resumption counts offers at
  heartbeats).
* **Data locality** (``locality``, off by default; the slot-reservation paper's simulation,
  Sec. VI-B).  A task of a phase with upstream phases (``after``) reads their output: its input
  is local when its node ran a task of one of them that succeeded (node locality, as Spark's
  NODE_LOCAL; a kept container always is).  A task placed elsewhere runs ``locality_factor``
  times its duration (the paper's conservative 5x).  Tasks of first phases read replicated
  storage and are always local.  Waiting for a local slot is the product's own: job masters'
  asks name the nodes of their upstream output, and the core holds such an ask for them for
  its ``locality_wait`` (:class:`~resource_manager.core.CoreSettings`; Spark's 3 s in the
  paper), woken when the wait ends.
* **Job masters.**  A job master starts ``master_startup`` seconds (plus up to
  ``master_startup_jitter``, drawn from the seed) after its node launches it, registers, then
  runs rounds every ``round_interval``: decide, launch (a task starts ``launch_latency``
  later), Allocate, absorb the answer.  When its job ends it reports the end and exits.
* **The shell's scheduling passes** run ``pass_delay`` after the first change that needs one,
  like the service's.

Idle intervals are skipped (``heartbeats="needed"``, the default): a node heartbeats only when
the core has a command for it (a job master was placed there, or a command is being re-sent),
and a job master runs a round only when it has something to say or to hear (the round before
exchanged something, or the core granted it containers or recorded events of its tasks); rounds
and heartbeats keep their phase, so they happen at the very times they would in a full run.  An
idle round is a no-op for the core (an Allocate that repeats itself runs no pass), and job
masters' start-up jitter keeps any two rounds off the same instant, so skipping idle rounds
cannot reorder anything.
``heartbeats="all"`` simulates every heartbeat and every round; ``tests/unit/simulator`` checks
that both give the same results on a small case.  Node liveness is not simulated (no node is
ever lost), so the core's liveness timer is not run in the "needed" mode.

Determinism: events at the same time run in the order they were scheduled; every random draw
comes from streams derived from the seed, so a seed gives byte-identical results.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar

import numpy as np

from job_master.plan import (
    AttemptKind,
    AttemptRecord,
    Container,
    Decisions,
    JobPlan,
    Launch,
)
from job_master.round import (
    AllocateAnswer,
    Grant,
    SequencedTaskEvent,
    absorb,
    allocate_call,
    begin_round,
)
from job_master.speculation import Candidate
from node_agent.core import (
    Event,
    Freeze,
    Gone,
    GracefulShrink,
    Instruction,
    NodeCore,
    Observed,
    Purpose,
    SetLimits,
    Stepped,
    TaskView,
    Thaw,
    Tick,
)
from node_agent.sprint import Mechanism
from plumbing.intervals import (
    HEARTBEAT_INTERVAL_S,
    JOB_MASTER_ROUND_S,
    MONITOR_INTERVAL_S,
    SCHEDULING_PASS_DELAY_S,
)
from plumbing.node_protocol import (
    LaunchMaster,
    ResizeAllocation,
    ResumeAllocation,
    SprintAllocation,
    StopAllocation,
    SuspendAllocation,
    TaskReport,
)
from policies.approximation.dispatch import DispatchMode
from policies.preemption.queues import QueueConfig
from policies.scheduling.framework import AllocationKind, Profile
from policies.scheduling.jobspec import SpecError
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.resources import Resources
from resource_manager.core import AllocateResult, CoreSettings, ResourceManagerCore
from resource_manager.decision_trace import DecisionTrace, Record
from resource_manager.errors import ConflictError
from resource_manager.records import (
    AllocationRecord,
    KeptSlot,
    Now,
    SpeculativeNote,
    TaskRecord,
)
from resource_manager.shell import PassDue, RMShell
from resource_manager.store import MemoryStore
from resource_manager.tables import Tables
from simulator.results import JobOutcome, UtilisationSample
from simulator.workload import SimJob, alone_time

T = TypeVar("T")

_tuple_new = tuple.__new__  # (see Simulation._answer)
_NO_MAP: Mapping[str, Any] = MappingProxyType({})

MIN_ALONE_TIME = 1e-3
"""A job whose tasks all take no time has an alone time of 0: its slowdown is taken against
this instead (a millisecond), so it stays finite."""


def _usage(sample: UtilisationSample) -> tuple[float, float, float, float]:
    return (sample.cpu_used, sample.cpu_capacity, sample.memory_used_mb, sample.memory_capacity_mb)


@dataclass(frozen=True)
class SimSettings:
    """The simulated cluster and the live system's timings (their live defaults)."""

    nodes: int = 100
    node_cpu: float = 16.0
    node_memory_mb: int = 65536
    heartbeat_interval: float = HEARTBEAT_INTERVAL_S
    monitor_interval: float = MONITOR_INTERVAL_S
    round_interval: float = JOB_MASTER_ROUND_S
    pass_delay: float = SCHEDULING_PASS_DELAY_S
    master_startup: float = 1.0
    master_startup_jitter: float = 0.1
    launch_latency: float = 0.015
    heartbeats: Literal["needed", "all"] = "needed"
    client_mode: bool = False
    sample_interval: float = 10.0
    until: float = math.inf
    core: CoreSettings = field(default_factory=CoreSettings)
    queues: QueueConfig | None = None  # None: one queue, no preemption
    has_swap: bool = True
    swap_mb_per_s: float = 341.0  # the paper's "3 seconds to reclaim 1 GB" (Sec. 5.4)
    working_set: float = 0.7  # of a task's granted memory, what it has resident
    locality: bool = False  # the data-locality model (module docstring)
    locality_factor: float = 5.0  # a non-local task's runtime, times its duration

    def check(self) -> None:
        """Raise ValueError naming the first setting out of range."""
        if self.nodes < 1:
            raise ValueError(f"nodes: must be at least 1, got {self.nodes}")
        if not (self.node_cpu > 0 and self.node_memory_mb > 0):
            raise ValueError("node_cpu, node_memory_mb: must be positive")
        for name in ("heartbeat_interval", "monitor_interval", "round_interval", "sample_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be positive, got {getattr(self, name)}")
        for name in ("pass_delay", "master_startup", "master_startup_jitter", "launch_latency"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}: must not be negative, got {getattr(self, name)}")
        if not self.swap_mb_per_s > 0:
            raise ValueError(f"swap_mb_per_s: must be positive, got {self.swap_mb_per_s}")
        if not self.locality_factor >= 1:
            raise ValueError(f"locality_factor: must be at least 1, got {self.locality_factor}")
        if not 0 < self.working_set <= 1:
            raise ValueError(f"working_set: must be in (0, 1], got {self.working_set}")
        if self.heartbeats not in ("needed", "all"):
            raise ValueError(f"heartbeats: must be 'needed' or 'all', got {self.heartbeats!r}")
        if self.client_mode and self.core.dispatch is not DispatchMode.PRIORITY:
            # (the core refuses such submissions: they would bypass its buffers)
            raise ValueError(
                f"client_mode: job masters outside the cluster cannot run under dispatch "
                f"{self.core.dispatch.value}; set client_mode=false"
            )


@dataclass
class SimResult:
    """What a run produced, in job submission order."""

    outcomes: list[JobOutcome]
    samples: list[UtilisationSample]
    events: int
    end_time: float


@dataclass
class _Task:
    """A task attempt (or a job master process) on a simulated node."""

    job_id: str
    task_id: str
    attempt: int
    allocation_id: str
    granted: Resources
    work: float  # seconds of work left at full rate, as of ``progress_at``
    state: TaskState = TaskState.LAUNCHING
    job_master: bool = False
    start_time: float = 0.0
    rate: float = 1.0
    progress_at: float = 0.0  # when ``work`` was last brought up to date
    version: int = 0  # bumps invalidate scheduled completions
    duration: float = 0.0  # the work it started with
    limits: Resources | None = None  # as resized (None: the grant)
    swapped_mb: int = 0  # of its memory, in swap
    busy: bool = False  # swapping memory out or in: a command waits until it is done
    phase: str = ""  # of its job (empty for a job master)
    shown: TaskState = TaskState.LAUNCHING  # as the node's monitor last reported it
    sprint_factor: float = 1.0  # DiAS: it sprints, running this many times faster


@dataclass
class _Node:
    node_id: str
    phase: float  # its heartbeats and monitor passes happen at phase + k * interval
    core: NodeCore  # what the node decides: the live agent's own core (node_agent/core.py)
    tasks: dict[str, _Task] = field(default_factory=dict)  # by allocation id
    unreported: list[TaskReport] = field(default_factory=list)
    monitor_armed: bool = False
    heartbeat_armed: bool = False


@dataclass
class _Master:
    job_id: str
    sim_job: SimJob
    node_id: str
    allocation_id: str
    attempt: int
    plan: JobPlan
    started: float
    events_after: int = 0
    round_armed: bool = False
    finished: bool = False
    deadline_armed: float = math.inf  # a wake-up armed for its plan's next kept deadline


class _SimulationStore(MemoryStore):
    """The store of a simulated RM: jobs and counters, not task attempts or containers.

    The simulated RM never restarts, and nothing reads a finished job's tasks back (outcomes
    come from the job records), so writing every task event and container change to a second
    copy in memory is work for nothing: the tables hold the live ones.  Jobs are kept, since
    the tables evict finished jobs and read them back from here."""

    def save_task(self, task: TaskRecord) -> None:
        pass

    def save_allocation(self, allocation: AllocationRecord) -> None:
        pass

    def delete_allocation(self, allocation_id: str) -> None:
        pass


class Simulation:
    """One run: ``Simulation(jobs, settings, seed).run()``."""

    def __init__(
        self,
        jobs: Sequence[SimJob],
        settings: SimSettings,
        seed: int,
        profile: Profile | None = None,
        *,
        record_decisions: bool = False,
    ) -> None:
        """``profile``: the core's scheduling plugins (default: the baseline).
        ``record_decisions``: keep the decision trace in :attr:`decisions` (the records the live
        RM writes with ``--decision-trace``, by the same recorder)."""
        settings.check()
        self.settings = settings
        self._seed = seed
        self.jobs = sorted(jobs, key=lambda j: (j.submit_time, j.name))
        self.core = ResourceManagerCore(
            Tables(_SimulationStore()), settings.core, profile, queues=settings.queues
        )
        self.shell = RMShell(self.core)  # the live RM's own shell: every call is one unit
        self._trace = DecisionTrace() if record_decisions else None
        self.decisions: list[Record] = []  # the decision trace, if recorded
        self._now = Now(0.0, 0.0)
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self.now = 0.0
        self.events = 0
        phases = random.Random(f"{seed}:node-phases")
        self._nodes = {
            f"node-{i:05d}": _Node(f"node-{i:05d}", phases.random(), self._node_core())
            for i in range(settings.nodes)
        }
        self._masters: dict[str, _Master] = {}
        self._sim_jobs: dict[str, SimJob] = {}  # job id -> its workload job
        self._first_start: dict[str, float] = {}
        self._unfinished = len(self.jobs)
        self._pass_armed = False
        self._locality_armed = math.inf  # when a locality wake-up is armed for
        self._samples: list[UtilisationSample] = []
        self._sample_armed = False
        self._sampled_version = -1  # the core's tables' version when a change was last noted
        self.on_progress: Callable[[Simulation], None] | None = None
        self._sprint_armed: float | None = None  # when the sprint timer is set for
        self.refused: list[tuple[str, str]] = []  # (job name, why) of jobs submit refused
        self._where: dict[str, _Node] = {}  # task allocation -> its node
        self._lost_work: dict[str, float] = {}  # job -> task-seconds lost to kills
        self._preemptions: dict[str, int] = {}  # job -> containers preempted
        self._suspended: set[str] = set()  # allocations whose task is frozen
        # (job, phase) -> nodes where a task of it succeeded: where its output is (locality)
        self._output_on: dict[tuple[str, str], set[str]] = {}
        self.nonlocal_tasks: dict[str, int] = {}  # job -> tasks that ran without local input

    # ------------------------------------------------------------------ the event loop

    def at(self, time: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time, self._seq, action))

    def run(self, progress_every: int = 20_000) -> SimResult:
        for node in self._nodes.values():
            self.at(0.0, lambda node=node: self._register(node))  # type: ignore[misc]
        for job in self.jobs:
            self.at(job.submit_time, lambda job=job: self._submit(job))  # type: ignore[misc]
        self.at(0.0, self._sample)
        if self.settings.heartbeats == "all":
            for node in self._nodes.values():
                self._arm_heartbeat(node, every=True)
            self.at(self.settings.heartbeat_interval, self._tick)
        while self._queue:
            time, _, action = heapq.heappop(self._queue)
            if time > self.settings.until:
                break
            self.now = time
            action()
            self.events += 1
            if self.on_progress is not None and self.events % progress_every == 0:
                self.on_progress(self)
            if self._unfinished == 0:
                break
        self._sample(last=True)
        return SimResult(self._outcomes(), self._samples, self.events, self.now)

    @property
    def unfinished_jobs(self) -> int:
        return self._unfinished

    def _next_aligned(self, phase: float, interval: float, *, strictly: bool) -> float:
        """The first time phase + k * interval (k >= 0) at or after now, or after now if
        ``strictly``.  Times within a millionth of an interval are the same tick: float sums
        must not turn one tick into two."""
        k = math.floor((self.now - phase) / interval + 1e-6)  # the latest tick at or before now
        if strictly or phase + k * interval < self.now:
            k += 1
        return phase + max(k, 0) * interval

    def _unit(self, action: Callable[[ResourceManagerCore, Now], T]) -> T:
        """One call into the core through the RM's one shell, as the service makes it; then
        carry out its effects with simulated time: who is concerned by what it placed hears
        (a node's heartbeat, a job master's round), and timers are armed for a pass, a sprint
        change and the end of a locality wait."""
        if self._now.wall != self.now:
            self._now = Now(self.now, self.now)
        outcome = self.shell.run(action, self._now)
        effects = outcome.effects
        if self._trace is not None:
            self.decisions.extend(self._trace.record(effects, self.core, self.now))
        if effects.version != self._sampled_version:
            self._sampled_version = effects.version
            self._usage_changed()
        for placement in effects.placed:
            if placement.kind is AllocationKind.JOB_MASTER:
                self._arm_heartbeat(self._nodes[placement.node_id])
            else:
                self._wake_master(placement.job_id)
        for node_id in effects.nodes_to_tell:
            self._arm_heartbeat(self._nodes[node_id])
        sprint_at = self.shell.next_sprint_change()
        if sprint_at is not None and sprint_at != self._sprint_armed:
            # A sprint starts or the budget runs dry then (DiAS): the RM's timer, as its shell's.
            self._sprint_armed = sprint_at
            self.at(max(sprint_at, self.now), self._sprint_timer)
        locality_end = self.shell.next_locality_end()
        if locality_end is not None and locality_end < self._locality_armed:
            # An ask held back for a node near its input may take any once its wait is over:
            # the live RM's tick notices; here a wake-up is armed for it.
            self._locality_armed = locality_end
            self.at(max(locality_end, self.now), self._end_locality_wait)
        if effects.pass_due is not PassDue.NO and not self._pass_armed:
            self._pass_armed = True
            delay = 0.0 if effects.pass_due is PassDue.AT_ONCE else self.settings.pass_delay
            self.at(self.now + delay, self._pass)
        return outcome.result

    def _end_locality_wait(self) -> None:
        self._locality_armed = math.inf
        self._unit(lambda core, now: core.end_locality_waits(now))

    def _pass(self) -> None:
        self._pass_armed = False
        self._unit(lambda core, now: core.schedule(now))

    def _tick(self) -> None:
        self._unit(lambda core, now: core.tick(now))
        if self._unfinished:
            self.at(self.now + self.settings.heartbeat_interval, self._tick)

    # ------------------------------------------------------------------ jobs

    def _submit(self, job: SimJob) -> None:
        client_mode = self.settings.client_mode
        try:
            record = self._unit(
                lambda core, now: core.submit(job.spec, client_mode=client_mode, now=now)
            )
        except SpecError as error:  # it fits on no node: refused, as the live RM refuses it
            self.refused.append((job.name, str(error)))
            self._unfinished -= 1
            return
        self._sim_jobs[record.job_id] = job
        if client_mode:  # its job master runs where it was submitted, outside the cluster
            process = _Task(record.job_id, "job-master", 1, "", Resources(), math.inf)
            startup = self._startup(record.job_id, 1)
            self.at(self.now + startup, lambda: self._start_master(None, process))

    # ------------------------------------------------------------------ nodes

    def _offered(self, node: _Node) -> Resources:
        """What the node offers the RM (all of it here)."""
        return Resources(self.settings.node_cpu, self.settings.node_memory_mb)

    def _register(self, node: _Node) -> None:
        capacity = self._offered(node)
        self._unit(
            lambda core, now: core.register_node(
                node.node_id,
                f"{node.node_id}:0",
                "simulated",
                capacity,
                [],
                now=now,
                has_swap=self.settings.has_swap,
            )
        )

    @property
    def sim_jobs(self) -> dict[str, SimJob]:
        """The jobs by the id the core gave them at submission."""
        return self._sim_jobs

    def _sprint_timer(self) -> None:
        self._sprint_armed = None
        self._unit(lambda core, now: core.update_sprints(now))

    def _arm_heartbeat(self, node: _Node, *, every: bool = False) -> None:
        if node.heartbeat_armed:
            return
        node.heartbeat_armed = True
        interval = self.settings.heartbeat_interval
        when = self._next_aligned(node.phase * interval, interval, strictly=True)
        self.at(when, lambda: self._heartbeat(node, every=every))

    def _heartbeat(self, node: _Node, *, every: bool) -> None:
        node.heartbeat_armed = False
        # A heartbeat carries what the monitor last reported (as the agent's does): a task
        # whose end the monitor reported leaves the node's map, so a heartbeat costs what runs
        # there; one that ended since is still carried as running until the monitor says so.
        for allocation_id in [a for a, t in node.tasks.items() if t.shown.is_final]:
            del node.tasks[allocation_id]
            node.core.handle(Gone(allocation_id), self.now)
        live = [self._report(t, as_shown=True) for t in node.tasks.values()]
        used = Resources()
        for task in node.tasks.values():
            used = used + task.granted
        _, commands = self._unit(
            lambda core, now: core.heartbeat(node.node_id, used, live, now=now)
        )
        for command in commands:
            if isinstance(command, LaunchMaster):
                self._launch_master(node, command)
            elif isinstance(command, StopAllocation):
                if command.preempted:  # the scheduler chose this kill: its work is lost
                    self.kill_task(command.allocation_id, command.reason)
                else:
                    self._stop(node, command.allocation_id, TaskState.KILLED, command.reason)
            elif isinstance(command, SuspendAllocation):
                self._suspend(node, command.allocation_id, command.limits)
            elif isinstance(command, ResumeAllocation):
                self._resume(node, command.allocation_id, command.limits)
            elif isinstance(command, ResizeAllocation):
                if command.step is not None:
                    self._graceful(node, command)
                else:
                    self._resize(node, command.allocation_id, command.limits)
            elif isinstance(command, SprintAllocation):
                self._sprint(node, command.allocation_id, command.factor)
        if every or commands or self._holds_preempted(node):
            self._arm_heartbeat(node, every=every)  # re-sent until the reports show it done

    def _monitor(self, node: _Node) -> None:
        node.monitor_armed = False
        reports, node.unreported = node.unreported, []
        if not reports:
            return
        for report in reports:
            task = node.tasks.get(report.allocation_id)
            if task is not None and task.attempt == report.attempt:
                task.shown = report.state
        self._unit(lambda core, now: core.report_events(node.node_id, reports, now=now))
        # Only an ending changes what a job master decides: hearing that an attempt runs moves
        # it from LAUNCHING to RUNNING, which no decision and no progress count tells apart.
        for job_id in {r.job_id for r in reports if not r.job_master and r.state.is_final}:
            self._wake_master(job_id)

    def _observe(self, node: _Node, task: _Task) -> None:
        """The node's next monitor pass reports the task's state."""
        node.unreported.append(self._report(task))
        if not node.monitor_armed:
            node.monitor_armed = True
            interval = self.settings.monitor_interval
            when = self._next_aligned(node.phase * interval, interval, strictly=True)
            self.at(when, lambda: self._monitor(node))

    def _report(self, task: _Task, as_shown: bool = False) -> TaskReport:
        return TaskReport(
            task.job_id,
            task.task_id,
            task.attempt,
            task.allocation_id,
            task.shown if as_shown else task.state,
            start_time=task.start_time,
            timestamp=self.now,
            job_master=task.job_master,
            limits=task.limits,
            sprint_factor=task.sprint_factor,
        )

    # ------------------------------------------------------------------ tasks on nodes

    def _start_task(self, node: _Node, task: _Task) -> None:
        if task.state is not TaskState.LAUNCHING:
            return  # stopped before it started
        task.state = TaskState.RUNNING
        task.start_time = task.progress_at = self.now
        self._first_start.setdefault(task.job_id, self.now)
        self._observe(node, task)
        self._schedule_completion(node, task)
        self._task_running(node, task)

    def _schedule_completion(self, node: _Node, task: _Task) -> None:
        task.version += 1
        if task.rate <= 0:
            return  # frozen: no progress, no completion
        version = task.version
        self.at(
            self.now + task.work / task.rate,
            lambda: self._complete(node, task, version),
        )

    def _complete(self, node: _Node, task: _Task, version: int) -> None:
        if task.version != version or task.state is not TaskState.RUNNING:
            return
        task.work = 0.0
        task.state = TaskState.SUCCEEDED
        if self.settings.locality and task.phase:
            self._output_on.setdefault((task.job_id, task.phase), set()).add(node.node_id)
        self._observe(node, task)
        self._task_over(node, task)

    def _stop(self, node: _Node, allocation_id: str, state: TaskState, reason: str) -> None:
        task = node.tasks.get(allocation_id)
        if task is None or task.state.is_final:
            return
        task.state = state
        task.version += 1
        self._observe(node, task)
        self._task_over(node, task)
        if task.job_master:
            master = self._masters.get(task.job_id)
            if master is not None and master.allocation_id == allocation_id:
                master.finished = True

    # The node's decisions are the agent's own (node_agent/core.py): these methods hand it the
    # RM's commands and carry out its instructions on the simulated tasks.  A simulated node
    # knows a task's resident memory, so a graceful step below it is swapping foreseen.

    def _node_core(self) -> NodeCore:
        """A node's core: sprints modelled as the paper's DVFS (a sprinting task runs
        ``factor`` times faster)."""
        settings = self.settings
        return NodeCore(settings.node_cpu, has_swap=settings.has_swap, mechanism=Mechanism.DVFS)

    def _decide(self, node: _Node, task: _Task, event: Event) -> list[Instruction] | None:
        """The core's answer to ``event`` about ``task``, the node having looked at the task
        first (as the agent's monitor does); None when the task is not live on the node (not
        started yet, or ended): the agent would not know it either."""
        if task.state is not TaskState.RUNNING and task.state is not TaskState.SUSPENDED:
            node.core.handle(Gone(task.allocation_id), self.now)
            return None
        view = TaskView(
            task.allocation_id,
            task.job_id,
            task.allocation_id,
            self._limits_of(task),
            frozen=task.state is TaskState.SUSPENDED,
            resident_mb=self._resident_mb(task),
        )
        node.core.handle(Observed(view), self.now)
        return node.core.handle(event, self.now)

    def _carry_out(self, node: _Node, task: _Task, instructions: Sequence[Instruction]) -> None:
        """Carry out the core's instructions on one task (resumptions: :meth:`_resume`)."""
        for instruction in instructions:
            if isinstance(instruction, Freeze):
                self._suspended.add(task.allocation_id)
                self.set_rate(task.allocation_id, 0.0)
                task.state = TaskState.SUSPENDED
                self._observe(node, task)
            elif isinstance(instruction, SetLimits):
                limits = instruction.limits
                if instruction.purpose is Purpose.CUT:
                    self._cut_memory(node, task, limits)
                    continue
                task.limits = None if limits == task.granted else limits
                if task.state is TaskState.RUNNING:
                    self.set_rate(task.allocation_id, self._full_rate(task))
                self._observe(node, task)
                if instruction.purpose is Purpose.STEP:  # its swapping was foreseen
                    answer = node.core.handle(Stepped(task.allocation_id), self.now)
                    self._carry_out(node, task, answer)

    def _suspend(self, node: _Node, allocation_id: str, footprint: Resources | None) -> None:
        """Freeze a running task: no progress until resumed; nothing is lost.  With a
        footprint (immediate preemption), its memory then goes to swap down to it."""
        task = node.tasks.get(allocation_id)
        if task is None or task.state.is_final or task.busy:
            return
        if task.state is TaskState.RUNNING and task.allocation_id not in self._suspended:
            self._preemptions[task.job_id] = self._preemptions.get(task.job_id, 0) + 1
            self._suspended.add(task.allocation_id)
        decided = self._decide(
            node, task, SuspendAllocation(task.job_id, allocation_id, "", footprint)
        )
        self._carry_out(node, task, decided or [])

    def _limits_of(self, task: _Task) -> Resources:
        return task.granted if task.limits is None else task.limits

    def _resident_mb(self, task: _Task) -> int:
        """What the task has in memory: its working set, or less once its limit is lower."""
        working = int(task.granted.memory_mb * self.settings.working_set)
        return min(self._limits_of(task).memory_mb, working)

    def _cut_memory(self, node: _Node, task: _Task, limits: Resources) -> None:
        """Set a frozen task's limits to ``limits`` (the core's cut); what its memory loses
        below what it has resident goes to swap first, and the node shows the new limits once
        that is done."""
        current = self._limits_of(task)
        if limits.memory_mb >= current.memory_mb:
            task.limits = None if limits == task.granted else limits
            self._observe(node, task)
            return
        out = max(0, self._resident_mb(task) - limits.memory_mb)
        task.busy = True  # a resume waits until this is done

        def done() -> None:
            task.busy = False
            if task.state.is_final:
                return
            task.swapped_mb += out
            task.limits = None if limits == task.granted else limits
            self._observe(node, task)

        self.at(self.now + out / self.settings.swap_mb_per_s, done)

    def _resume(self, node: _Node, allocation_id: str, limits: Resources | None) -> None:
        """Restore the limits (reading swapped memory back first), then let the task run."""
        task = node.tasks.get(allocation_id)
        if task is None or task.state is not TaskState.SUSPENDED or task.busy:
            return
        decided = (
            self._decide(node, task, ResumeAllocation(task.job_id, allocation_id, limits)) or []
        )
        if not any(isinstance(i, Thaw) for i in decided):
            return
        restored = next((i.limits for i in decided if isinstance(i, SetLimits)), None)

        def thaw() -> None:
            task.busy = False
            if task.state is not TaskState.SUSPENDED:
                return
            task.swapped_mb = 0
            if restored is not None:
                task.limits = None if restored == task.granted else restored
            self._suspended.discard(allocation_id)
            task.state = TaskState.RUNNING
            self.set_rate(allocation_id, self._full_rate(task))
            self._observe(node, task)

        if task.swapped_mb > 0:
            task.busy = True
            self.at(self.now + task.swapped_mb / self.settings.swap_mb_per_s, thaw)
        else:
            thaw()

    def _graceful(self, node: _Node, command: ResizeAllocation) -> None:
        """A graceful preemption: one step per monitor round down to the target, the first at
        once; the task is frozen once a step takes its memory below its working set."""
        task = node.tasks.get(command.allocation_id)
        if task is None or task.state is not TaskState.RUNNING or command.step is None:
            return
        key = task.allocation_id
        before = node.core.shrink_of(key)
        if before == GracefulShrink(command.limits, command.step, command.freeze_on_swap):
            return  # asked again while it is carried out
        if task.allocation_id not in self._suspended and task.limits is None:
            self._preemptions[task.job_id] = self._preemptions.get(task.job_id, 0) + 1
        resize = ResizeAllocation(
            task.job_id, key, command.limits, command.step, command.freeze_on_swap
        )
        self._carry_out(node, task, self._decide(node, task, resize) or [])
        if before is None and node.core.shrinking(key):
            self._graceful_round(node, task)

    def _graceful_round(self, node: _Node, task: _Task) -> None:
        key = task.allocation_id
        if not node.core.shrinking(key) or task.state is not TaskState.RUNNING or task.busy:
            if node.core.shrinking(key) and task.busy:
                self.at(
                    self.now + self.settings.monitor_interval,
                    lambda: self._graceful_round(node, task),
                )
            return
        self._carry_out(node, task, self._decide(node, task, Tick(key)) or [])
        if node.core.shrinking(key):
            self.at(
                self.now + self.settings.monitor_interval, lambda: self._graceful_round(node, task)
            )

    def _holds_preempted(self, node: _Node) -> bool:
        """Does the node hold a task suspended or shrunk (so it must keep heartbeating, to be
        offered its resumption)?"""
        return any(
            not t.state.is_final and (t.state is TaskState.SUSPENDED or t.limits is not None)
            for t in node.tasks.values()
            if not t.job_master
        )

    def _resize(self, node: _Node, allocation_id: str, limits: Resources) -> None:
        """New limits: a running task progresses at its CPU limit over its grant from now."""
        task = node.tasks.get(allocation_id)
        if task is None or task.state.is_final:
            return
        decided = self._decide(node, task, ResizeAllocation(task.job_id, allocation_id, limits))
        if decided is None:
            return  # not started: the RM asks again at the next heartbeat
        if task.limits is None and limits.cpu < task.granted.cpu:
            self._preemptions[task.job_id] = self._preemptions.get(task.job_id, 0) + 1
        self._carry_out(node, task, decided)

    def _sprint(self, node: _Node, allocation_id: str, factor: float) -> None:
        """DiAS sprinting, modelled as the paper's DVFS: the task runs ``factor`` times faster
        (1: at its normal speed again)."""
        task = node.tasks.get(allocation_id)
        if task is None or task.state.is_final:
            return
        if self._decide(node, task, SprintAllocation(task.job_id, allocation_id, factor)) is None:
            return  # not started: the RM asks again at the next heartbeat
        task.sprint_factor = node.core.factor_of(allocation_id)
        if task.state is TaskState.RUNNING:
            self.set_rate(allocation_id, self._full_rate(task))
        self._observe(node, task)

    @staticmethod
    def _full_rate(task: _Task) -> float:
        if task.limits is None or task.granted.cpu <= 0:
            return task.sprint_factor
        return min(1.0, task.limits.cpu / task.granted.cpu) * task.sprint_factor

    def set_rate(self, allocation_id: str, rate: float) -> None:
        """A task's rate of progress changes: its CPU limit over its grant (a shrunk container
        runs slower), 0 while it is frozen.  For the shell carrying out a resize, a suspend or
        a resume on a node."""
        node = self._where.get(allocation_id)
        task = node.tasks.get(allocation_id) if node is not None else None
        if node is None or task is None or task.state is not TaskState.RUNNING:
            return
        if task.rate > 0:  # bring the work left up to date at the old rate
            task.work = max(0.0, task.work - (self.now - task.progress_at) * task.rate)
        task.progress_at = self.now
        task.rate = max(0.0, rate)
        self._schedule_completion(node, task)

    def kill_task(self, allocation_id: str, reason: str) -> None:
        """Stop a task as a kill does: what it has done is lost (counted in the job's
        ``lost_work``); its job master retries it from the start."""
        node = self._where.get(allocation_id)
        task = node.tasks.get(allocation_id) if node is not None else None
        if node is None or task is None or task.state.is_final:
            return
        if task.state is TaskState.RUNNING:
            done = (self.now - task.progress_at) * task.rate
            total = task.duration - task.work + done
            self._lost_work[task.job_id] = self._lost_work.get(task.job_id, 0.0) + total
        self._preemptions[task.job_id] = self._preemptions.get(task.job_id, 0) + 1
        self._stop(node, allocation_id, TaskState.KILLED, reason)
        job = self._sim_jobs.get(task.job_id)
        phase = task.task_id.rsplit("-", 1)[0]
        if not task.job_master and job is not None and phase in job.coupled:
            self._restart_gang(task.job_id, phase)

    def _restart_gang(self, job_id: str, phase: str) -> None:
        """A preemption kill in a coupled phase loses the phase's progress: every sibling still
        running (or frozen) starts its work again, and what it had done is counted as lost.
        Finished siblings keep their output.  O(tasks of the job)."""
        master = self._masters.get(job_id)
        if master is None:
            return
        for task in master.plan.tasks.values():
            if task.phase != phase:
                continue
            for attempt in task.attempts.values():
                node = self._where.get(attempt.allocation_id)
                sibling = node.tasks.get(attempt.allocation_id) if node is not None else None
                if node is None or sibling is None or sibling.state is not TaskState.RUNNING:
                    continue
                done = (
                    sibling.duration
                    - sibling.work
                    + (self.now - sibling.progress_at) * (sibling.rate)
                )
                self._lost_work[job_id] = self._lost_work.get(job_id, 0.0) + done
                sibling.work = sibling.duration
                sibling.progress_at = self.now
                self._schedule_completion(node, sibling)

    # ------------------------------------------------------------------ job masters

    def _launch_master(self, node: _Node, command: LaunchMaster) -> None:
        if command.allocation_id in node.tasks:
            return
        process = _Task(
            command.job_id,
            "job-master",
            command.attempt,
            command.allocation_id,
            command.resources,
            work=math.inf,
            state=TaskState.RUNNING,
            job_master=True,
            start_time=self.now,
        )
        node.tasks[command.allocation_id] = process
        # Process start-up varies; it also keeps job masters launched by one heartbeat from
        # sharing the phase of their rounds, so no two rounds ever fall on the same instant.
        startup = self._startup(command.job_id, command.attempt)
        self.at(self.now + startup, lambda: self._start_master(node, process))

    def _startup(self, job_id: str, attempt: int) -> float:
        jitter = random.Random(f"{self._seed}:{job_id}:{attempt}").random()
        return self.settings.master_startup + jitter * self.settings.master_startup_jitter

    def _start_master(self, node: _Node | None, process: _Task) -> None:
        if process.state.is_final:
            return
        job_id = process.job_id
        try:
            registration = self._unit(
                lambda core, now: core.register_master(job_id, attempt=process.attempt, now=now)
            )
        except ConflictError as error:
            # Its attempt was dropped while it started (the job was evicted, or a newer
            # attempt replaced it; the stop would reach the node only at its next heartbeat):
            # the RM refuses the registration and the process exits, as a live job master
            # does on FAILED_PRECONDITION (job_master.master.SupersededError).
            if node is not None:
                self._stop(node, process.allocation_id, TaskState.KILLED, str(error))
            return
        spec = registration.job.spec
        plan = JobPlan(
            spec,
            spec.reservation,
            now=self.now,
            drop_ratio=registration.job.approximation.drop_ratio,
            drop_seed=job_id,
        )
        for allocation in registration.held:
            plan.on_granted(self._container(allocation.allocation_id))
        if registration.history:
            plan.adopt(
                (
                    AttemptRecord(
                        t.task_id, t.attempt, t.state, t.allocation_id, t.message, t.execution
                    )
                    for t in registration.history
                ),
                execution=registration.job.execution.number,
            )
        master = _Master(
            job_id,
            self._sim_jobs[job_id],
            node.node_id if node is not None else "",
            process.allocation_id,
            process.attempt,
            plan,
            started=self.now,
            events_after=max((t.seq for t in registration.history), default=0),
        )
        self._masters[job_id] = master
        self._round(master)

    def _wake_master(self, job_id: str) -> None:
        master = self._masters.get(job_id)
        if master is None or master.finished or master.round_armed:
            return
        master.round_armed = True
        interval = self.settings.round_interval
        when = self._next_aligned(master.started, interval, strictly=True)
        self.at(when, lambda: self._round(master))

    def _round(self, master: _Master) -> None:
        """One job master round, as ``job_master.master.JobMaster.run`` does it: the same
        :mod:`job_master.round` builds the call and absorbs the answer; the core is called
        with the call's fields and its result wrapped as the answer."""
        master.round_armed = False
        if master.finished:
            return
        plan = master.plan
        decisions = begin_round(plan, self.now, *self._speculation_inputs(master))
        for launch in decisions.launches:
            self._launch_task(master, launch)
        for stop in decisions.stops:
            node = self._where.get(stop.allocation_id)
            if node is not None:
                self._stop(node, stop.allocation_id, TaskState.KILLED, stop.reason)
        self._carry_speculation(master, decisions)
        if plan.outcome is not None:
            self._finish(master, plan.outcome, decisions)
            return
        # The simulated RM's wall clock is the plan's (wall_offset 0).  Of the call, only
        # ``resolve_nodes`` (simulated candidates come with their addresses) has no reader;
        # ``speculative`` reaches the core for the decision trace (the live RM also logs it).
        call = allocate_call(
            plan,
            decisions,
            job_id=master.job_id,
            attempt=master.attempt,
            events_after=master.events_after,
        )
        try:
            result = self._unit(
                lambda core, now: core.allocate(
                    call.job_id,
                    call.asks,
                    call.releases,
                    call.progress,
                    call.events_after,
                    now=now,
                    attempt=call.attempt,
                    kept=[KeptSlot(k.allocation_id, k.phase, k.until, k.ended) for k in call.kept]
                    if call.kept
                    else (),
                    speculative=[
                        SpeculativeNote(r.task_id, r.attempt, r.node_id, r.outcome)
                        for r in call.speculative
                    ]
                    if call.speculative
                    else (),
                )
            )
        except ConflictError:
            master.finished = True  # superseded (its job was evicted): it exits, as a live one
            return
        heard = absorb(plan, call, self._answer(result), self.now)
        master.events_after = heard.events_after
        # Only what the master heard can change its next decisions.  What it said needs no
        # round of its own: the next round would decide nothing new and repeat the same asks
        # and progress (the core changes nothing on a repeat); grants its asks bring wake it
        # through drain_placements.
        if heard.news or heard.kill_requested or self.settings.heartbeats == "all":
            self._wake_master(master.job_id)
        deadline = plan.next_deadline()
        if deadline < master.deadline_armed:
            # A kept container goes back at its deadline, which no event of the job's marks:
            # the master is woken for it (slot reservation).
            master.deadline_armed = deadline
            self.at(deadline, lambda: self._deadline_reached(master))

    def _answer(self, result: AllocateResult) -> AllocateAnswer:
        """The core's answer as the job master hears it over the wire (``AllocateResponse``).
        (Built by ``tuple.__new__`` in the fields' order: a named tuple's own constructor is a
        Python call, and this runs once per simulated round and task event.)"""
        return _tuple_new(
            AllocateAnswer,
            (
                tuple(self._grant_of(a) for a in result.granted) if result.granted else (),
                tuple(
                    _tuple_new(
                        SequencedTaskEvent,
                        (
                            task.seq,
                            task.task_id,
                            task.attempt,
                            task.state,
                            task.exit_code,
                            task.message,
                            task.preempted,
                            task.start_time,
                            task.finish_time or task.start_time,  # end_time (the wire's stamp)
                            task.node_id,
                        ),
                    )
                    for task in result.events
                )
                if result.events
                else (),
                tuple(result.lost_allocations),
                result.kill_requested,
                _NO_MAP,  # node_addresses: simulated candidates come with their addresses
                _NO_MAP,  # speculative_passes: a simulated node asks for none
            ),
        )

    # ---------------------------------------------------- extension points (oversubscription)

    def _speculation_inputs(
        self, master: _Master
    ) -> tuple[Sequence[Candidate], np.random.Generator | None]:
        """What a job master's round places speculative tasks with: the candidate machines
        and its random generator.  None here: :mod:`simulator.oversubscription` adds them."""
        return (), None

    def _carry_speculation(self, master: _Master, decisions: Decisions) -> None:
        """Carry out a round's speculative placements, upgrades and stops (none here)."""

    def _task_running(self, node: _Node, task: _Task) -> None:
        """A task started running on the node (a hook: what runs there changed)."""

    def _task_over(self, node: _Node, task: _Task) -> None:
        """A task ended or was stopped on the node (a hook: what runs there changed)."""

    def _deadline_reached(self, master: _Master) -> None:
        master.deadline_armed = math.inf
        self._wake_master(master.job_id)

    def _launch_task(self, master: _Master, launch: Launch) -> None:
        node = self._nodes[launch.container.node_id]
        phase = launch.phase.name
        index = int(launch.task_id.rsplit("-", 1)[1])
        task = _Task(
            master.job_id,
            launch.task_id,
            launch.attempt,
            launch.container.allocation_id,
            launch.container.resources,
            work=self._duration(master.sim_job, phase, index, launch.kind),
            phase=phase,
        )
        if self.settings.locality and not self._input_local(master.job_id, launch, node):
            task.work *= self.settings.locality_factor
            self.nonlocal_tasks[master.job_id] = self.nonlocal_tasks.get(master.job_id, 0) + 1
        task.duration = task.work
        node.tasks[task.allocation_id] = task
        self._where[task.allocation_id] = node
        self.at(self.now + self.settings.launch_latency, lambda: self._start_task(node, task))

    @staticmethod
    def _duration(job: SimJob, phase: str, index: int, kind: AttemptKind) -> float:
        """A straggler copy runs its own draw (the workload's ``copy_durations``); any other
        attempt, a retry included, the task's duration."""
        copies = job.copy_durations.get(phase) if kind is AttemptKind.COPY else None
        return copies[index] if copies else job.durations[phase][index]

    def _input_local(self, job_id: str, launch: Launch, node: _Node) -> bool:
        """Is the task's input on ``node``: a first phase's always is; a downstream task's is
        where a task of one of its upstream phases succeeded."""
        return not launch.phase.after or any(
            node.node_id in self._output_on.get((job_id, upstream), ())
            for upstream in launch.phase.after
        )

    def _finish(self, master: _Master, outcome: tuple[JobState, str], decisions: Decisions) -> None:
        state, message = outcome
        plan = master.plan
        for _attempt, container in list(plan.live_attempts()):
            if container is not None:
                node = self._nodes[container.node_id]
                self._stop(node, container.allocation_id, TaskState.KILLED, message or "job ended")
        try:
            self._unit(
                lambda core, now: core.finish_job(
                    master.job_id, state, message, plan.progress(), now=now, attempt=master.attempt
                )
            )
        except ConflictError:
            master.finished = True  # evicted just before it ended: executed again later
            return
        master.finished = True
        self._unfinished -= 1
        for phase in master.sim_job.spec.phases:  # nothing reads its output any more
            self._output_on.pop((master.job_id, phase.name), None)
        host = self._nodes.get(master.node_id)
        process = host.tasks.get(master.allocation_id) if host is not None else None
        if host is not None and process is not None:  # the job master's process exits
            process.state = TaskState.SUCCEEDED
            self._observe(host, process)

    def _container(self, allocation_id: str) -> Container:
        return self._grant(allocation_id).container()

    def _grant(self, allocation_id: str) -> Grant:
        return self._grant_of(self.core.allocations[allocation_id])

    @staticmethod
    def _grant_of(allocation: AllocationRecord) -> Grant:
        return _tuple_new(
            Grant,
            (
                allocation.allocation_id,
                allocation.phase,
                allocation.node_id,
                f"{allocation.node_id}:0",
                allocation.resources,
                b"",  # grant_token: a simulated node checks none
            ),
        )

    # ------------------------------------------------------------------ measurements

    periodic_samples = False
    """Sample every ``sample_interval`` whatever happens (a subclass that integrates over the
    samples, as :class:`simulator.dias_study.DiasSimulation` its energy, says so)."""

    def _usage_changed(self) -> None:
        """What the cluster holds may have changed: sample at the next ``sample_interval`` tick
        (at most one sample per interval, as periodic sampling, and none while nothing
        changes: a long idle spell costs no events and no rows)."""
        if self._sample_armed or self.periodic_samples:
            return
        self._sample_armed = True
        when = self._next_aligned(0.0, self.settings.sample_interval, strictly=False)
        self.at(when, self._sample)

    def _sample(self, *, last: bool = False) -> None:
        """Record utilisation now; a sample equal to the one before adds nothing to the step
        function and is left out (the ``last`` one, marking the run's end, never is)."""
        self._sample_armed = False
        held = self.core.tables.held_by_kind()
        used = Resources()
        for amount in held.values():
            used = used + amount
        capacity = self.core.tables.capacity.total_capacity
        sample = UtilisationSample(
            self.now, used.cpu, capacity.cpu, float(used.memory_mb), float(capacity.memory_mb)
        )
        previous = self._samples[-1] if self._samples else None
        if previous is None or last or _usage(previous) != _usage(sample):
            if previous is not None and previous.time == sample.time:
                self._samples[-1] = sample
            else:
                self._samples.append(sample)
        if self.periodic_samples and self._unfinished and self._queue:
            self._sample_armed = True
            self.at(self.now + self.settings.sample_interval, self._sample)

    def _outcomes(self) -> list[JobOutcome]:
        outcomes = []
        for job_id, job in self._sim_jobs.items():
            record = self.core.job(job_id)
            finished = record.state.is_final
            outcomes.append(
                JobOutcome(
                    job_id=job_id,
                    name=job.name,
                    job_class=job.job_class,
                    priority=job.spec.priority,
                    submit_time=job.submit_time,
                    start_time=self._first_start.get(job_id, math.nan),
                    finish_time=record.finish_time if finished else math.nan,
                    state=record.state.value if finished else "unfinished",
                    tasks=job.spec.total_tasks(),
                    preemptions=self._preemptions.get(job_id, 0),
                    lost_work=self._lost_work.get(job_id, 0.0),
                    alone_time=max(alone_time(job), MIN_ALONE_TIME),
                )
            )
        return outcomes
