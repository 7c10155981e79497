"""A job's DAG of phases as a state machine: the job master's deterministic core.

:class:`JobPlan` holds every task's lifecycle, every attempt of it and every container the job
holds; it consumes observations (containers granted or lost, task events) and
:meth:`JobPlan.decide` answers what to do next: which task to launch in which container, which
attempts to stop, which containers to give back, and how many more to ask for per phase.  It does
no I/O and reads no clock, so it is unit-tested directly and the simulator drives it.

Rules:

* Barrier: a phase's tasks become ready only when every task of every phase in its ``after``
  list is done: succeeded, or dropped (an approximation's choice, which counts as done).
* A container is granted for one phase and runs one attempt; it is given back as soon as that
  attempt ends (or at once, if its phase no longer needs it), so the RM's priority order decides
  who runs next.  Keeping slots across tasks and barriers is a policy of its own, not a side
  effect of reuse: with a ``reservation`` (:mod:`job_master.reservations`), the container of a
  finished task may be *kept* for a downstream phase until a deadline, run a downstream task
  when the barrier passes, and meanwhile run a copy of a straggler of its phase.
* Attempts: a task has one *regular* attempt at a time, and may have more running beside it
  (:class:`AttemptKind`: a straggler's *copy*, a *speculative* attempt); the first attempt to
  succeed makes the task succeed, and the others are stopped (:attr:`Decisions.stops`).
* A regular attempt that fails, is killed or is lost is retried (attempt number + 1) while the
  task has failed at most ``max_retries`` times; one more failure fails the job.  A kill by
  preemption (``preempted=True``) is retried without using up a retry: the task did nothing
  wrong.  A copy or speculative attempt that ends badly is just gone.
* A service (``kind: service``) runs until killed: a task of it that ends, however, is started
  again (a new attempt), and it fails the job only in a crash loop, more than ``max_retries``
  ends in a row each within :data:`SERVICE_STABLE_S` of its start.
* Speculative tasks (a ``speculative`` block, :mod:`job_master.speculation`, ROSE Alg. 5): a
  ready task whose phase has waited too long for containers gets a *speculative* attempt in a
  node agent's queue, chosen from the candidates the caller passes to :meth:`JobPlan.decide`.
  A container granted later upgrades one in place on its node; else it goes to a ready task
  no speculative attempt serves; only when there is none does it take a task over from its
  speculative attempt (cancelled, or killed), or wait in reserve while a nearly finished one
  completes (:attr:`Step.COVERED`).
* A task's :class:`Step` moves only along :data:`STEP_TRANSITIONS`, like the other lifecycles.

Its vocabulary (steps, attempts, containers, decisions) is in :mod:`job_master.plan_model`;
its speculative half in :mod:`job_master.plan_speculative`.

Everything is incremental: per-phase counts of tasks in each step, per-phase queues of ready
tasks and the set of idle containers are kept as things change, so a round costs O(what
changed), never a scan of every task.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from job_master.idle import IdleContainers
from job_master.plan_model import (
    LIVE_STEPS,
    OPEN_OUTCOMES,
    SERVICE_STABLE_S,
    STEP_TRANSITIONS,
    Attempt,
    AttemptKind,
    AttemptRecord,
    Container,
    Decisions,
    Launch,
    PhaseState,
    SpeculativeLaunch,
    SpeculativeRecord,
    Step,
    StopAttempt,
    Task,
    Upgrade,
)
from job_master.plan_speculative import SpeculativeAttempts
from job_master.reservations import KeptEnd, SlotReservations
from job_master.speculation import REFUSAL_BACKOFF_S, Candidate, SpeculationBook
from policies.approximation.dropping import choose_kept_partitions
from policies.reservation.stragglers import PhaseSlots, plan_copies
from policies.scheduling.asks import MAX_PREFERRED_NODES, PhaseAsk
from policies.scheduling.jobspec import JobSpec, ReservationSpec
from policies.scheduling.lifecycle import JobState, TaskState, check_transition
from policies.scheduling.progress import PhaseProgress

__all__ = [
    "SERVICE_STABLE_S",
    "STEP_TRANSITIONS",
    "Attempt",
    "AttemptKind",
    "AttemptRecord",
    "Container",
    "Decisions",
    "JobPlan",
    "Launch",
    "SpeculativeLaunch",
    "SpeculativeRecord",
    "Step",
    "StopAttempt",
    "Task",
    "Upgrade",
]


def node_run_time(start_time: float, end_time: float) -> float | None:
    """How long a finished attempt ran by its node's clock (its start and end are both the
    node's), or None when its node did not say when it started: what
    :meth:`JobPlan.on_task_event` takes as ``ran_s`` (the live job master and the simulator
    both call this)."""
    if start_time <= 0 or end_time < start_time:
        return None
    return end_time - start_time


class JobPlan(SpeculativeAttempts):
    """See the module docstring."""

    def __init__(
        self,
        spec: JobSpec,
        reservation: ReservationSpec | None = None,
        *,
        now: float = 0.0,
        drop_ratio: float = 0.0,
        drop_seed: str = "",
    ) -> None:
        """``reservation``: keep slots across barriers (the spec's block, or the cluster's
        default); None gives every container back when its attempt ends.  ``now`` is the
        caller's clock (see :meth:`advance`).  ``drop_ratio``: DiAS's θ for the job (the RM's
        choice); each droppable phase of ``n`` tasks runs ``max(1, ⌈n(1 − θ)⌉)`` of them, a
        random subset drawn from ``drop_seed`` (the job's id: every job master attempt of the
        job drops the same tasks)."""
        self.spec = spec
        self.now = now
        self.tasks: dict[str, Task] = {}
        self.containers: dict[str, Container] = {}
        self.finished_containers: list[str] = []  # to give back next round
        self.outcome: tuple[JobState, str] | None = None
        self._phases: dict[str, PhaseState] = {}
        self._idle = IdleContainers()  # containers running nothing
        self._stops: list[StopAttempt] = []
        self._unfinished = 0  # tasks not succeeded or dropped
        self._progress: tuple[PhaseProgress, ...] | None = None  # cached until a count moves
        self._asks: tuple[PhaseAsk, ...] | None = None  # likewise
        for phase in spec.phases:
            counts = dict.fromkeys(Step, 0)
            counts[Step.WAITING] = phase.tasks
            self._phases[phase.name] = PhaseState(phase, counts, upstream_left=len(phase.after))
            for index in range(phase.tasks):
                task_id = f"{phase.name}-{index}"
                self.tasks[task_id] = Task(task_id, phase.name, index)
            self._unfinished += phase.tasks
        for phase in spec.phases:
            for upstream in phase.after:
                self._phases[upstream].downstream.append(phase.name)
        self._slots = (
            None
            if reservation is None
            else SlotReservations(
                spec, reservation, {n: tuple(p.downstream) for n, p in self._phases.items()}
            )
        )
        self._copies = 0  # copies running on kept containers
        # (task id, attempt) -> the kept container a stopped attempt still occupies
        self._draining: dict[tuple[str, int], str] = {}
        self._kept_changed: dict[str, None] = {}  # containers to report (kept_changes)
        # Every kept container's end, in order (slot reservation; the simulator reads them),
        # and the reasons of those ended since the last kept_changes (the RM records them).
        self.kept_ends: list[KeptEnd] = []
        self._kept_ended: list[KeptEnd] = []
        self._refits_seen = 0
        self._copied: set[str] = set()  # tasks that have had a copy (each gets one at most)
        self._copies_wanted: set[str] = set()  # copies the last round decided, to confirm
        self.speculation = None if spec.speculative is None else SpeculationBook(spec.speculative)
        # node -> READY tasks whose speculative attempt runs there (for upgrades in place)
        self._speculating_on: dict[str, dict[str, None]] = {}
        self._upgrades: list[Upgrade] = []
        self._queued: dict[tuple[str, int], None] = {}  # speculative attempts in node queues
        self._speculative: dict[tuple[str, int], Attempt] = {}  # every live one
        self._records: dict[tuple[str, int], SpeculativeRecord] = {}
        self._records_changed: dict[tuple[str, int], None] = {}
        for name, state in self._phases.items():
            if state.upstream_left == 0:
                self._open(name)
        if drop_ratio > 0:
            self._drop_for_approximation(drop_ratio, drop_seed)
        self._check_done()

    def _drop_for_approximation(self, theta: float, seed: str) -> None:
        """DiAS Sec. 3.3 (Spark's findMissingPartitions returns ⌈n(1 − θ)⌉ of n): the tasks
        left out of each droppable phase, chosen at random before it starts."""
        digest = hashlib.sha256(seed.encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
        for phase in self.spec.phases:
            if not phase.droppable:
                continue
            kept = set(choose_kept_partitions(phase.tasks, theta, rng).tolist())
            for index in range(phase.tasks):
                if index not in kept:
                    self.drop(f"{phase.name}-{index}", f"dropped: approximation θ = {theta:g}")

    # ------------------------------------------------------------------ observations

    def advance(self, now: float) -> None:
        """The caller's clock (seconds, any origin, never going back): task times and
        reservation deadlines are measured with it.  Called before each round's observations."""
        self.now = max(self.now, now)

    def on_granted(self, container: Container) -> None:
        """A container arrived (or was re-announced after an RM restart)."""
        if container.allocation_id not in self.containers:
            self.containers[container.allocation_id] = container
            if self.speculation is not None:
                self.speculation.phase_granted(container.phase, self.now)
            if container.task_id is None:
                if self._slots is not None and container.kept is None:
                    container.kept = self._slots.on_prereserved(container.phase, self.now)
                    if container.kept is not None:
                        self._kept_changed[container.allocation_id] = None
                self._set_idle(container)

    def on_allocation_lost(self, allocation_id: str) -> None:
        container = self.containers.pop(allocation_id, None)
        self._idle.discard(allocation_id)
        if container is not None:
            self._unkeep(container, "lost", report=False)  # (the RM knows why: it took it)
            self._asks = None  # (it may have been draining for its phase)
        if container is None or container.task_id is None:
            return
        task = self.tasks[container.task_id]
        for attempt in list(task.attempts.values()):
            if attempt.allocation_id == allocation_id:
                # An attempt never seen running uses up no retry: the task did not run there
                # (e.g. a kept container taken back by a higher priority as it was launched).
                problem = "its node was lost" if attempt.running else "its container was lost"
                self._attempt_ended(task, attempt, problem, preempted=not attempt.running)

    def on_task_event(
        self,
        task_id: str,
        attempt: int,
        state: TaskState,
        exit_code: int,
        message: str,
        *,
        preempted: bool = False,
        ran_s: float | None = None,
    ) -> None:
        """An agent-observed state of one attempt; reports of attempts that are not live (a
        stale report, a retried attempt's late news) are ignored.  ``preempted`` marks a kill
        the scheduler made to free the container: it uses up no retry.  ``ran_s``: for a final
        state, how long the attempt ran as its node measured it (its end less its start; None:
        unknown, and it is counted from when this plan heard it running).  The RM hands a job
        master each attempt's latest state, so an attempt may be heard running late or never:
        task times counted from hearing it were short, and the deadlines fitted to them (Eq. 4)
        let kept containers lapse before their phase could use them."""
        task = self.tasks.get(task_id)
        live = task.attempts.get(attempt) if task is not None else None
        if task is None or live is None:
            if state.is_final:
                self._drained(task_id, attempt)
            return
        launching = task.step is Step.LAUNCHING
        self._on_attempt_state(
            task, live, state, exit_code, message, preempted=preempted, ran_s=ran_s
        )
        # The last of its phase to start starts the deadline of the containers kept from the
        # phase (time 0 of Sec. IV-B), whether it was heard running or only ended: the RM hands
        # a job master an attempt's latest state, so a task that ended between two rounds is
        # never heard running.
        started = launching and task.step is not Step.LAUNCHING
        if started and self._slots is not None and self._all_started(task.phase):
            self._slots.started(task.phase, self.now)

    def _on_attempt_state(
        self,
        task: Task,
        live: Attempt,
        state: TaskState,
        exit_code: int,
        message: str,
        *,
        preempted: bool,
        ran_s: float | None,
    ) -> None:
        if state in (TaskState.RUNNING, TaskState.SUSPENDED):
            live.running = True
            if live.started_at is None:
                live.started_at = self.now
            if live.kind is AttemptKind.REGULAR and task.step is Step.LAUNCHING:
                self._move(task, Step.RUNNING)
        elif state.is_final and self.spec.service is not None:
            problem = message or f"{state.value} (exit code {exit_code})"
            self._service_ended(task, live, problem, preempted=preempted)
        elif state is TaskState.SUCCEEDED:
            self._succeeded(task, live, ran_s)
        elif state.is_final:
            problem = message or f"{state.value} (exit code {exit_code})"
            self._attempt_ended(task, live, problem, preempted=preempted)

    def on_launch_failed(self, task_id: str, attempt: int, problem: str) -> None:
        task = self.tasks[task_id]
        live = task.attempts.get(attempt)
        if live is not None and not live.running:
            self._attempt_ended(task, live, f"launch failed: {problem}", preempted=False)

    def adopt(self, history: Iterable[AttemptRecord], execution: int = 1) -> None:
        """Take the job over from an earlier job master attempt.

        ``history`` is every task attempt the RM recorded, in sequence order, and the containers
        the job holds have been announced with :meth:`on_granted`.  A task that succeeded once
        stays done; a live attempt in a held container keeps running there; every failed
        attempt counts against ``max_retries`` as before; attempt numbers continue, so no attempt
        is ever launched twice under one name.  Attempts of an earlier ``execution`` (the job
        was evicted, and runs again from the start) only number the new ones."""
        latest: dict[str, AttemptRecord] = {}
        succeeded: set[str] = set()
        for record in history:
            task = self.tasks.get(record.task_id)
            if task is None:
                continue
            task.attempt = max(task.attempt, record.attempt)
            if record.execution < execution:
                continue
            if record.state is TaskState.SUCCEEDED:
                succeeded.add(task.task_id)
            elif record.state.is_final:
                task.failures += 1
                task.last_problem = record.message or record.state.value
                self._phases[task.phase].failed_attempts += 1
                self._progress = None
            if record.attempt >= latest.get(task.task_id, record).attempt:
                latest[task.task_id] = record
        # Phases in DAG order, so a barrier an adopted success opens is open for what follows.
        for phase in self.spec.phases:
            for index in range(phase.tasks):
                task = self.tasks[f"{phase.name}-{index}"]
                last = latest.get(task.task_id)
                if last is not None:
                    self._adopt_task(task, last, succeeded=task.task_id in succeeded)
        if self._slots is not None:  # (their tasks started under the earlier attempt: now, at
            for name, state in self._phases.items():  # the latest, is time 0 of a deadline)
                if state.upstream_left == 0 and self._all_started(name):
                    self._slots.started(name, self.now)
        self._check_done()

    def _adopt_task(self, task: Task, record: AttemptRecord, *, succeeded: bool) -> None:
        container = self.containers.get(record.allocation_id)
        if succeeded:
            self._force(task, Step.SUCCEEDED)
            self._task_done(task)
        elif not record.state.is_final and container is not None:
            self._force(task, Step.RUNNING)
            task.attempts[record.attempt] = Attempt(
                task.task_id, record.attempt, AttemptKind.REGULAR, container.allocation_id, True
            )
            task.allocation_id = container.allocation_id
            container.task_id = task.task_id
            self._idle.discard(container.allocation_id)
        elif task.failures > self.spec.max_retries:
            self._force(task, Step.GAVE_UP)
            if self.outcome is None:
                self.outcome = (
                    JobState.FAILED,
                    f"task {task.task_id} failed {task.failures} times; last: {task.last_problem}",
                )

    def kill(self, reason: str) -> None:
        if self.outcome is None:
            self.outcome = (JobState.KILLED, reason)

    def drop(self, task_id: str, reason: str = "dropped") -> None:
        """Leave a task out (an approximation's choice): it counts as done for its barrier,
        and any attempt of it still live is stopped."""
        task = self.tasks[task_id]
        if task.step.is_final:
            return
        for attempt in list(task.attempts.values()):
            self._stop_attempt(task, attempt, reason)
        self._move(task, Step.DROPPED)
        self._task_done(task)

    def start_attempt(self, task_id: str, kind: AttemptKind, allocation_id: str) -> Launch:
        """Run a copy of a live task in an idle container of its phase; the first attempt to
        succeed wins.  (A speculative attempt has no container: :meth:`decide` places it.)"""
        task = self.tasks[task_id]
        container = self.containers[allocation_id]
        if kind is not AttemptKind.COPY or task.step.is_final or task.step is Step.WAITING:
            raise ValueError(
                f"cannot start a {kind.value} attempt of {task_id} ({task.step.value})"
            )
        if container.task_id is not None or container.phase != task.phase:
            raise ValueError(f"container {allocation_id} is not an idle {task.phase} container")
        return self._launch(task, container, kind)

    def withdrawn(self, launch: Launch) -> bool:
        """Has the plan ended ``launch``'s attempt since deciding it (its task's end arrived
        meanwhile, say)?  Then the caller must not start it, and the attempt's container is
        free again at once (a kept one idles for its phase: nothing will run there to exit)."""
        task = self.tasks.get(launch.task_id)
        if task is not None and launch.attempt in task.attempts:
            return False
        self._drained(launch.task_id, launch.attempt)
        return True

    # ------------------------------------------------------------------ decisions

    def decide(
        self, candidates: Sequence[Candidate] = (), rng: np.random.Generator | None = None
    ) -> Decisions:
        """Assign ready tasks to idle containers of their phase, stop attempts that lost, release
        idle containers nobody needs, and ask for what is still missing.  With a
        ``speculative`` block, ``candidates`` (the aggregator's list, best first) and ``rng``:
        also reschedule speculative attempts queued too long and place new ones."""
        if self.outcome is None and self.speculation is not None and candidates:
            speculative = self._speculate(candidates, rng or np.random.default_rng())
        else:
            speculative = []
        stops, self._stops = tuple(self._stops), []
        if self.outcome is not None:
            # Everything goes back; the map is kept so the caller can still stop what runs.
            for container in self.containers.values():
                self._unkeep(container, "released")
            everything = (*self.finished_containers, *self.containers)
            self.finished_containers = []
            return Decisions(releases=everything, stops=stops)
        launches: list[Launch] = []
        releases: list[str] = []
        for allocation_id in self._idle_to_visit():
            container = self.containers[allocation_id]
            served = self._serve(container)
            if isinstance(served, Launch):
                launches.append(served)
            elif not served and not self._still_kept(container):
                self._unkeep(container, self._end_reason(container))
                releases.append(allocation_id)
        for allocation_id in releases:
            del self.containers[allocation_id]
            self._idle.discard(allocation_id)
        if self._slots is not None and self._slots.settings.straggler_copies:
            launches.extend(self._straggler_copies())
        releases = [*self.finished_containers, *releases]
        self.finished_containers = []  # (the ended attempts' containers go back first)
        if self._asks is None:  # (cached with progress: both move only with the counts)
            # A kept container whose stopped attempt has not exited yet serves its phase soon:
            # nothing is asked for it (a copy that won leaves the loser's container so).
            draining = self._draining_kept()
            self._asks = tuple(
                PhaseAsk(name, wanted, phase.spec.resources, self._input_nodes(name))
                for name, phase in self._phases.items()
                if (wanted := phase.counts[Step.READY] - draining.get(name, 0)) > 0
            )
        asks = self._asks
        if self._slots is not None:
            asks += tuple(
                # Pre-reserved slots are wanted near the phase's input only (where the RM
                # waits for locality at all): far from it the phase would run no faster.
                PhaseAsk(
                    name,
                    count,
                    self._phases[name].spec.resources,
                    self._input_nodes(name, ahead=True),
                    local_only=True,
                )
                for name, count in self._slots.prereserve_asks().items()
            )
        stops += tuple(self._stops)  # the speculative attempts containers took over
        self._stops = []
        upgrades, self._upgrades = tuple(self._upgrades), []
        return Decisions(
            tuple(launches), tuple(releases), asks, stops, tuple(speculative), upgrades
        )

    def _input_nodes(self, phase: str, *, ahead: bool = False) -> tuple[str, ...]:
        """Where a phase's input is: the nodes its upstream phases' tasks succeeded on, which
        its asks prefer (data locality; the RM's locality wait says for how long).  ``ahead``
        (a pre-reservation, before the barrier): also where they still run, since their
        output will be there.  O(upstream tasks running)."""
        nodes: dict[str, None] = {}
        for upstream in self._phases[phase].spec.after:
            state = self._phases[upstream]
            nodes.update(state.output_nodes)
            if ahead:
                for task_id in state.live:
                    container = self.containers.get(self.tasks[task_id].allocation_id or "")
                    if container is not None:
                        nodes[container.node_id] = None
        return tuple(nodes)[:MAX_PREFERRED_NODES]

    def _idle_to_visit(self) -> list[str]:
        """The idle containers a round must look at, in grant order: those idle since the last
        round, those of phases with ready tasks, and those kept from a phase whose deadline
        has come (or, kept for copies, that is done).  The rest stay as they are: visiting
        only these keeps a round at O(what changed), not O(idle containers)."""
        visit = dict.fromkeys(self._idle.take_fresh())
        for name, phase in self._phases.items():
            if phase.counts[Step.READY]:
                visit.update(dict.fromkeys(self._idle.of_phase(name)))
        if self._slots is not None:
            slots = self._slots
            if any(self.now >= slots.expiry(origin) for origin in self._idle.origins()):
                # A deadline has come: it is the one every task time known now gives.
                slots.refit_before_expiry()
            for origin in self._idle.origins():
                final = not self._phases[origin].downstream
                if self.now >= self._slots.expiry(origin) or (final and self._phases[origin].done):
                    visit.update(dict.fromkeys(self._idle.of_origin(origin)))
        return sorted(visit)

    def _set_idle(self, container: Container) -> None:
        kept = container.kept
        self._idle.add(container.allocation_id, container.phase, kept.origin if kept else None)

    def progress(self) -> tuple[PhaseProgress, ...]:
        """Per phase, how many tasks are pending, running, done.  The same tuple comes back
        until a count moves (every round reports it; most rounds change nothing)."""
        if self._progress is None:
            self._progress = tuple(
                PhaseProgress(
                    name=name,
                    tasks=phase.spec.tasks,
                    pending=phase.counts[Step.WAITING] + phase.counts[Step.READY],
                    running=phase.counts[Step.LAUNCHING]
                    + phase.counts[Step.RUNNING]
                    + phase.counts[Step.COVERED],
                    succeeded=phase.counts[Step.SUCCEEDED],
                    failed=phase.failed_attempts,
                    dropped=phase.counts[Step.DROPPED] + phase.counts[Step.GAVE_UP],
                )
                for name, phase in self._phases.items()
            )
        return self._progress

    def running_tasks(self) -> Iterator[Task]:
        """Tasks with a live regular attempt."""
        return (t for t in self.tasks.values() if t.step in LIVE_STEPS)

    def live_attempts(self) -> Iterator[tuple[Attempt, Container | None]]:
        """Every live attempt, with its container (None once given back)."""
        for task in self.tasks.values():
            for attempt in task.attempts.values():
                yield attempt, self.containers.get(attempt.allocation_id)

    # ------------------------------------------------------------------ internals

    def _launch(self, task: Task, container: Container, kind: AttemptKind) -> Launch:
        task.attempt += 1
        attempt = Attempt(task.task_id, task.attempt, kind, container.allocation_id)
        task.attempts[attempt.number] = attempt
        container.task_id = task.task_id
        self._idle.discard(container.allocation_id)
        if kind is AttemptKind.REGULAR:
            task.allocation_id = container.allocation_id
            self._move(task, Step.LAUNCHING)
        return Launch(task.task_id, attempt.number, container, self._phases[task.phase].spec, kind)

    def _succeeded(self, task: Task, winner: Attempt, ran_s: float | None = None) -> None:
        container = self.containers.get(winner.allocation_id)
        if container is not None:  # its output is there: downstream asks prefer the node
            self._phases[task.phase].output_nodes[container.node_id] = None
        seconds = ran_s if ran_s is not None and ran_s > 0 else None
        if seconds is None and winner.started_at is not None:
            seconds = self.now - winner.started_at
        if self._slots is not None:
            if seconds is not None:
                self._slots.task_time(seconds)
            self._slots.count_completion(task.phase)
        if self.speculation is not None and seconds is not None:
            self.speculation.finished(task.phase, seconds)
        if task.step is Step.COVERED:  # the reserve was not needed: it goes back
            self._release_reserve(task)
        self._keep_on_completion(task, winner)
        self._end_attempt(task, winner)
        for other in list(task.attempts.values()):
            self._stop_attempt(task, other, f"attempt {winner.number} succeeded")
        if not task.step.is_final:
            self._move(task, Step.SUCCEEDED)  # a ready entry left behind is skipped later
            self._task_done(task)

    def _keep_on_completion(self, task: Task, winner: Attempt) -> None:
        """Alg. 1 for the task's completion (slot reservation), taken once per task.  The slot
        it decides is the one the task holds that is not kept already: the winner's container,
        or, when the winner is a copy in a container kept already, the container of the attempt
        it overtook.  So a copy that wins costs its job no slot: the copy's container stays kept
        as it was, and the loser's is kept by Alg. 1 as the winner's would have been (the paper
        keeps every slot the phase held); it serves once its stopped attempt has exited."""
        if self._slots is None:
            return
        held = [
            container
            for attempt in (winner, *(a for a in task.attempts.values() if a is not winner))
            if attempt.kind is not AttemptKind.SPECULATIVE
            and (container := self.containers.get(attempt.allocation_id)) is not None
            and container.task_id == task.task_id
        ]
        if not held:
            return
        slot = next((container for container in held if container.kept is None), None)
        resources = (slot or held[0]).resources
        kept = self._slots.decide_slot(task.phase, resources, self.now, free=slot is not None)
        if slot is not None and kept is not None:
            slot.kept = kept
            self._kept_changed[slot.allocation_id] = None

    def _service_ended(
        self, task: Task, attempt: Attempt, problem: str, *, preempted: bool
    ) -> None:
        """A service's task ended, whatever its exit: it is started again (a service runs until
        killed).  One that ran :data:`SERVICE_STABLE_S` first was healthy: its count of quick
        failures starts again, so only a crash loop (more than ``max_retries`` quick ends in a
        row) fails the job."""
        started = attempt.started_at
        if started is not None and self.now - started >= SERVICE_STABLE_S:
            task.failures = 0
        self._attempt_ended(task, attempt, problem, preempted=preempted)

    def _attempt_ended(
        self, task: Task, attempt: Attempt, problem: str, *, preempted: bool
    ) -> None:
        self._end_attempt(task, attempt)
        if attempt.kind is AttemptKind.SPECULATIVE and task.step is Step.COVERED:
            self._uncover(task)  # its reserved container takes over (Alg. 5 line 14)
        if attempt.kind is not AttemptKind.REGULAR or task.step.is_final:
            return  # a copy that failed is just gone; the regular attempt goes on
        if not preempted:
            task.failures += 1
            self._phases[task.phase].failed_attempts += 1
            self._progress = None
        task.last_problem = problem
        if task.failures > self.spec.max_retries:
            for other in list(task.attempts.values()):
                self._stop_attempt(task, other, "its task gave up")
            self._move(task, Step.GAVE_UP)
            if self.outcome is None:  # the job's first ending stands (a kill, an earlier failure)
                self.outcome = (
                    JobState.FAILED,
                    f"task {task.task_id} failed {task.failures} times; last: {problem}",
                )
        else:
            self._make_ready(task)

    def _end_attempt(self, task: Task, attempt: Attempt, *, stopping: bool = False) -> None:
        """The attempt is over: its container goes back to the RM at the next round, unless it
        is kept (slot reservation: by Alg. 1 at the task's completion,
        :meth:`_keep_on_completion`, or kept already), once what runs in it has exited
        (``stopping``: when the stop is seen done, :meth:`_drained`)."""
        del task.attempts[attempt.number]
        if attempt.kind is AttemptKind.COPY:
            self._copies -= 1
        if attempt.kind is AttemptKind.SPECULATIVE:
            self._speculation_over(task, attempt)
            if task.step is Step.READY and self.speculation is not None:
                self.speculation.task_ready(task.phase, task.task_id, self.now)
            return  # it had no container
        if task.allocation_id == attempt.allocation_id:
            task.allocation_id = None
        container = self.containers.get(attempt.allocation_id)
        if container is None or container.task_id != task.task_id:
            return
        if container.kept is not None and stopping:
            self._draining[(task.task_id, attempt.number)] = container.allocation_id
            self._asks = None  # a phase's ask counts what drains for it
            return
        if container.kept is not None:
            container.task_id = None
            container.phase = container.kept.phase
            self._set_idle(container)
            return
        del self.containers[attempt.allocation_id]
        self._idle.discard(attempt.allocation_id)
        self.finished_containers.append(attempt.allocation_id)

    def _draining_kept(self) -> dict[str, int]:
        """Phase -> kept containers of it whose stopped attempt has not exited yet.
        O(draining containers)."""
        counts: dict[str, int] = {}
        for allocation_id in self._draining.values():
            container = self.containers.get(allocation_id)
            if container is not None and container.kept is not None:
                counts[container.kept.phase] = counts.get(container.kept.phase, 0) + 1
        return counts

    def _drained(self, task_id: str, attempt: int) -> None:
        """A stopped attempt in a kept container is seen ended: the container is idle again."""
        allocation_id = self._draining.pop((task_id, attempt), None)
        if allocation_id is not None:
            self._asks = None
        container = self.containers.get(allocation_id) if allocation_id is not None else None
        if container is None or container.task_id != task_id:
            return
        container.task_id = None
        if container.kept is not None:
            container.phase = container.kept.phase
        self._set_idle(container)

    def _still_kept(self, container: Container) -> bool:
        """An idle kept container stays while its phase's barrier has not passed (a final
        phase's own: while it runs) and its deadline has not come."""
        kept = container.kept
        if kept is None or self._slots is None or self.now >= self._slots.expiry(kept.origin):
            return False
        if kept.phase == kept.origin:  # a final phase's, for its copies: until it is done
            return not self._phases[kept.phase].done
        return self._phases[kept.phase].upstream_left > 0

    def _all_started(self, phase: str) -> bool:
        """No task of ``phase`` waits for a container or its launch any more."""
        counts = self._phases[phase].counts
        return not (counts[Step.WAITING] or counts[Step.READY] or counts[Step.LAUNCHING])

    def _end_reason(self, container: Container) -> str:
        """Why an idle kept container going back now ends: its deadline, or it is not needed."""
        kept = container.kept
        slots = self._slots
        if kept is not None and slots is not None and self.now >= slots.expiry(kept.origin):
            return "deadline"
        return "released"

    def _unkeep(self, container: Container, reason: str = "used", *, report: bool = True) -> None:
        """``container`` is no longer kept, because of ``reason`` (:class:`KeptEnd`); the RM is
        told why (``report``) at the next :meth:`kept_changes`."""
        if container.kept is not None and self._slots is not None:
            self._slots.released(container.kept)
            self._kept_changed[container.allocation_id] = None
            kept = container.kept
            self.kept_ends.append(
                KeptEnd(
                    container.allocation_id,
                    container.node_id,
                    kept.phase,
                    kept.origin,
                    reason,
                    self.now,
                )
            )
            if report:
                self._kept_ended.append(self.kept_ends[-1])
        container.kept = None
        self._idle.unkept(container.allocation_id)

    def next_deadline(self) -> float:
        """The earliest time (the plan's clock) it will decide something no event announces,
        or ``math.inf``: an idle kept container going back, a straggler copy to confirm (the
        next round), a phase starved long enough for speculative tasks, a queued one timing
        out.  A caller that runs rounds only on events
        wakes the plan then.  O(phases that kept idle containers + starving phases + queued
        speculative attempts)."""
        deadline = math.inf
        if self._slots is not None:
            deadline = min(
                (self._slots.expiry(origin) for origin in self._idle.origins()), default=math.inf
            )
            if self._copies_wanted:  # copies to confirm: the next round
                deadline = self.now
        if self.speculation is not None and self.outcome is None:
            due = self.speculation.next_dispatch()
            for _, attempt in self._queued_attempts():
                assert attempt.queued_at is not None
                due = min(due, attempt.queued_at + self.speculation.spec.queue_timeout_s)
            if due <= self.now:  # due, yet nothing was placed (no candidate, no room): later
                due = self.now + REFUSAL_BACKOFF_S
            deadline = min(deadline, due)
        return deadline

    def kept_changes(self) -> list[tuple[str, str, float, str]]:
        """The containers whose reservation changed since the last call, for the RM:
        (allocation id, the phase it is kept for or "" when no longer kept, its expiry on the
        plan's clock or ``math.inf``, "") for its state now, preceded by (allocation id, the
        phase it was kept for, ``math.inf``, the :class:`KeptEnd` reason) for each end of its
        keeping since the last call, in order: every end reaches the RM, even of a container
        kept and used between two calls, or given back (the RM records why, then the release).
        Lost ones are not listed (the RM knows why)."""
        if self._slots is None:
            return []
        if self._slots.refits != self._refits_seen:  # every deadline may have moved
            self._refits_seen = self._slots.refits
            for allocation_id, held in self.containers.items():
                if held.kept is not None:
                    self._kept_changed[allocation_id] = None
        changes = [(e.allocation_id, e.phase, math.inf, e.reason) for e in self._kept_ended]
        ended = {e.allocation_id for e in self._kept_ended}
        for allocation_id in self._kept_changed:
            container = self.containers.get(allocation_id)
            if container is None:
                continue
            kept = container.kept
            if kept is None:
                if allocation_id not in ended:  # (its end says it is no longer kept)
                    changes.append((allocation_id, "", math.inf, ""))
            else:
                changes.append((allocation_id, kept.phase, self._slots.expiry(kept.origin), ""))
        self._kept_changed.clear()
        self._kept_ended.clear()
        return changes

    def _straggler_copies(self) -> list[Launch]:
        """Sec. IV-C: once a phase's ongoing tasks are no more than the idle containers kept
        from it, each ongoing task gets one copy there, the longest-running first, within the
        spec's ``max_copies``.

        Copies are decided from the latest view of the tasks' ends: a copy is started only
        when two rounds in a row decide it, with the RM's answer (every task end it has
        reported) absorbed in between, so a task whose end was already at the RM when its copy
        was first considered gets none.  The caller absorbs each RM answer before its next
        :meth:`decide` (the job master and the simulator do); a copy waits one round."""
        assert self._slots is not None
        room = self._slots.settings.max_copies
        launches: list[Launch] = []
        wanted, self._copies_wanted = self._copies_wanted, set()
        if room is not None and self._copies >= room:
            return launches
        for origin in self._idle.origins():
            slots = self._idle.of_origin(origin)
            phase = self._phases[origin]
            ongoing_count = len(phase.live)
            if ongoing_count == 0 or ongoing_count > len(slots):
                continue
            if phase.copied_live == ongoing_count:
                continue  # every ongoing task has had its copy (O(1), most rounds)
            ongoing = sorted((self.tasks[t] for t in phase.live), key=self._running_since)
            planned = plan_copies(
                PhaseSlots(
                    ongoing_tasks=tuple(t.task_id for t in ongoing),
                    copied_tasks=frozenset(self._copied),
                    idle_reserved_slots=tuple(sorted(slots)),
                )
            )
            for copy in planned:
                if room is not None and self._copies + len(self._copies_wanted) >= room:
                    return launches
                if copy.task_id not in wanted:  # first seen: confirmed by the next round
                    self._copies_wanted.add(copy.task_id)
                    continue
                task = self.tasks[copy.task_id]
                container = self.containers[copy.slot_id]
                self._copied.add(task.task_id)
                self._phases[origin].copied_live += 1
                self._copies += 1
                launches.append(self._launch(task, container, AttemptKind.COPY))
        return launches

    def _running_since(self, task: Task) -> float:
        regular = next((a for a in task.attempts.values() if a.kind is AttemptKind.REGULAR), None)
        started = regular.started_at if regular is not None else None
        return started if started is not None else self.now

    def _stop_attempt(self, task: Task, attempt: Attempt, reason: str) -> None:
        record = self._records.get((task.task_id, attempt.number))
        if attempt.kind is AttemptKind.SPECULATIVE and (
            record is None or record.outcome in OPEN_OUTCOMES
        ):
            self._note(attempt, "killed", reason)
        container = self.containers.get(attempt.allocation_id)
        address = container.node_address if container is not None else attempt.node_address
        token = container.grant_token if container is not None else b""
        self._stops.append(
            StopAttempt(task.task_id, attempt.number, attempt.allocation_id, address, reason, token)
        )
        self._end_attempt(task, attempt, stopping=True)

    def _move(self, task: Task, step: Step) -> None:
        check_transition(STEP_TRANSITIONS, task.step, step)
        self._force(task, step)

    def _force(self, task: Task, step: Step) -> None:
        """Set a step without the table (adoption rebuilds what an earlier attempt reached)."""
        phase = self._phases[task.phase]
        phase.counts[task.step] -= 1
        phase.counts[step] += 1
        if step in LIVE_STEPS and task.step not in LIVE_STEPS:
            phase.live[task.task_id] = None
            if task.task_id in self._copied:
                phase.copied_live += 1
        elif step not in LIVE_STEPS and task.step in LIVE_STEPS:
            del phase.live[task.task_id]
            if task.task_id in self._copied:
                phase.copied_live -= 1
        if self.speculation is not None and task.step is Step.READY and step is not Step.READY:
            self.speculation.task_not_bare(task.phase, task.task_id)
            if phase.counts[Step.READY] == 0:
                self.speculation.phase_satisfied(task.phase)
        task.step = step
        self._progress = self._asks = None

    def _make_ready(self, task: Task) -> None:
        self._move(task, Step.READY)
        heapq.heappush(self._phases[task.phase].ready, task.index)
        if self.speculation is not None and task.speculative is None:
            self.speculation.task_ready(task.phase, task.task_id, self.now)

    def _next_ready(self, phase_name: str) -> Task | None:
        """The ready task of the phase with the lowest index (launched in index order, a retry
        among them), skipping entries of tasks that left READY another way."""
        ready = self._phases[phase_name].ready
        while ready:
            task = self.tasks[f"{phase_name}-{heapq.heappop(ready)}"]
            if task.step is Step.READY:
                return task
        return None

    def _task_done(self, task: Task) -> None:
        self._unfinished -= 1
        phase = self._phases[task.phase]
        if phase.done:
            for name in phase.downstream:
                downstream = self._phases[name]
                downstream.upstream_left -= 1
                if downstream.upstream_left == 0:
                    self._open(name)
        self._check_done()

    def _open(self, name: str) -> None:
        """The barrier of a phase is passed: its waiting tasks become ready, in index order."""
        phase = self._phases[name]
        self._idle.touch_phase(name)
        if self._slots is not None:
            self._slots.opened(name, self.now)
        for index in range(phase.spec.tasks):
            task = self.tasks[f"{name}-{index}"]
            if task.step is Step.WAITING:
                self._make_ready(task)

    def _check_done(self) -> None:
        if self.outcome is None and self._unfinished == 0:
            dropped = sum(p.counts[Step.DROPPED] for p in self._phases.values())
            self.outcome = (JobState.SUCCEEDED, f"{dropped} tasks dropped" if dropped else "")
