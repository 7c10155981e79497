"""The node agent's state and actions, independent of gRPC.

The agent runs tasks through a :class:`TaskRuntime`, turns what the runtime observes into task
events for the RM (RUNNING, SUSPENDED, SUCCEEDED, FAILED, KILLED), and carries out the RM's
commands.  Job masters always run as plain processes (like YARN's application masters), even on
a node whose tasks run in Docker.

Threads: gRPC handlers call the public methods; :meth:`NodeAgent.monitor_once` runs on a monitor
thread and, after a command, on the handler's.  One pass runs at a time (it updates the usage
counters both callers read).  One lock guards the agent's own tables; runtime calls happen
outside it where they may block (stop grace periods, freezes).

Job masters are named ``<job>.master.<attempt>`` on the node: a second attempt of one job
master never collides with the first.  Task ids of real tasks (``<phase>-<index>``) can never be
``master``; the service refuses any other shape.
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from node_agent.core import (
    SWAP_GROWTH_BYTES,
    Event,
    Freeze,
    Instruction,
    Kill,
    NodeCore,
    Observed,
    Purpose,
    RaiseClock,
    Refused,
    RestoreClock,
    SetLimits,
    Snapshot,
    Started,
    Stepped,
    SwapPresence,
    TaskView,
    Thaw,
    Tick,
    reported_state,
)
from node_agent.cpufreq import SYSFS_CPUS, Dvfs
from node_agent.cpufreq import detect as detect_cpufreq
from node_agent.lease import Lease
from node_agent.preemption import machine_has_swap
from node_agent.runtime.base import (
    ResourceLimits,
    RunObservation,
    RunState,
    RuntimeError_,
    TaskExistsError,
    TaskLaunch,
    TaskRuntime,
    TaskUsage,
    UnknownTaskError,
)
from node_agent.service_monitor import MACHINE_PRESSURE, ServiceMonitor
from node_agent.speculative import (
    EVICTION_GRACE_S,
    NodeFacts,
    PassResult,
    QueuedLaunch,
    QueueState,
    SpeculativeQueue,
    SpeculativeStatus,
    speculative_allocation_id,
)
from node_agent.sprint import Mechanism
from plumbing.intervals import FENCE_STOP_GRACE_S, MONITOR_INTERVAL_S
from plumbing.node_protocol import (
    ResizeAllocation,
    ResumeAllocation,
    SprintAllocation,
    StopAllocation,
    SuspendAllocation,
    TaskReport,
)
from plumbing.tls import write_tls_dir
from policies.oversubscription.config import OversubscriptionConfig, OversubscriptionMode
from policies.scheduling.cpu_sets import Pinned, choose_cpuset
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources
from policies.scheduling.service_spec import ServiceSpec

log = logging.getLogger(__name__)

MASTER_TASK_ID = "master"


def task_key(job_id: str, task_id: str, attempt: int) -> str:
    """The name of a task attempt on this node (also its cgroup / container name suffix)."""
    return f"{job_id}.{task_id}.{attempt}"


@dataclass
class _Reservation:
    """A regular task's cpuset, chosen under the agent's lock for a start, upgrade or resize
    that is under way: later choices count it until a monitor pass that began after the
    runtime call returned has seen the result (``settled``: the passes begun by then)."""

    pinned: Pinned
    settled: int | None = None


class AllocationBusyError(RuntimeError_):
    """A live task already runs in the allocation: one container runs one task attempt."""


@dataclass(frozen=True)
class TaskUsageRate:
    """A live task's CPU use over the last monitor interval (cores) and its memory now."""

    cpu_cores: float
    memory_bytes: int


@dataclass(frozen=True)
class AgentConfig:
    node_id: str
    cpu_ids: tuple[int, ...]
    capacity: Resources
    exited_retention_s: float = 24 * 3600.0
    # With TLS: the cluster CA (PEM), and where the TLS directories of the job masters launched
    # here are written (each gets the certificate the RM issued for its job, never the agent's).
    ca_pem: bytes | None = None
    masters_tls_root: Path | None = None
    # ROSE's UP/RP switch and thresholds: what the service watch judges interference by.
    oversubscription: OversubscriptionConfig = field(default_factory=OversubscriptionConfig)
    # Where the speculative queue keeps what must survive a restart (None: nowhere).
    state_dir: Path | None = None
    # Where cpufreq lives (DiAS's DVFS sprint, node_agent/cpufreq.py); tests give a fake tree.
    cpufreq_root: Path = SYSFS_CPUS
    # How often the monitor loop looks (and checks the lease, node_agent/lease.py).
    monitor_interval: float = MONITOR_INTERVAL_S
    # The machine's PSI files, which the service watch judges where a task's cgroup keeps none
    # (cgroup v1); tests give files they write, so that the host's own load is not judged.
    machine_pressure: Path = MACHINE_PRESSURE
    # --load-scope own: the node's utilisation is its own tasks' share of its capacity, not
    # the host's (node_agent/metrics/share.py): metrics and speculative admission judge that.
    own_share: bool = False


class NodeAgent:
    """Runs and observes this node's tasks: the shell around :class:`NodeCore`, which decides
    how the RM's preemptions and sprints are carried out (see the module docstring)."""

    def __init__(
        self, config: AgentConfig, tasks: TaskRuntime, masters: TaskRuntime | None = None
    ) -> None:
        self.config = config
        self.tasks = tasks
        self.masters = masters or tasks
        self._lock = threading.Lock()
        self._monitor_lock = threading.Lock()  # one monitor pass at a time
        self._reported: dict[str, TaskState] = {}
        self._stop_requested: set[str] = set()
        self._outbox: list[TaskReport] = []
        self._observed: dict[str, RunObservation] = {}
        self._usage_prev: dict[str, tuple[float, float]] = {}
        self.used = Resources()
        self.task_usage: dict[str, TaskUsageRate] = {}
        self._master_tls_removed: set[str] = set()  # exited job masters already cleaned up
        self._swap: dict[str, int] = {}  # each live task's memory in swap at the last look
        self._swapping: set[str] = set()  # tasks whose swap grew at the last look
        # Cpusets chosen for starts, upgrades and resizes the observations may not show yet
        # (tasks started together must not all see the same snapshot), and monitor passes begun.
        self._reserved: dict[str, _Reservation] = {}
        self._passes = 0
        has_swap = machine_has_swap()
        if not has_swap:
            log.info(
                "swap: none on this machine: a preemption can take only CPU from a live task "
                "here (the RM kills where memory is needed)"
            )
        # DiAS sprints the RM asks for: DVFS where the machine has it, else CPU quota.
        detection = detect_cpufreq(config.cpufreq_root)
        self._dvfs = Dvfs(detection) if detection.available else None
        if self._dvfs is not None:
            log.info("sprinting: by DVFS (%d CPUs can run faster)", len(detection.cpus))
        else:
            log.info(
                "sprinting: by CPU quota (%s): a sprinting task gets idle cores up to its "
                "grant times the sprint factor",
                detection.reason,
            )
        # What the node decides (preemption steps, sprints), pure; called under the lock.
        self.core = NodeCore(
            config.capacity.cpu,
            has_swap=has_swap,
            mechanism=Mechanism.DVFS if self._dvfs is not None else Mechanism.CPU_QUOTA,
        )
        for runtime in self._runtimes():
            for observation in runtime.observe():
                self._observed[observation.task_key] = observation
        self._decide(Snapshot(_live_views(self._observed)))
        self._sweep_master_tls()
        # Its lease on the RM (fencing, node_agent/lease.py), kept across restarts.
        self.lease = Lease(config.state_dir, config.monitor_interval)
        self.lease.keep_only(self._observed)
        self._fenced: dict[str, str] = {}  # tasks stopped by fencing: why
        # The services it runs, watched (ROSE Sec. 6.2); its probe thread starts with the first.
        self.services = ServiceMonitor(
            self.pressure_dir,
            self.service_host,
            config.oversubscription,
            machine_pressure=config.machine_pressure,
            state_dir=config.state_dir,
        )
        self._probing = False
        live = [k for k, o in self._observed.items() if o.state is not RunState.EXITED]
        if self.services.restore(live):
            self._probing = True
            self.services.start()
        # Speculative tasks job masters put here (ROSE Sec. 3.2, 6): queued, admitted, throttled.
        self.speculative = SpeculativeQueue(config.oversubscription, config.state_dir)

    @property
    def has_swap(self) -> bool:
        """Whether the machine has swap (at the last look)."""
        return self.core.has_swap

    def _decide(self, event: Event) -> list[Instruction]:
        """The core's answer to ``event``.  Under the lock (or before any thread runs)."""
        return self.core.handle(event, time.time())

    def _runtimes(self) -> list[TaskRuntime]:
        return [self.tasks] if self.masters is self.tasks else [self.tasks, self.masters]

    def _runtime_of(self, key: str) -> TaskRuntime:
        with self._lock:
            observation = self._observed.get(key)
        if observation is not None and observation.task_id == MASTER_TASK_ID:
            return self.masters
        return self.tasks

    # ------------------------------------------------------------------ commands

    def start_task(
        self,
        job_id: str,
        task_id: str,
        attempt: int,
        allocation_id: str,
        argv: Sequence[str],
        resources: Resources,
        image: str | None,
        env: dict[str, str] | None = None,
        service: ServiceSpec | None = None,
        *,
        speculative: bool = False,
        cpuset: tuple[int, ...] | None = None,
    ) -> RunObservation:
        """Start a task attempt; TaskExistsError when that attempt is already known here,
        AllocationBusyError when another live task runs in the allocation.  ``service``: the
        task is a service's, watched from now on (its probe, its interference indicators).
        ``speculative``: started from the speculative queue, in the runtime's low-weight class,
        on ``cpuset`` (the second-class cores).  A regular task's cores are chosen by granted
        CPU (:func:`choose_cpuset`) among the regular tasks', starts still under way included,
        and reserved before the lock is released: speculative ones give way."""
        key = task_key(job_id, task_id, attempt)
        runtime = self.masters if task_id == MASTER_TASK_ID else self.tasks
        with self._lock:
            if key in self._observed or key in self._reserved:
                raise TaskExistsError(f"task {key} already exists on this node")
            live = {k: o for k, o in self._observed.items() if o.state is not RunState.EXITED}
            for other in live.values():
                if other.allocation_id == allocation_id and other.job_id == job_id:
                    raise AllocationBusyError(
                        f"allocation {allocation_id} already runs {other.task_key}"
                    )
            if cpuset is None:
                cpuset = choose_cpuset(self.config.cpu_ids, self._pinned(), resources.cpu)
            reservation = None if speculative else self._reserve(key, cpuset, resources.cpu)
        launch = TaskLaunch(
            task_key=key,
            job_id=job_id,
            task_id=task_id,
            attempt=attempt,
            allocation_id=allocation_id,
            argv=tuple(argv),
            limits=ResourceLimits(resources.cpu, resources.memory_mb, cpuset),
            image=image or None,
            env=dict(env or {}),
            speculative=speculative,
        )
        try:
            runtime.start(launch)
        except BaseException:
            self._release(key, reservation)
            raise
        observation = RunObservation(
            task_key=key,
            job_id=job_id,
            task_id=task_id,
            attempt=attempt,
            allocation_id=allocation_id,
            state=RunState.RUNNING,
            limits=launch.limits,
            started_at=time.time(),
            speculative=speculative,
        )
        with self._lock:
            self._observed[key] = observation
            self._settle(reservation)
            refits = self._decide(Started(_view(observation)))
        log.info(
            "started %s%s (allocation %s, %g cpu on cpus %s, %d MiB)",
            key,
            " speculative" if speculative else "",
            allocation_id,
            resources.cpu,
            ",".join(map(str, cpuset)),
            resources.memory_mb,
        )
        if service is not None:
            self.services.add(key, service)
            if not self._probing:
                self._probing = True
                self.services.start()
        self._carry_out(refits)  # sprints by CPU quota take idle cores only, never its grant
        return observation

    def set_oversubscription_mode(self, mode: str) -> None:
        """The cluster's UP/RP switch, as the RM hands it at registration."""
        try:
            wanted = OversubscriptionMode(mode)
        except ValueError:
            log.warning("the resource manager's oversubscription mode %r is unknown: kept", mode)
            return
        if self.services.config.mode is not wanted:
            self.services.config = replace(self.services.config, mode=wanted)
            self.speculative.config = replace(self.speculative.config, mode=wanted)
            log.info("oversubscription: %s (the cluster's)", wanted.value)

    def promote(self, key: str, allocation_id: str, resources: Resources) -> RunObservation:
        """Make a running speculative task the regular task of ``allocation_id`` (a container
        the RM granted here), in place (ROSE Alg. 5 line 11): out of the speculative class, on
        cores of its own, at the container's limits."""
        with self._lock:
            observed = self._observed.get(key)
            if observed is None or observed.state is RunState.EXITED:
                raise UnknownTaskError(f"no live task {key} on this node")
            if not observed.speculative:
                if observed.allocation_id == allocation_id:
                    return observed  # upgraded already (a retried call)
                raise AllocationBusyError(f"task {key} is not speculative")
            for other in self._observed.values():
                if (
                    other.allocation_id == allocation_id
                    and other.job_id == observed.job_id
                    and other.state is not RunState.EXITED
                ):
                    raise AllocationBusyError(
                        f"allocation {allocation_id} already runs {other.task_key}"
                    )
            cpuset = choose_cpuset(self.config.cpu_ids, self._pinned(but=key), resources.cpu)
            reservation = self._reserve(key, cpuset, resources.cpu)
        limits = ResourceLimits(resources.cpu, resources.memory_mb, cpuset)
        try:
            self.tasks.promote(key, allocation_id, limits)
        except BaseException:
            self._release(key, reservation)
            raise
        upgraded = replace(observed, allocation_id=allocation_id, limits=limits, speculative=False)
        with self._lock:
            self._observed[key] = upgraded
            self._decide(Observed(_view(upgraded)))
            self._settle(reservation)
        self.speculative.upgraded(key)
        log.info(
            "upgraded speculative %s to allocation %s (%s)", key, allocation_id, _shown(resources)
        )
        return upgraded

    def queue_state(self) -> QueueState:
        """The speculative queue's figures, for the heartbeat."""
        return self.speculative.state(self.observations())

    def speculative_statuses(
        self, job_id: str, observed: Sequence[RunObservation] | None = None
    ) -> list[SpeculativeStatus]:
        """The job's speculative tasks here (``observed``: from this look, else a new one)."""
        if observed is None:
            observed = self.observations()
        return self.speculative.statuses(job_id, observed, self._state_of)

    def _state_of(self, observation: RunObservation) -> tuple[TaskState, str]:
        event = self.event_for(observation)
        return event.state, event.message

    def _node_facts(self) -> NodeFacts:
        """What the speculative queue's pass needs of the node now."""
        config = self.config
        return NodeFacts(
            config.capacity,
            config.cpu_ids,
            self.services.keys(),
            tuple(self.services.anomalous()),
            self.used if config.own_share else None,
        )

    def _carry_out_pass(self, result: PassResult) -> None:
        """Evict, then re-pin, what the speculative queue's pass decided (under the monitor
        lock, as part of the pass); a task may have ended meanwhile."""
        for eviction in result.evictions:
            log.warning("evicting speculative %s: %s", eviction.key, eviction.why)
            try:
                self.stop(eviction.key, EVICTION_GRACE_S)
            except Exception as error:
                log.info("evicting %s: %s", eviction.key, error)
        for repin in result.repins:
            try:
                self.resize(repin.key, repin.limits, repin.cpuset)
            except Exception as error:
                log.info("re-pinning %s: %s", repin.key, error)

    def _start_speculative(self, launch: QueuedLaunch, cpuset: tuple[int, ...]) -> None:
        """Start a task the speculative queue admitted, in the low-weight class on ``cpuset``."""
        self.start_task(
            launch.job_id,
            launch.task_id,
            launch.attempt,
            speculative_allocation_id(launch.key),
            launch.argv,
            launch.resources,
            launch.image,
            dict(launch.env),
            speculative=True,
            cpuset=cpuset,
        )

    def service_host(self, key: str) -> str | None:
        """Where a service task's probe connects: its runtime says (None: not known now)."""
        try:
            return self._runtime_of(key).service_host(key)
        except Exception:  # it may exit meanwhile; the next probe asks again
            return None

    def close_services(self) -> None:
        """Stop the service probes' thread (at shutdown)."""
        if self._probing:
            self.services.stop()

    def launch_master(
        self,
        job_id: str,
        allocation_id: str,
        resources: Resources,
        rm_address: str,
        attempt: int = 1,
        tls_cert_chain_pem: bytes = b"",
        tls_key_pem: bytes = b"",
    ) -> None:
        """Start attempt ``attempt`` of the job's job master, unless it already exists here.
        With TLS, it gets a TLS directory of its own, with the certificate and key the RM issued
        for it (``tls_*``)."""
        argv = [
            sys.executable,
            "-m",
            "job_master",
            "--rm",
            rm_address,
            "--job",
            job_id,
            "--attempt",
            str(attempt),
        ]
        root, ca_pem = self.config.masters_tls_root, self.config.ca_pem
        if root is not None and ca_pem is not None:
            if not tls_cert_chain_pem or not tls_key_pem:
                log.error(
                    "job master attempt %d of %s: the RM sent no certificate for it (does it run "
                    "without TLS?); not started",
                    attempt,
                    job_id,
                )
                return
            directory = root / f"{job_id}-{attempt}"
            write_tls_dir(directory, ca_pem, tls_cert_chain_pem, tls_key_pem)
            argv += ["--tls-dir", str(directory)]
        else:
            argv.append("--insecure")  # this agent runs without TLS: so does its cluster
        try:
            self.start_task(job_id, MASTER_TASK_ID, attempt, allocation_id, argv, resources, None)
        except (TaskExistsError, AllocationBusyError):
            log.debug("job master attempt %d of %s already runs here", attempt, job_id)

    def stop(self, key: str, grace_seconds: float = 5.0) -> None:
        with self._lock:
            self._stop_requested.add(key)
        self._runtime_of(key).stop(key, grace_seconds)
        log.info("stopped %s", key)

    def stop_allocation(self, job_id: str, allocation_id: str, reason: str) -> int:
        """Stop every live task of the allocation (or of the job, if allocation_id is empty)."""
        with self._lock:
            kills = self._decide(StopAllocation(job_id, allocation_id, reason))
        self._carry_out(kills)
        return len(kills)

    # ------------------------------------------------------------------ fencing

    def fence(self, silent_s: float) -> list[str]:
        """The lease expired (the RM not reached for ``silent_s`` seconds): stop every live
        task and job master here, but the tasks whose job runs on when its node is lost, and
        empty the speculative queue; the keys stopped.  Their events say KILLED, "fenced: ...".
        Logs once, naming the tasks stopped and those left running."""
        reason = (
            f"fenced: the resource manager not reached for {silent_s:.1f} s (its node timeout "
            f"is {self.lease.node_timeout:g} s): it counts this node lost and retries its tasks "
            "elsewhere"
        )
        with self._lock:
            live = [k for k, o in self._observed.items() if o.state is not RunState.EXITED]
        self.lease.keep_only(live)
        kept = [key for key in live if self.lease.runs_on(key)]
        stopped = [key for key in live if key not in kept]
        with self._lock:
            for key in stopped:
                self._fenced[key] = reason
        cancelled = self.speculative.cancel_all(reason)
        log.warning(
            "%s: stopping %d tasks (%s)%s%s",
            reason,
            len(stopped),
            _listed(stopped),
            f"; {len(kept)} left running, their jobs say on_node_lost: run_on ({_listed(kept)})"
            if kept
            else "",
            f"; {cancelled} queued speculative tasks cancelled" if cancelled else "",
        )
        for key in stopped:
            try:
                self.stop(key, FENCE_STOP_GRACE_S)
            except (UnknownTaskError, RuntimeError_) as error:
                log.warning("fencing: %s not stopped: %s", key, error)
        return stopped

    def keep_on_node_lost(self, key: str) -> None:
        """Task ``key``'s job says ``on_node_lost: run_on``: fencing leaves it running."""
        self.lease.run_on(key)

    # ------------------------------------------------------------------ the core's commands

    def suspend_allocation(
        self, job_id: str, allocation_id: str, reason: str, limits: Resources | None = None
    ) -> int:
        """Freeze the live tasks of an allocation (the RM's preemption); with ``limits`` (an
        immediate preemption's footprint) then cut them to those, so their pages go to swap.
        Returns how many tasks."""
        with self._lock:
            keys = self.core.live_keys(job_id, allocation_id)
            instructions = self._decide(SuspendAllocation(job_id, allocation_id, reason, limits))
        self._carry_out(instructions)
        return len(keys)

    def resume_allocation(
        self, job_id: str, allocation_id: str, limits: Resources | None = None
    ) -> int:
        """Restore the limits of an allocation's tasks (``limits``: what the RM says it may run
        at), then thaw them."""
        with self._lock:
            keys = self.core.live_keys(job_id, allocation_id)
            instructions = self._decide(ResumeAllocation(job_id, allocation_id, limits))
        self._carry_out(instructions)
        return len(keys)

    def resize_allocation(
        self,
        job_id: str,
        allocation_id: str,
        limits: Resources,
        step: Resources | None = None,
        freeze_on_swap: bool = False,
    ) -> int:
        """Set the limits of an allocation's live tasks (CPUs chosen afresh for the new size).
        With ``step`` (a graceful preemption) the limits go down by at most ``step`` per
        monitor round (:meth:`preemption_round`), and with ``freeze_on_swap`` the task is frozen
        once it swaps.  A repeated command changes nothing under way."""
        with self._lock:
            keys = self.core.live_keys(job_id, allocation_id)
            before = self.core.graceful()
            instructions = self._decide(
                ResizeAllocation(job_id, allocation_id, limits, step, freeze_on_swap)
            )
            begun = [k for k, g in self.core.graceful().items() if before.get(k) != g]
        for key in begun:
            log.info(
                "graceful preemption of %s: to %s by %s per round%s",
                key,
                _shown(limits),
                _shown(step),
                ", frozen once it swaps" if freeze_on_swap else "",
            )
        self._carry_out(instructions)
        return len(keys)

    def sprint_allocation(self, job_id: str, allocation_id: str, factor: float) -> int:
        """Sprint the allocation's live tasks at ``factor`` (1: end their sprint); see
        :mod:`node_agent.sprint`.  A repeated command changes nothing under way."""
        with self._lock:
            keys = self.core.live_keys(job_id, allocation_id)
            instructions = self._decide(SprintAllocation(job_id, allocation_id, factor))
        self._carry_out(instructions)
        return len(keys)

    def preemption_round(self) -> None:
        """One round of the graceful preemptions under way: each task's limits go down by one
        step, CPU first; a task that swaps is frozen (if asked) and left where it is."""
        with self._lock:
            instructions = self._decide(Tick())
        self._carry_out(instructions, tolerant=True)

    # ------------------------------------------------------------------ the shell

    def _carry_out(self, instructions: Sequence[Instruction], *, tolerant: bool = False) -> None:
        """Carry out the core's instructions in order on the runtimes.  One the runtime refuses
        is told to the core, whose answer is carried out (tolerantly), and the task's later
        instructions are skipped; the error is raised unless the task is gone
        (UnknownTaskError) or ``tolerant`` (a monitor round's: any runtime error)."""
        skipped: set[str] = set()
        for instruction in instructions:
            key = getattr(instruction, "key", None)
            if key in skipped:
                continue
            try:
                self._apply(instruction)
            except RuntimeError_ as error:
                if key is not None:
                    skipped.add(key)
                if isinstance(instruction, SetLimits) and instruction.purpose is Purpose.STEP:
                    log.info("graceful step of %s stopped: %s", key, error)
                with self._lock:
                    answer = self._decide(Refused(instruction, str(error)))
                self._carry_out(answer, tolerant=True)
                if not (tolerant or isinstance(error, UnknownTaskError)):
                    raise
            except Exception as error:
                if isinstance(instruction, SetLimits) and instruction.purpose is Purpose.SPRINT:
                    with self._lock:  # not carried out: not reported as sprinting either
                        self._decide(Refused(instruction, str(error)))
                raise

    def _apply(self, instruction: Instruction) -> None:
        """Carry out one instruction (see :meth:`_carry_out`)."""
        if isinstance(instruction, SetLimits):
            self._set_limits(instruction)
        elif isinstance(instruction, Freeze):
            log.info("suspending %s: %s", instruction.key, instruction.why)
            self.suspend(instruction.key)
        elif isinstance(instruction, Thaw):
            self.resume(instruction.key)
            current = self._current_limits(instruction.key)
            log.info("resumed %s: limits restored to %s", instruction.key, _shown(current))
        elif isinstance(instruction, Kill):
            log.info("stopping %s: %s", instruction.key, instruction.reason)
            self.stop(instruction.key)
        elif isinstance(instruction, RaiseClock):
            if self._dvfs is not None:
                self._dvfs.raise_clock()
        elif isinstance(instruction, RestoreClock) and self._dvfs is not None:
            self._dvfs.restore_clock()

    def _set_limits(self, instruction: SetLimits) -> None:
        """Resize a task as the core says.  A cut or a graceful step writes CPU first, then the
        memory (a task short of CPU dirties fewer pages, so its memory is reclaimed faster,
        BIG-C Sec. 3.2); a cut whose memory the kernel cannot reclaim keeps it (logged); a step
        tells the core how much the task's swap grew meanwhile (:class:`Stepped`)."""
        key, limits, purpose = instruction.key, instruction.limits, instruction.purpose
        if purpose is Purpose.CUT:
            self._cut(key, limits, instruction.note)
        elif purpose is Purpose.STEP:
            self._step(key, limits)
        else:
            self.resize(key, limits, ())
            if purpose in (Purpose.SPRINT, Purpose.REFIT):
                factor = self.core.factor_of(key)
                base = self.core.base_of(key) or limits
                log.info(
                    "sprinting %s: %g cpu (grant %g, factor %g)", key, limits.cpu, base.cpu, factor
                )
            elif purpose is Purpose.SPRINT_END:
                log.info("sprint of %s over: back to %g cpu", key, limits.cpu)

    def _cut(self, key: str, limits: Resources, note: str) -> None:
        current = self._current_limits(key)
        if current is None:
            raise UnknownTaskError(f"no live task {key} on this node")
        self.resize(key, Resources(limits.cpu, current.memory_mb), ())
        if note:
            log.warning("%s: %s", key, note)
        if limits.memory_mb >= current.memory_mb:
            return
        try:
            self.resize(key, limits, ())
        except RuntimeError_ as error:
            log.warning("%s: memory stays at %d MiB: %s", key, current.memory_mb, error)
            return
        log.info(
            "%s suspended to the footprint: %g cpu, %d MiB (swap %d MiB)",
            key,
            limits.cpu,
            limits.memory_mb,
            (self._runtime_of(key).swap_bytes(key) or 0) >> 20,
        )

    def _step(self, key: str, step: Resources) -> None:
        current = self._current_limits(key)
        if current is None:
            raise UnknownTaskError(f"no live task {key} on this node")
        swap_before = self._runtime_of(key).swap_bytes(key) or 0
        if step.cpu != current.cpu:
            self.resize(key, Resources(step.cpu, current.memory_mb), ())
        if step.memory_mb != current.memory_mb:
            self.resize(key, step, ())
        log.info("graceful step of %s: %s -> %s", key, _shown(current), _shown(step))
        swap_after = self._runtime_of(key).swap_bytes(key) or 0
        with self._lock:
            answer = self._decide(Stepped(key, swap_after - swap_before))
        self._carry_out(answer, tolerant=True)

    def _current_limits(self, key: str) -> Resources | None:
        with self._lock:
            observed = self._observed.get(key)
        if observed is None or observed.state is RunState.EXITED:
            return None
        return Resources(observed.limits.cpu, observed.limits.memory_mb)

    def suspend(self, key: str) -> None:
        self._runtime_of(key).suspend(key)
        with self._lock:
            observed = self._observed.get(key)
            if observed is not None and observed.state is RunState.RUNNING:
                self._observed[key] = replace(observed, state=RunState.SUSPENDED)
                self._decide(Observed(_view(self._observed[key])))
        log.info("suspended %s", key)

    def resume(self, key: str) -> None:
        self._runtime_of(key).resume(key)
        log.info("resumed %s", key)

    def resize(self, key: str, resources: Resources, cpuset: Sequence[int]) -> ResourceLimits:
        with self._lock:
            current = self._observed.get(key)
            if current is None:
                raise UnknownTaskError(f"no task {key} on this node")
            chosen = tuple(cpuset) or choose_cpuset(
                self.config.cpu_ids, self._pinned(but=key), resources.cpu
            )
            reservation = None if current.speculative else self._reserve(key, chosen, resources.cpu)
        limits = ResourceLimits(resources.cpu, resources.memory_mb, chosen)
        try:
            self._runtime_of(key).resize(key, limits)
        except BaseException:
            self._release(key, reservation)
            raise
        with self._lock:
            observed = self._observed.get(key)
            if observed is not None:
                self._observed[key] = replace(observed, limits=limits)
                if observed.state is not RunState.EXITED:
                    self._decide(Observed(_view(self._observed[key])))
            self._settle(reservation)
        log.info(
            "resized %s to %g cpu on cpus %s, %d MiB", key, limits.cpu, chosen, limits.memory_mb
        )
        return limits

    def _pinned(self, but: str | None = None) -> dict[str, Pinned]:
        """The live regular tasks' cpusets and granted CPU, reservations under way included
        (and overriding what was observed), ``but`` one.  Speculative tasks give way: they hold
        no grant.  Under the lock."""
        pinned = {
            k: Pinned(o.limits.cpuset, o.limits.cpu)
            for k, o in self._observed.items()
            if k != but and o.state is not RunState.EXITED and not o.speculative
        }
        pinned.update((k, r.pinned) for k, r in self._reserved.items() if k != but)
        return pinned

    def _reserve(self, key: str, cpuset: tuple[int, ...], cpu: float) -> _Reservation:
        """Count ``key`` on ``cpuset`` in every choice from now on.  Under the lock."""
        reservation = _Reservation(Pinned(cpuset, cpu))
        self._reserved[key] = reservation
        return reservation

    def _settle(self, reservation: _Reservation | None) -> None:
        """The runtime call of ``reservation`` returned: the next monitor pass will see it."""
        if reservation is not None:
            reservation.settled = self._passes

    def _release(self, key: str, reservation: _Reservation | None) -> None:
        """The runtime call failed: nothing runs on the reserved cpuset."""
        with self._lock:
            if reservation is not None and self._reserved.get(key) is reservation:
                del self._reserved[key]

    def usage(self, observation: RunObservation) -> TaskUsage | None:
        """Current usage of a live task; None once it exited (or vanished meanwhile)."""
        if observation.state is RunState.EXITED:
            return None
        try:
            return self._runtime_of(observation.task_key).usage(observation.task_key)
        except Exception:  # it may exit between observation and measurement
            return None

    def logs(self, key: str) -> bytes:
        return self._runtime_of(key).logs(key)

    def pressure_dir(self, key: str) -> Path | None:
        """The task's cgroup v2 directory for its PSI files, or None (see TaskRuntime)."""
        return self._runtime_of(key).pressure_dir(key)

    def drain(self) -> int:
        """Stop every task and remove every cgroup/container of this node; its speculative
        queue is emptied first, and the starts already admitted are waited for (under the monitor
        lock: no pass may admit one meanwhile)."""
        with self._monitor_lock:
            cancelled = self.speculative.cancel_all("the node was drained")
            if not self.speculative.wait_for_starts():  # those admitted before: stopped below
                log.warning("drain: speculative starts still under way after 60 s")
            with self._lock:
                live = sum(1 for o in self._observed.values() if o.state is not RunState.EXITED)
            for runtime in self._runtimes():
                runtime.purge()
            with self._lock:
                self._observed.clear()
                self._reported.clear()
                self._reserved.clear()
                ended = self._decide(Snapshot(()))
            self._carry_out(ended)
        if cancelled:
            log.info("drained: %d queued speculative tasks cancelled", cancelled)
        log.info("drained: %d live tasks stopped, cgroups and containers removed", live)
        return live

    # ------------------------------------------------------------------ observation

    def observations(self) -> list[RunObservation]:
        with self._lock:
            return list(self._observed.values())

    def registration_events(self) -> list[TaskReport]:
        """What a registration tells the RM, from one look: the events not yet taken from the
        outbox (a task that ended since the last report: its final event, or the RM would count
        it lost for missing from the snapshot and ignore the late success), then the current
        state of every task not yet reported final."""
        with self._lock:
            return [*self._outbox, *self._live_events_locked()]

    def live_events(self) -> list[TaskReport]:
        """The current state of every task not yet reported final (heartbeat reconciliation)."""
        with self._lock:
            return self._live_events_locked()

    def _live_events_locked(self) -> list[TaskReport]:
        return [
            self.event_for(o)
            for key, o in self._observed.items()
            if not self._reported.get(key, TaskState.RUNNING).is_final
        ]

    def monitor_once(self, now: float) -> None:
        """Observe the runtimes, queue events for changed tasks, refresh usage, prune old tasks.

        Passes are serialised: a command handler's pass waits for the monitor thread's."""
        with self._monitor_lock:
            with self._lock:
                self._passes += 1
                this_pass = self._passes
            observed: dict[str, RunObservation] = {}
            for runtime in self._runtimes():
                for observation in runtime.observe():
                    observed[observation.task_key] = observation
            used, per_task = self._measure_usage(observed, now)
            self._look_at_swap(observed)
            self.services.keep_only(
                key for key, o in observed.items() if o.state is not RunState.EXITED
            )
            self.services.sample(now)
            with self._lock:
                self._observed = observed
                ended = self._decide(Snapshot(_live_views(observed)))
                # What began after a reservation's runtime call returned shows its result.
                for key, reservation in list(self._reserved.items()):
                    if reservation.settled is not None and reservation.settled < this_pass:
                        del self._reserved[key]
                self.used = used
                self.task_usage = per_task
                for key, observation in observed.items():
                    event = self.event_for(observation)
                    if self._reported.get(key) != event.state:
                        self._reported[key] = event.state
                        self._outbox.append(event)
            self._carry_out(ended)  # (a DVFS clock restored: no task sprints any more)
            self._prune(observed, now)
            fenced = self.lease.fenced_problem()
            if fenced is not None:  # nothing queued is admitted while fenced (a race's leftover)
                self.speculative.cancel_all(f"fenced: {fenced}")
            result = self.speculative.run_pass(observed, now, self._node_facts())
            self._carry_out_pass(result)
        # (the next pass need not wait for the containers)
        self.speculative.start(result.starts, self._start_speculative)

    def speculative_pass(self, now: float) -> None:
        """The speculative queue's pass over what the last monitor pass observed, and the tasks
        started since: admission at once when a task is enqueued, without asking the runtime
        about every task again (a Docker engine takes a call per container)."""
        if self.lease.fenced_problem() is not None:
            return  # fenced: nothing is admitted until the RM is reached again
        with self._monitor_lock:
            with self._lock:
                observed = dict(self._observed)
            result = self.speculative.run_pass(observed, now, self._node_facts())
            self._carry_out_pass(result)
        self.speculative.start(result.starts, self._start_speculative)

    def _look_at_swap(self, observed: dict[str, RunObservation]) -> None:
        """Each live task's memory in swap, and whether it grew since the last look; whether
        the machine has swap at all (it may be turned on or off while the agent runs)."""
        has_swap = machine_has_swap()
        if has_swap != self.has_swap:
            log.info("swap %s on this machine", "enabled" if has_swap else "gone")
            with self._lock:
                self._decide(SwapPresence(has_swap))
        swap: dict[str, int] = {}
        swapping: set[str] = set()
        for key, observation in observed.items():
            if observation.state is RunState.EXITED:
                continue
            runtime = self.masters if observation.task_id == MASTER_TASK_ID else self.tasks
            try:
                amount = runtime.swap_bytes(key)
            except Exception:  # it may exit between observe() and the read
                amount = None
            if amount is None:
                continue
            swap[key] = amount
            if amount - self._swap.get(key, amount) > SWAP_GROWTH_BYTES:
                swapping.add(key)
        with self._lock:
            self._swap, self._swapping = swap, swapping

    def take_outbox(self) -> list[TaskReport]:
        with self._lock:
            events, self._outbox = self._outbox, []
            return events

    def requeue(self, events: Sequence[TaskReport]) -> None:
        """Put back events the RM did not acknowledge, ahead of newer ones."""
        with self._lock:
            self._outbox[:0] = events

    def acknowledged(self, events: Sequence[TaskReport]) -> None:
        """The RM has these; release the containers/cgroups of those that ended."""
        for event in events:
            if not event.state.is_final:
                continue
            key = task_key(event.job_id, event.task_id, event.attempt)
            try:
                self._runtime_of(key).cleanup(key)
            except UnknownTaskError:
                pass
            except Exception:
                log.exception("cleanup of %s failed; will retry at the next prune", key)

    def event_for(self, observation: RunObservation) -> TaskReport:
        state, message = self._lifecycle_state(observation)
        key = observation.task_key
        limits = self.core.base_of(key) or Resources(
            observation.limits.cpu, observation.limits.memory_mb
        )
        return TaskReport(
            job_id=observation.job_id,
            task_id=observation.task_id,
            attempt=observation.attempt,
            allocation_id=observation.allocation_id,
            state=state,
            exit_code=observation.exit_code or 0,
            message=message,
            timestamp=observation.finished_at or observation.started_at,
            start_time=observation.started_at,
            job_master=observation.task_id == MASTER_TASK_ID,
            limits=None if state.is_final else limits,
            swapping=key in self._swapping,
            swap_bytes=self._swap.get(key, 0),
            speculative=observation.speculative,
            sprint_factor=self.core.factor_of(key),
        )

    def _lifecycle_state(self, observation: RunObservation) -> tuple[TaskState, str]:
        if observation.state is not RunState.EXITED:
            return reported_state(
                exited=False, frozen=observation.state is RunState.SUSPENDED, exit_code=0
            )
        key = observation.task_key
        return reported_state(
            exited=True,
            frozen=False,
            exit_code=observation.exit_code or 0,
            evicted=self.speculative.eviction_of(key),
            fenced=self._fenced.get(key),
            stop_requested=key in self._stop_requested,
        )

    def _measure_usage(
        self, observed: dict[str, RunObservation], now: float
    ) -> tuple[Resources, dict[str, TaskUsageRate]]:
        """The node's total usage and each live task's, from the CPU time consumed since the
        previous pass (a task seen for the first time counts 0 cores)."""
        cpu = 0.0
        memory = 0
        previous = self._usage_prev
        current: dict[str, tuple[float, float]] = {}
        per_task: dict[str, TaskUsageRate] = {}
        for key, observation in observed.items():
            if observation.state is RunState.EXITED:
                continue
            runtime = self.masters if observation.task_id == MASTER_TASK_ID else self.tasks
            try:
                usage = runtime.usage(key)
            except Exception:  # the task may exit between observe() and usage()
                continue
            current[key] = (now, usage.cpu_seconds)
            rate = 0.0
            if key in previous and now > previous[key][0]:
                rate = max((usage.cpu_seconds - previous[key][1]) / (now - previous[key][0]), 0.0)
            per_task[key] = TaskUsageRate(cpu_cores=rate, memory_bytes=usage.memory_bytes)
            cpu += rate
            memory += usage.memory_bytes
        self._usage_prev = current
        return Resources(cpu=cpu, memory_mb=memory // (1024 * 1024)), per_task

    def _master_tls_dir(self, job_id: str, attempt: int) -> Path | None:
        root = self.config.masters_tls_root
        return None if root is None else root / f"{job_id}-{attempt}"

    def _sweep_master_tls(self) -> None:
        """Remove the TLS directories (private keys) of job masters that no longer run here:
        left by an agent that stopped while they ended."""
        root = self.config.masters_tls_root
        if root is None or not root.is_dir():
            return
        running = {
            f"{o.job_id}-{o.attempt}"
            for o in self._observed.values()
            if o.task_id == MASTER_TASK_ID and o.state is not RunState.EXITED
        }
        for directory in root.iterdir():
            if directory.name not in running:
                shutil.rmtree(directory, ignore_errors=True)

    def _prune(self, observed: dict[str, RunObservation], now: float) -> None:
        """Forget tasks that ended longer ago than the retention period (logs included); a job
        master's TLS directory (its private key) goes as soon as it has exited."""
        for key, observation in observed.items():
            if observation.task_id == MASTER_TASK_ID and observation.state is RunState.EXITED:
                directory = self._master_tls_dir(observation.job_id, observation.attempt)
                if directory is not None and key not in self._master_tls_removed:
                    shutil.rmtree(directory, ignore_errors=True)
                    self._master_tls_removed.add(key)
            finished = observation.finished_at
            expired = finished is not None and now - finished > self.config.exited_retention_s
            if observation.state is RunState.EXITED and expired:
                runtime = self.masters if observation.task_id == MASTER_TASK_ID else self.tasks
                runtime.forget(key)
                self.speculative.forget([key])
                self._master_tls_removed.discard(key)
                with self._lock:
                    self._reported.pop(key, None)
                    self._stop_requested.discard(key)
                    self._fenced.pop(key, None)


def _view(observation: RunObservation) -> TaskView:
    """A live task as the core sees it (the agent cannot tell its resident memory)."""
    limits = observation.limits
    return TaskView(
        observation.task_key,
        observation.job_id,
        observation.allocation_id,
        Resources(limits.cpu, limits.memory_mb),
        frozen=observation.state is RunState.SUSPENDED,
        speculative=observation.speculative,
    )


def _live_views(observed: dict[str, RunObservation]) -> tuple[TaskView, ...]:
    return tuple(_view(o) for o in observed.values() if o.state is not RunState.EXITED)


def _listed(keys: Sequence[str], most: int = 10) -> str:
    """``keys`` for a log line, at most ``most`` of them named."""
    shown = ", ".join(keys[:most])
    return shown + (f" and {len(keys) - most} more" if len(keys) > most else "") if keys else "none"


def _shown(limits: Resources | None) -> str:
    return "its grant" if limits is None else f"{limits.cpu:g} cpu, {limits.memory_mb} MiB"
