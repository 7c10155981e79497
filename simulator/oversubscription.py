"""Speculative oversubscription in the simulator (ROSE; docs/oversubscription.md): the engine
of :mod:`simulator.engine` with node agents' speculative queues, an aggregator's candidate
lists, interference and latency-sensitive services.

What runs is the product's own code: the job masters' :class:`job_master.plan.JobPlan` with
its ``speculative`` block (Alg. 5, rescheduling), the node agent's own speculative-queue
decisions (:func:`policies.oversubscription.admission.admit_to_queue` on an enqueue, and each
pass :func:`policies.oversubscription.node_pass.decide_pass`, which the agent's queue runs too:
throttle, memory reclamation, reclaim hold, core classes, admission), and for ROSE's
placement the aggregator's own Alg. 1-4 (:func:`policies.oversubscription.candidates.
compute_candidates`) over windows of the simulated nodes' metrics, with Alg. 3 ratings from the
evictions.  What is modelled around them:

* **Usage.**  A task uses a share of the CPU it holds (its job's ``usage``, drawn per job in
  [``usage_low``, ``usage_high``]): allocated resources sit idle, which is what speculative
  tasks reclaim.  A speculative task uses the same share of what it asks.
* **Machines differ** (the paper's Fig. 13: load is uneven across a production cluster's
  machines).  ``hot_fraction`` of the nodes carry load the scheduler does not place (other
  tenants, daemons, unmanaged jobs): ``hot_load`` of their cores, drawn uniformly in its range
  per node; the rest carry none.  The RM does not see it; the nodes' metrics do.
* **Interference.**  A node's CPU demand is what its tasks use.  ``weighted`` (the default,
  what the agent does): a speculative task's CPU weight is a tenth of a regular task's, so
  regular work runs at full speed while it fits in the node and speculative tasks share what
  it leaves (never less than their weight's share); past the node's capacity regular work runs
  at capacity over its demand.  ``shared`` (the issue's model): once demand exceeds capacity,
  every task there runs at capacity over demand.
* **Services.**  ``service_fraction`` of the nodes run a latency-sensitive service that holds
  ``service_cpu`` (not offered to the RM) and uses ``service_usage`` of it.  Its latency, in
  units of its own service time, is the M/M/1 response ``1 / (1 - rho)`` at its node's CPU
  utilisation rho (demand over capacity, at most 0.99), sampled every aggregator period.
* **The throttle** (RP).  A service's CPU pressure (PSI ``some``) is the share of time work
  waits for a core: the M/M/c waiting probability (Erlang C) of the node's cores under its
  CPU demand, 100 % once demand reaches capacity.  The agent's detector learnt the service's
  history with the regular work alone (anomalous samples are never learnt), so its bound is
  that level plus the detector's floor of 3 points (:mod:`node_agent.service_watch`): above
  it the node evicts its speculative tasks and blocks its queue for the agent's
  ``throttle_hold_s`` after the last anomaly.  UP never throttles.  A service's machine
  carries no unplaced load (the ``hot_fraction`` machines are others): its latency alone is
  what the batch work leaves it.
* **A node's pass** runs when what runs there changes (a task or job master starts or ends,
  a speculative task is admitted, ends or is dropped), after each enqueue, and when a
  throttle's or reclaim hold's time is over (the agent's runs every monitor pass as well;
  between those events nothing it reads changes here).  Memory: each live task's limit is
  its grant (a job master's included), a speculative task's what it asks, against the node's
  ``node_memory_mb``; the measured memory and disk utilisation are 0 (only CPU is modelled),
  so memory binds through the quota, the fit of a launch and reclamation.  Cores: the node's
  CPUs are ``range(node_cpu)``; a service is pinned to its first ``ceil(service_cpu)`` cores,
  regular tasks are not pinned (the agent pins them; here that would only change which cores
  are first-class, not the decisions: every running speculative task on a node is re-pinned
  to the same cores, so they are all on one class and evicted latest-started first), and
  speculative tasks take the cores the pass gives them.  The CPU model does not confine any
  task to its cores.
* **The aggregator** ranks every ``aggregator_period`` seconds; job masters place speculative
  tasks on its latest list, of ``config.candidate_limit`` machines (L_max; the study takes a
  quarter of the cluster: a list much shorter than that makes every job master herd onto the
  same few machines, which no policy can then help).  Placement policies compared (ROSE
  Sec. 7.1): ``random`` (RB: a random sample of the machines), ``least-loaded`` (SLB, the
  product's baseline ranking),
  ``shortest-queue`` (QLB: the shortest speculative queues) and ``rose`` (Alg. 4); ``none``
  places no speculative task at all.

The agent's and job master's network is removed: a placement reaches its queue, and a node's
news its job master, at once (the live figures are in the benchmarks).
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from job_master.plan import Decisions, SpeculativeLaunch, Upgrade
from job_master.speculation import Candidate
from policies.oversubscription.admission import admit_to_queue
from policies.oversubscription.candidates import compute_candidates
from policies.oversubscription.config import OversubscriptionConfig, OversubscriptionMode
from policies.oversubscription.least_loaded import least_loaded_candidates
from policies.oversubscription.machine_rating import JobReport, MachineRatings, TaskOutcome
from policies.oversubscription.node_pass import (
    Evict,
    LiveTask,
    NodePassInput,
    NodeState,
    RunningTask,
    decide_pass,
)
from policies.oversubscription.node_queue import QueuedTask
from policies.oversubscription.snapshot import MachineWindows
from policies.scheduling.lifecycle import JobState, TaskState
from policies.scheduling.resources import Resources
from policies.scheduling.speculative_spec import SpeculativeSpec
from simulator.engine import SimSettings, Simulation, _Master, _Node, _Task
from simulator.queueing import erlang_c
from simulator.workload import SimJob

PLACEMENTS = ("none", "random", "least-loaded", "shortest-queue", "rose")
INTERFERENCE = ("weighted", "shared")
SPECULATIVE_WEIGHT = 0.1
"""A speculative task's CPU weight relative to a regular task's (cpu.shares 102 of 1024)."""
SERVICE_KEY = "service"
"""The key a node's latency-sensitive service runs under (a watched service of the pass)."""
PSI_FLOOR = 3.0
"""Points of CPU pressure over a service's history that make an anomaly: the detector's
floor, 3 sigma of 1 point (a history's own spread is smaller in this model)."""


@dataclass(frozen=True)
class OversubscriptionSettings:
    """One configuration of the study (see the module docstring)."""

    placement: str = "rose"
    mode: OversubscriptionMode = OversubscriptionMode.UTILIZATION
    usage_low: float = 0.05
    usage_high: float = 0.95
    after_s: float = 2.0
    queue_timeout_s: float = 30.0
    aggregator_period: float = 5.0
    window: int = 5
    hot_fraction: float = 0.3
    hot_load: tuple[float, float] = (0.5, 0.8)
    service_fraction: float = 0.0
    service_cpu: float = 1.0
    service_usage: float = 0.5
    interference: str = "weighted"
    max_speculative: int | None = None  # per job master, Alg. 5's "several"; None: no bound
    # Jobs keep their own specs' speculative blocks (a replay of live jobs), instead of every
    # job getting the study's (after_s, queue_timeout_s, max_speculative).
    specs_as_given: bool = False
    config: OversubscriptionConfig = field(default_factory=OversubscriptionConfig)

    def check(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement: must be one of {', '.join(PLACEMENTS)}")
        if not 0 < self.usage_low <= self.usage_high <= 1:
            raise ValueError("usage_low, usage_high: must be 0 < low <= high <= 1")
        if not self.aggregator_period > 0 or self.window < 1:
            raise ValueError("aggregator_period, window: must be positive")
        if self.max_speculative is not None and self.max_speculative < 1:
            raise ValueError("max_speculative: must be at least 1 (or None: no bound)")
        if self.interference not in INTERFERENCE:
            raise ValueError(f"interference: must be one of {', '.join(INTERFERENCE)}")
        if not 0 <= self.service_fraction <= 1:
            raise ValueError("service_fraction: must be in [0, 1]")
        if not 0 <= self.hot_fraction <= 1 or not 0 <= self.hot_load[0] <= self.hot_load[1]:
            raise ValueError("hot_fraction, hot_load: a fraction, and a range of fractions")


@dataclass
class _Speculative:
    """A speculative task on a node: queued, then running with its own completion."""

    master: _Master
    task_id: str
    attempt: int
    demand: Resources
    usage: float  # cores it uses while it runs
    work: float
    enqueued_at: float
    running: bool = False
    started_at: float = 0.0
    cpuset: tuple[int, ...] = ()  # the cores its node's pass pinned it to
    rate: float = 1.0
    progress_at: float = 0.0
    version: int = 0

    @property
    def key(self) -> str:
        return f"{self.master.job_id}.{self.task_id}.{self.attempt}"


@dataclass
class _NodeState:
    index: int
    capacity: float
    service: bool = False
    regular_usage: float = 0.0  # cores its regular tasks (and service) use
    queue: dict[str, _Speculative] = field(default_factory=dict)
    running: dict[str, _Speculative] = field(default_factory=dict)
    queue_state: NodeState = field(default_factory=NodeState)  # throttle, hold, core classes

    @property
    def throttled(self) -> bool:
        return self.queue_state.throttle.active

    @property
    def demand(self) -> float:
        return self.regular_usage + sum(s.usage for s in self.running.values())

    @property
    def speculative_usage(self) -> float:
        return sum(s.usage for s in self.running.values())

    def pressure_over_history(self) -> float:
        """How far the CPU pressure is above what the regular work alone gives, in points."""
        return cpu_pressure(self.capacity, self.demand) - cpu_pressure(
            self.capacity, self.regular_usage
        )

    def factors(self, interference: str) -> tuple[float, float]:
        """How fast its regular and its speculative tasks run (1: at full speed).

        ``shared`` (the issue's model): every task runs at capacity over demand once the node
        is oversubscribed.  ``weighted`` (what the agent does: a speculative task's CPU weight
        is a tenth of a regular one's): regular work (tasks, the service, unplaced load) runs
        at full speed while it fits, and speculative tasks share what it leaves, near-strict
        priority with a floor of a tenth-weight share.
        """
        regular, speculative = self.regular_usage, self.speculative_usage
        regular_factor = min(1.0, self.capacity / max(regular, 1e-9))
        if regular + speculative <= self.capacity or speculative <= 0:
            return regular_factor, 1.0
        if interference == "shared":
            factor = self.capacity / (regular + speculative)
            return factor, factor
        leftover = max(0.0, self.capacity - regular)
        floor = SPECULATIVE_WEIGHT * self.capacity / (regular + SPECULATIVE_WEIGHT * speculative)
        return regular_factor, min(1.0, max(leftover / speculative, floor))


@dataclass
class OversubscriptionCounts:
    """What the speculative side did over a run."""

    placed: int = 0
    refused: int = 0
    launched: int = 0
    succeeded: int = 0
    evicted: int = 0
    upgraded: int = 0


class OversubscribedSimulation(Simulation):
    """The engine with speculative queues, candidates, interference and services."""

    def __init__(
        self,
        jobs: Sequence[SimJob],
        settings: SimSettings,
        seed: int,
        oversubscription: OversubscriptionSettings,
        *,
        record_decisions: bool = False,
    ) -> None:
        """``record_decisions``: keep the RM's decision trace (:class:`Simulation`'s)."""
        oversubscription.check()
        self.rose = oversubscription
        self.config = replace(oversubscription.config, mode=oversubscription.mode)
        block = SpeculativeSpec(
            after_s=oversubscription.after_s,
            queue_timeout_s=oversubscription.queue_timeout_s,
            max_tasks=oversubscription.max_speculative,
        )
        if oversubscription.placement != "none" and not oversubscription.specs_as_given:
            jobs = [replace(j, spec=replace(j.spec, speculative=block)) for j in jobs]
        super().__init__(jobs, settings, seed, record_decisions=record_decisions)
        draws = random.Random(f"{seed}:oversubscription")
        self._usage_of_job = {
            job.name: draws.uniform(oversubscription.usage_low, oversubscription.usage_high)
            for job in self.jobs
        }
        names = sorted(self._nodes)
        self._node_names = tuple(names)
        self._state: dict[str, _NodeState] = {}
        for index, name in enumerate(names):
            service = draws.random() < oversubscription.service_fraction
            state = _NodeState(index, settings.node_cpu, service)
            if service:
                state.regular_usage = oversubscription.service_cpu * oversubscription.service_usage
            if draws.random() < oversubscription.hot_fraction and not service:
                state.regular_usage += settings.node_cpu * draws.uniform(*oversubscription.hot_load)
            self._state[name] = state
        self._usage: dict[str, float] = {}  # allocation -> cores its task uses
        self._cpu_ids = tuple(range(int(settings.node_cpu)))
        self._service_cpuset = tuple(
            range(min(len(self._cpu_ids), math.ceil(oversubscription.service_cpu)))
        )
        self._rng = np.random.default_rng(seed)
        self._candidates: tuple[Candidate, ...] = ()
        count = len(names)
        self._windows = np.full((count, 8, oversubscription.window), np.nan)
        self._queue_windows = np.full((count, 3, oversubscription.window), np.nan)
        self._ratings = MachineRatings.unrated(count)
        self._evicted_on: dict[str, list[int]] = {}  # job -> node indexes of its evictions
        self.counts = OversubscriptionCounts()
        self.latencies: list[float] = []  # the services' sampled latencies
        # (time, node, task key, what: admitted, evicted, succeeded), with record_decisions:
        # what the nodes' speculative queues did, for a differential test against live agents
        self.speculative_log: list[tuple[float, str, str, str]] | None = (
            [] if record_decisions else None
        )
        self.used_samples: list[tuple[float, float]] = []  # (time, cores used cluster-wide)
        self.at(0.0, self._aggregate)

    # ------------------------------------------------------------------ nodes

    def _offered(self, node: _Node) -> Resources:
        """A service's node keeps its service's cores from the RM."""
        offered = super()._offered(node)
        if self._state[node.node_id].service:
            return Resources(offered.cpu - self.rose.service_cpu, offered.memory_mb)
        return offered

    def _task_running(self, node: _Node, task: _Task) -> None:
        state = self._state[node.node_id]
        if task.job_master:  # (no CPU use modelled, but its memory limit counts)
            self._changed(node, state)
            return
        usage = self._usage.get(task.allocation_id)
        if usage is None:
            job = self._sim_jobs[task.job_id]
            usage = self._usage[task.allocation_id] = (
                task.granted.cpu * self._usage_of_job[job.name]
            )
        state.regular_usage += usage
        self._changed(node, state)

    def _task_over(self, node: _Node, task: _Task) -> None:
        state = self._state[node.node_id]
        usage = self._usage.pop(task.allocation_id, None)
        if usage is None:
            if task.job_master:
                self._changed(node, state)
            return
        state.regular_usage = max(0.0, state.regular_usage - usage)
        self._changed(node, state)

    def _changed(self, node: _Node, state: _NodeState) -> None:
        """What runs on the node changed: one pass of its speculative queue, decided by the
        agent's own :func:`policies.oversubscription.node_pass.decide_pass` (throttle, memory
        reclamation, reclaim hold, core classes, admission), carried out; then its tasks'
        speed.  An admission makes another pass (the new demand may make an anomaly)."""
        anomaly = None
        watched = self.config.is_responsiveness_prioritized and state.service
        if watched and state.pressure_over_history() > PSI_FLOOR:
            anomaly = f"psi_cpu of service {SERVICE_KEY}"
        decision = decide_pass(self._pass_input(node, state, anomaly), self.now, self.config)
        state.queue_state = decision.state
        if decision.evictions:
            self._evict(node, state, decision.evictions)
        for repin in decision.repins:
            state.running[repin.key].cpuset = repin.cpuset
        if anomaly is not None:  # the agent looks again once the throttle's hold is over
            self.at(state.queue_state.throttle.until, lambda: self._changed(node, state))
        if decision.reclaimed:  # ... and once the reclaim hold's least time is over
            since = state.queue_state.hold.since
            self.at(since + self.config.reclaim_hold_s, lambda: self._changed(node, state))
        for key in decision.admitted:
            speculative = state.queue.pop(key)
            speculative.running = True
            speculative.started_at = speculative.progress_at = self.now
            speculative.cpuset = decision.cpuset
            speculative.rate = -1.0  # no rate yet: the rates below give it one
            state.running[key] = speculative
            self.counts.launched += 1
            self._log(node, key, "admitted")
            speculative.master.plan.on_speculative_status(
                speculative.task_id, speculative.attempt, TaskState.RUNNING
            )
        factor, speculative_factor = state.factors(self.rose.interference)
        for task in node.tasks.values():
            if task.state is TaskState.RUNNING and not task.job_master:
                wanted = self._full_rate(task) * factor
                if abs(task.rate - wanted) > 1e-12:
                    self.set_rate(task.allocation_id, wanted)
        for speculative in state.running.values():
            if abs(speculative.rate - speculative_factor) > 1e-12:
                self._set_speculative_rate(node, speculative, speculative_factor)
        if decision.admitted:
            self._changed(node, state)

    def _pass_input(self, node: _Node, state: _NodeState, anomaly: str | None) -> NodePassInput:
        """The node as its agent's pass would see it: its live tasks' memory limits (the
        grants; a job master's too), its service pinned to its first cores, regular tasks
        unpinned (see the module docstring), its CPU utilisation as the admission reading."""
        regular = tuple(
            LiveTask(
                t.allocation_id, (t.limits or t.granted).memory_mb, (), job_master=t.job_master
            )
            for t in node.tasks.values()
            if not t.state.is_final and t.state is not TaskState.LAUNCHING
        )
        if state.service:
            regular += (LiveTask(SERVICE_KEY, 0, self._service_cpuset),)
        queue = tuple(QueuedTask(s.key, s.demand, s.enqueued_at) for s in state.queue.values())
        utilisation = None
        if queue:
            measured = {"cpu": min(1.0, state.demand / state.capacity)}
            utilisation = tuple(measured.get(n, 0.0) for n in self.config.admission_resources)
        return NodePassInput(
            queue=queue,
            running=tuple(
                RunningTask(s.key, s.demand, s.cpuset, s.started_at) for s in state.running.values()
            ),
            regular=regular,
            capacity=Resources(state.capacity, self.settings.node_memory_mb),
            cpu_ids=self._cpu_ids,
            state=state.queue_state,
            services=frozenset({SERVICE_KEY}) if state.service else frozenset(),
            anomaly=anomaly,
            utilisation=utilisation,
        )

    # ------------------------------------------------------------------ speculative tasks

    def _speculation_inputs(
        self, master: _Master
    ) -> tuple[Sequence[Candidate], np.random.Generator | None]:
        return self._candidates, self._rng

    def _carry_speculation(self, master: _Master, decisions: Decisions) -> None:
        for stop in decisions.stops:
            if not stop.allocation_id and stop.node_address:
                self._drop(stop.node_address.rsplit(":", 1)[0], master, stop.task_id, stop.attempt)
        for placement in decisions.speculative:
            self._place(master, placement)
        for upgrade in decisions.upgrades:
            self._upgrade(master, upgrade)
        if decisions.speculative:
            # Its agents' answers can change what it decides next (Alg. 5 places one task per
            # candidate per round: an accepted placement lets the next round place the next
            # one, a refused one sends the task elsewhere), so this round is not idle: the
            # live master's next round comes at its interval, and so does this one's.
            self._wake_master(master.job_id)

    def _place(self, master: _Master, placement: SpeculativeLaunch) -> None:
        node = self._nodes[placement.node_id]
        state = self._state[placement.node_id]
        self.counts.placed += 1
        decision = admit_to_queue(len(state.queue), self.config)
        if not decision.admitted:
            self.counts.refused += 1
            master.plan.on_speculative_answer(placement.task_id, placement.attempt, False)
            return
        index = int(placement.task_id.rsplit("-", 1)[1])
        demand = placement.phase.resources
        speculative = _Speculative(
            master,
            placement.task_id,
            placement.attempt,
            demand,
            demand.cpu * self._usage_of_job[master.sim_job.name],
            master.sim_job.durations[placement.phase.name][index],
            self.now,
        )
        state.queue[speculative.key] = speculative
        master.plan.on_speculative_answer(placement.task_id, placement.attempt, True)
        self._changed(node, state)  # (the agent runs a pass at once after an enqueue)

    def _log(self, node: _Node, key: str, what: str) -> None:
        if self.speculative_log is not None:
            self.speculative_log.append((self.now, node.node_id, key, what))

    def _set_speculative_rate(self, node: _Node, speculative: _Speculative, rate: float) -> None:
        if speculative.rate > 0:
            speculative.work = max(
                0.0, speculative.work - (self.now - speculative.progress_at) * speculative.rate
            )
        speculative.progress_at = self.now
        speculative.rate = rate
        speculative.version += 1
        version = speculative.version
        self.at(
            self.now + speculative.work / max(rate, 1e-9),
            lambda: self._speculative_done(node, speculative, version),
        )

    def _speculative_done(self, node: _Node, speculative: _Speculative, version: int) -> None:
        state = self._state[node.node_id]
        if speculative.version != version or state.running.get(speculative.key) is not speculative:
            return
        del state.running[speculative.key]
        self.counts.succeeded += 1
        self._log(node, speculative.key, "succeeded")
        speculative.master.plan.on_speculative_status(
            speculative.task_id, speculative.attempt, TaskState.SUCCEEDED
        )
        self._wake_master(speculative.master.job_id)
        self._changed(node, state)

    def _evict(self, node: _Node, state: _NodeState, evictions: Sequence[Evict]) -> None:
        """Carry out the pass's evictions (in its order): each ends at once."""
        for eviction in evictions:
            speculative = state.running.pop(eviction.key)
            self.counts.evicted += 1
            self._log(node, eviction.key, "evicted")
            self._evicted_on.setdefault(speculative.master.job_id, []).append(state.index)
            speculative.master.plan.on_speculative_status(
                speculative.task_id, speculative.attempt, TaskState.KILLED, evicted=True
            )
            self._wake_master(speculative.master.job_id)

    def _drop(self, node_id: str, master: _Master, task_id: str, attempt: int) -> None:
        """A job master stops one of its speculative tasks (cancelled, killed, moved)."""
        state = self._state.get(node_id)
        if state is None:
            return
        key = f"{master.job_id}.{task_id}.{attempt}"
        state.queue.pop(key, None)
        if state.running.pop(key, None) is not None:
            self._changed(self._nodes[node_id], state)

    def _upgrade(self, master: _Master, upgrade: Upgrade) -> None:
        """Alg. 5 line 11: the running speculative task becomes the container's task."""
        container = upgrade.container
        node = self._nodes[container.node_id]
        state = self._state[container.node_id]
        key = f"{master.job_id}.{upgrade.task_id}.{upgrade.attempt}"
        speculative = state.running.pop(key, None)
        if speculative is None:
            master.plan.on_upgrade_failed(upgrade.task_id, upgrade.attempt, "no longer runs")
            return
        self.counts.upgraded += 1
        done = (self.now - speculative.progress_at) * speculative.rate
        task = _Task(
            master.job_id,
            upgrade.task_id,
            upgrade.attempt,
            container.allocation_id,
            container.resources,
            work=max(0.0, speculative.work - done),
            phase=upgrade.task_id.rsplit("-", 1)[0],
        )
        task.duration = task.work
        node.tasks[task.allocation_id] = task
        self._where[task.allocation_id] = node
        self._usage[task.allocation_id] = speculative.usage
        self._start_task(node, task)

    def _finish(self, master: _Master, outcome: tuple[JobState, str], decisions: Decisions) -> None:
        for attempt in master.plan.speculative_attempts():
            self._drop(attempt.node_id, master, attempt.task_id, attempt.number)
        evicted = self._evicted_on.pop(master.job_id, [])
        if evicted:  # Alg. 3: the job's report penalises where its tasks were evicted
            hosts = np.asarray(evicted, dtype=np.int64)
            report = JobReport(hosts, np.full(hosts.size, int(TaskOutcome.EVICTED)))
            self._ratings = self._ratings.updated([report], top_k=self.config.rating_top_k)
        super()._finish(master, outcome, decisions)

    # ------------------------------------------------------------------ the aggregator

    def _aggregate(self) -> None:
        """One aggregator period: sample every node's metrics into its window, rank, publish;
        sample utilisation and the services' latency."""
        states = [self._state[name] for name in self._node_names]
        demand = np.array([s.demand for s in states])
        capacity = np.array([s.capacity for s in states])
        utilisation = np.minimum(1.0, demand / capacity)
        self.used_samples.append((self.now, float(np.minimum(demand, capacity).sum())))
        for state, rho in zip(states, utilisation, strict=True):
            if state.service:
                self.latencies.append(1.0 / (1.0 - min(float(rho), 0.99)))
        self._windows = np.roll(self._windows, -1, axis=2)
        self._windows[:, :, -1] = 0.0
        self._windows[:, 0, -1] = utilisation  # cpu_ut
        self._windows[:, 2, -1] = demand  # load_avg_1, against the cores
        self._queue_windows = np.roll(self._queue_windows, -1, axis=2)
        self._queue_windows[:, 0, -1] = [
            sum(1 for t in self._nodes[n].tasks.values() if not t.state.is_final)
            for n in self._node_names
        ]
        self._queue_windows[:, 1, -1] = [len(s.queue) for s in states]
        self._queue_windows[:, 2, -1] = [len(s.running) for s in states]
        self._candidates = self._rank(states, utilisation)
        if self._unfinished and self._queue:
            self.at(self.now + self.rose.aggregator_period, self._aggregate)

    def _rank(self, states: Sequence[_NodeState], utilisation: np.ndarray) -> tuple[Candidate, ...]:
        placement = self.rose.placement
        limit = self.config.candidate_limit
        if placement == "none":
            return ()
        if placement == "random":
            chosen = self._rng.choice(len(states), size=min(limit, len(states)), replace=False)
        elif placement == "shortest-queue":
            lengths = np.array([len(s.queue) + len(s.running) for s in states], dtype=float)
            chosen = np.lexsort((np.arange(len(states)), lengths))[:limit]
        else:
            windows = self._machine_windows()
            rank = least_loaded_candidates if placement == "least-loaded" else compute_candidates
            chosen = rank(windows, self._ratings, self.config).candidates
        return tuple(
            Candidate(self._node_names[int(i)], f"{self._node_names[int(i)]}:0") for i in chosen
        )

    def _machine_windows(self) -> MachineWindows:
        samples, queue = self._windows, self._queue_windows
        with warnings.catch_warnings():  # the first periods' windows are partly empty
            warnings.simplefilter("ignore", RuntimeWarning)
            filled = np.where(
                np.isnan(samples), np.nanmean(samples, axis=2, keepdims=True), samples
            )
            queue = np.where(np.isnan(queue), np.nanmean(queue, axis=2, keepdims=True), queue)
        capacity = np.ones(samples.shape[:2])
        capacity[:, 2] = self.settings.node_cpu
        return MachineWindows(
            load=np.nan_to_num(filled),
            queue=np.nan_to_num(queue),
            connected=np.ones(samples.shape[0], dtype=np.bool_),
            load_capacity=capacity,
        )


def cpu_pressure(capacity: float, demand: float) -> float:
    """PSI ``some`` of a node, in points: the M/M/c probability that work waits for one of its
    ``capacity`` cores under ``demand`` cores of load (100 once demand reaches capacity)."""
    cores = max(1, int(capacity))
    if demand >= cores:
        return 100.0
    return 100.0 * erlang_c(cores, max(0.0, demand))


def mean_utilisation(simulation: OversubscribedSimulation, until: float) -> float:
    """The cluster's mean CPU utilisation (cores used over capacity) up to ``until``."""
    samples = [used for time, used in simulation.used_samples if time <= until]
    total = simulation.settings.node_cpu * simulation.settings.nodes
    return float(np.mean(samples)) / total if samples and total else math.nan
