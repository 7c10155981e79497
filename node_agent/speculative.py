"""The node agent's speculative queue: the shell around ROSE's node-side decisions.

Job masters put speculative tasks straight into this queue (ROSE Sec. 3.2, the agent's
``EnqueueSpeculative``); nothing of it goes through the RM.  A pass's decision is one pure
function, :func:`policies.oversubscription.node_pass.decide_pass` (the simulator's nodes
decide with it too), and enqueueing's is :func:`policies.oversubscription.admission.
admit_to_queue`; this module keeps the queue and the pass's state, reads the machine's load,
records and logs what was decided; it never calls the agent back: a pass is given the node's
facts (:class:`NodeFacts`) and answers what to evict, re-pin and start (:class:`PassResult`),
and the agent carries that out:

* **Enqueue** (Sec. 3.2 step 4): accepted while the queue is shorter than the maximum length,
  refused with the reason otherwise (the job master tries another machine).  Idempotent: a
  task already here is answered as accepted.
* **Launch** (Sec. 6.1): each pass (the agent's monitor pass, and at once after an enqueue)
  pops the head while every resource is under its threshold and the speculative share stays
  within the quota; the first refusal blocks the queue, and its reason is shown.  The tasks a
  pass admits start side by side (a container takes the engine a fifth of a second), and after
  the pass, outside the agent's monitor lock (:meth:`SpeculativeQueue.start`): the pass of a
  task enqueued meanwhile admits it at once, counting the tasks still starting against the
  quota, instead of waiting for their containers.
* **Core classes** (Sec. 6.2): a speculative task runs in the runtime's low-weight class
  (:mod:`node_agent.runtime.cgroups`) on the second-class cores; when the classes change (a
  regular task or service starts or ends) the running ones are re-pinned.
* **Throttle** (Sec. 6.2, RP mode): while a watched service's interference indicator is
  anomalous, the queue is blocked and every running speculative task is evicted, those on
  first-class cores and with the least progress first.  A regular task's memory also reclaims:
  when the live regular tasks' memory limits and the speculative tasks' no longer fit the node,
  speculative tasks are evicted in the same order until they do.  Evicted tasks end ``KILLED``
  with ``evicted: <why>``, and count in the node's figures.
* **Hold while memory is reclaimed** (not in the paper): admission never re-admits what
  reclamation is about to evict.  A launch must fit the node's memory with every live task's
  limit, and after a reclaim the queue stays blocked (``memory reclaimed for regular tasks``)
  at least ``reclaim_hold_s`` and until the live limits leave the speculative memory quota's
  room again (:func:`policies.oversubscription.node_queue.reclaim_hold`).
* **Upgrade** (Alg. 5 line 11): a running speculative task becomes the regular task of a
  container the RM granted here, in place.

What it holds (the queue, the evictions' reasons, the counters) is kept in the agent's state
directory, so an agent restart loses and duplicates nothing: queued tasks stay queued, running
ones are found again by the runtime (still speculative), and a task started just before a
crash, still queued in the file, is not started twice.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from node_agent.machine_load import MachineLoad
from node_agent.runtime.base import RunObservation, RunState
from node_agent.runtime.task_state import atomic_write
from policies.oversubscription.admission import admit_to_queue
from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.node_pass import (
    Evict,
    LiveTask,
    NodePassDecision,
    NodePassInput,
    NodeState,
    RunningTask,
    decide_pass,
)
from policies.oversubscription.node_queue import QueuedTask
from policies.scheduling.lifecycle import TaskState
from policies.scheduling.resources import Resources

if TYPE_CHECKING:  # (its module loads numpy and scipy: not on the agent's start path)
    from policies.oversubscription.anomaly import AnomalyVerdict

log = logging.getLogger(__name__)

STATE_FILE = "speculative.json"
MAX_CONCURRENT_STARTS = 4  # tasks one pass starts at once (Docker takes ~0.2 s each)
ENDED_RETENTION_S = 3600.0  # how long a cancelled or unstartable task is still listed
EVICTION_GRACE_S = 1.0  # an evicted task's SIGTERM-to-SIGKILL grace


def speculative_allocation_id(key: str) -> str:
    """How the node names a speculative task's (absent) container."""
    return f"speculative-{key}"


@dataclass(frozen=True)
class QueuedLaunch:
    """A speculative task waiting in the queue: what to start, and since when (wall clock)."""

    job_id: str
    task_id: str
    attempt: int
    argv: tuple[str, ...]
    resources: Resources
    image: str | None
    env: Mapping[str, str]
    enqueued_at: float

    @property
    def key(self) -> str:
        return f"{self.job_id}.{self.task_id}.{self.attempt}"


@dataclass(frozen=True)
class Ended:
    """A speculative task that ended before it ran: cancelled while queued, or unstartable."""

    job_id: str
    task_id: str
    attempt: int
    state: TaskState
    message: str
    at: float


@dataclass(frozen=True)
class SpeculativeStatus:
    """One speculative task as the agent answers ``ListSpeculative``."""

    job_id: str
    task_id: str
    attempt: int
    state: TaskState
    message: str = ""
    evicted: bool = False
    upgraded: bool = False
    queue_position: int = 0
    enqueued_at: float = 0.0
    started_at: float = 0.0
    exit_code: int = 0
    allocation_id: str = ""


@dataclass(frozen=True)
class QueueState:
    """The queue's figures for the node's heartbeat (``sluice nodes``)."""

    queued: int = 0
    running: int = 0
    admitted: int = 0
    refused: int = 0
    evicted: int = 0
    throttled: bool = False
    blocked: str = ""


@dataclass(frozen=True)
class Starts:
    """What a pass admitted: to be started by :meth:`SpeculativeQueue.start` once the agent's
    monitor lock is released, on ``cpuset`` (the second-class cores)."""

    launches: tuple[QueuedLaunch, ...] = ()
    cpuset: tuple[int, ...] = ()


@dataclass(frozen=True)
class NodeFacts:
    """What a pass needs to know of the node beyond its tasks, as its agent sees it now: its
    capacity and CPUs, the services it watches and those whose indicators are anomalous, and
    (``--load-scope own``) what its own tasks use (None: the host's load is judged)."""

    capacity: Resources
    cpu_ids: tuple[int, ...]
    services: frozenset[str] = frozenset()
    anomalous: tuple[tuple[str, AnomalyVerdict], ...] = ()
    own_used: Resources | None = None


@dataclass(frozen=True)
class Eviction:
    """Stop this speculative task (recorded evicted already: it ends ``evicted: <why>``)."""

    key: str
    why: str


@dataclass(frozen=True)
class Repin:
    """Move a running speculative task to the second-class cores (``limits`` unchanged)."""

    key: str
    limits: Resources
    cpuset: tuple[int, ...]


@dataclass(frozen=True)
class PassResult:
    """What a pass decided, for the agent to carry out: evict, then re-pin (both under its
    monitor lock, as part of the pass), then start (after releasing it)."""

    evictions: tuple[Eviction, ...] = ()
    repins: tuple[Repin, ...] = ()
    starts: Starts = field(default_factory=Starts)


StateOf = Callable[[RunObservation], tuple[TaskState, str]]
"""How the agent reports a task: its state and message (the agent's ``event_for``)."""

StartTask = Callable[[QueuedLaunch, tuple[int, ...]], object]
"""The agent's start of an admitted speculative task on ``cpuset`` (raises if it could not)."""


@dataclass
class _Counters:
    admitted: int = 0
    refused: int = 0
    evicted: int = 0
    launched: int = 0


@dataclass
class _Held:
    """What the file keeps."""

    queue: dict[str, QueuedLaunch] = field(default_factory=dict)
    ended: dict[str, Ended] = field(default_factory=dict)
    evicted: dict[str, str] = field(default_factory=dict)  # key -> why
    upgraded: dict[str, None] = field(default_factory=dict)
    counters: _Counters = field(default_factory=_Counters)


class SpeculativeQueue:
    """See the module docstring.  Thread-safe: handlers enqueue and list while the monitor
    pass launches and evicts.  It never calls its agent: a pass is given the node's facts
    (:class:`NodeFacts`) and answers what to evict, re-pin and start (:class:`PassResult`),
    which the agent carries out."""

    def __init__(self, config: OversubscriptionConfig, state_dir: Path | None) -> None:
        self.config = config
        self._file = state_dir / STATE_FILE if state_dir is not None else None
        self._lock = threading.Lock()
        self._started = threading.Condition(self._lock)  # notified when starts finish
        self._starting: dict[str, QueuedLaunch] = {}  # admitted, their start under way
        self._held = _load(self._file)
        self._machine = MachineLoad(config.admission_resources)
        self._node_state = NodeState()  # the pass's throttle, reclaim hold and core classes
        self.blocked = ""
        if self._held.queue:
            log.info("speculative queue: %d task(s) still queued", len(self._held.queue))

    # ------------------------------------------------------------------ job masters' calls

    def enqueue(self, launch: QueuedLaunch, known: bool) -> tuple[bool, str, int]:
        """Sec. 3.2: accept ``launch`` into the queue?  ``known``: the task already exists on
        this node (a retried call): accepted, nothing changes.  Returns (accepted, why not,
        queue length after)."""
        with self._lock:
            queue = self._held.queue
            if known or launch.key in queue or launch.key in self._held.ended:
                return True, "", len(queue)
            decision = admit_to_queue(len(queue), self.config)
            if not decision.admitted:
                self._held.counters.refused += 1
                self._save()
                log.info("speculative %s refused: %s", launch.key, decision.reason)
                return False, decision.reason, len(queue)
            queue[launch.key] = launch
            self._held.counters.admitted += 1
            self._save()
            log.info("speculative %s queued (%d in the queue)", launch.key, len(queue))
            return True, "", len(queue)

    def cancel(self, key: str, why: str) -> bool:
        """Take a queued task out of the queue (StopTask, Alg. 5 line 8); False if not queued.
        A task whose start is under way is waited for, and is then no longer queued: the
        caller stops it as a running one."""
        with self._started:
            if key in self._starting:
                self._started.wait_for(lambda: key not in self._starting, 60.0)
                return False
            launch = self._held.queue.pop(key, None)
            if launch is None:
                return False
            self._held.ended[key] = Ended(
                launch.job_id, launch.task_id, launch.attempt, TaskState.KILLED, why, time.time()
            )
            self._save()
        log.info("speculative %s cancelled while queued: %s", key, why)
        return True

    def cancel_all(self, why: str) -> int:
        """Empty the queue (a drain); how many tasks were in it."""
        with self._lock:
            keys = list(self._held.queue)
        return sum(1 for key in keys if self.cancel(key, why))

    def holds(self, key: str) -> bool:
        """Whether the task is in the queue (waiting, or its start under way)."""
        with self._lock:
            return key in self._held.queue

    def is_queued(self, key: str) -> bool:
        with self._lock:
            return key in self._held.queue and key not in self._starting

    def wait_for_starts(self, timeout: float = 60.0) -> bool:
        """Wait until no admitted task is still starting (a drain); False on timeout."""
        with self._started:
            return self._started.wait_for(lambda: not self._starting, timeout)

    def upgraded(self, key: str) -> None:
        """The task became a regular one (Alg. 5 line 11)."""
        with self._lock:
            self._held.upgraded[key] = None
            self._save()

    def eviction_of(self, key: str) -> str | None:
        """Why the task was evicted, if it was."""
        with self._lock:
            return self._held.evicted.get(key)

    def statuses(
        self, job_id: str, observed: Sequence[RunObservation], state_of: StateOf
    ) -> list[SpeculativeStatus]:
        """The job's speculative tasks on this node: queued, cancelled, running, ended
        (``state_of``: what the agent reports of an observed one)."""
        with self._lock:
            queued = [q for q in self._held.queue.values() if q.job_id == job_id]
            ended = {k: e for k, e in self._held.ended.items() if e.job_id == job_id}
            evicted = dict(self._held.evicted)
            upgraded = set(self._held.upgraded)
        answer = [
            SpeculativeStatus(
                q.job_id,
                q.task_id,
                q.attempt,
                TaskState.PENDING,
                queue_position=position,
                enqueued_at=q.enqueued_at,
            )
            for position, q in enumerate(queued, start=1)
        ]
        answer += [
            SpeculativeStatus(e.job_id, e.task_id, e.attempt, e.state, e.message)
            for e in ended.values()
        ]
        for observation in observed:
            key = observation.task_key
            if observation.job_id != job_id:
                continue
            if not (observation.speculative or key in upgraded or key in evicted):
                continue
            state, message = state_of(observation)
            answer.append(
                SpeculativeStatus(
                    observation.job_id,
                    observation.task_id,
                    observation.attempt,
                    state,
                    message,
                    evicted=key in evicted,
                    upgraded=key in upgraded,
                    started_at=observation.started_at,
                    exit_code=observation.exit_code or 0,
                    allocation_id=observation.allocation_id,
                )
            )
        return answer

    def state(self, observed: Sequence[RunObservation]) -> QueueState:
        with self._lock:
            counters = self._held.counters
            return QueueState(
                queued=len(self._held.queue),
                running=sum(
                    1 for o in observed if o.speculative and o.state is not RunState.EXITED
                ),
                admitted=counters.admitted,
                refused=counters.refused,
                evicted=counters.evicted,
                throttled=self.throttled,
                blocked=self.blocked,
            )

    # ------------------------------------------------------------------ the agent's pass

    def run_pass(
        self, observed: Mapping[str, RunObservation], now: float, node: NodeFacts
    ) -> PassResult:
        """Throttle, reclaim, re-pin, admit: one pass over what the runtimes observe now (the
        agent's monitor pass calls it, under its monitor lock).  ``now`` is wall-clock
        seconds.  The decision is :func:`policies.oversubscription.node_pass.decide_pass`'s;
        this records it (evictions, the queue's state, the tasks starting) and logs its
        transitions.  Returns what to evict and re-pin (the agent does it at once) and what
        it admitted, for :meth:`start` after the lock is released."""
        live = [o for o in observed.values() if o.state is not RunState.EXITED]
        speculative = [o for o in live if o.speculative]
        with self._lock:
            for key in [k for k in self._held.queue if k in observed]:
                del self._held.queue[key]  # started just before a crash: never twice
            self._prune(now)
            starting = dict(self._starting)
            queue = [q for q in self._held.queue.values() if q.key not in starting]
            evicting = set(self._held.evicted)
        own = None if node.own_used is None else (node.own_used, node.capacity)
        facts = NodePassInput(
            queue=tuple(QueuedTask(q.key, q.resources, q.enqueued_at) for q in queue),
            running=tuple(
                RunningTask(
                    o.task_key,
                    Resources(o.limits.cpu, o.limits.memory_mb),
                    tuple(o.limits.cpuset),
                    o.started_at,
                    o.task_key in evicting,
                )
                for o in speculative
            ),
            regular=tuple(
                LiveTask(
                    o.task_key, o.limits.memory_mb, tuple(o.limits.cpuset), o.task_id == "master"
                )
                for o in live
                if not o.speculative
            ),
            capacity=node.capacity,
            cpu_ids=node.cpu_ids,
            state=self._node_state,
            services=frozenset(node.services),
            anomaly=self._throttle_reason(node),
            utilisation=self._machine.read(time.monotonic(), own) if queue else None,
            starting=tuple(
                QueuedTask(q.key, q.resources, q.enqueued_at) for q in starting.values()
            ),
        )
        decision = decide_pass(facts, now, self.config)
        self._record(decision, self._node_state)
        by_key = {q.key: q for q in queue}
        admitted = tuple(by_key[key] for key in decision.admitted)
        with self._lock:
            for launch in admitted:
                self._starting[launch.key] = launch
        limits = {o.task_key: o.limits for o in speculative}
        return PassResult(
            self._evict(decision.evictions),
            tuple(
                Repin(r.key, Resources(limits[r.key].cpu, limits[r.key].memory_mb), r.cpuset)
                for r in decision.repins
            ),
            Starts(admitted, decision.cpuset) if admitted else Starts(),
        )

    @property
    def throttled(self) -> bool:
        """Sec. 6.2: the queue is throttled (a service was anomalous lately)."""
        return self._node_state.throttle.active

    def _record(self, decision: NodePassDecision, before: NodeState) -> None:
        """Keep the pass's state and log its transitions."""
        after = decision.state
        self._node_state = after
        self.blocked = decision.blocked
        if before.throttle.active and not after.throttle.active:
            log.info("speculative queue: throttle lifted (the services are normal again)")
        if after.hold.active and not before.hold.active:
            log.info("speculative queue: held while memory is reclaimed for regular tasks")
        elif before.hold.active and not after.hold.active:
            log.info(
                "speculative queue: memory hold lifted (%d MiB committed)", decision.committed_mb
            )

    def _throttle_reason(self, node: NodeFacts) -> str | None:
        """Sec. 6.2: why speculative work must give way now (RP mode only), or None."""
        if not self.config.is_responsiveness_prioritized:
            return None
        for key, verdict in node.anomalous:
            return (
                f"{verdict.indicator} of service {key} at {verdict.value:.3g} "
                f"over {verdict.bound:.3g}"
            )
        return None

    def _evict(self, chosen: Sequence[Evict]) -> tuple[Eviction, ...]:
        """Record the pass's evictions (in eviction order): the agent stops them (grace
        :data:`EVICTION_GRACE_S`)."""
        recorded: list[Eviction] = []
        for eviction in chosen:
            with self._lock:
                if eviction.key in self._held.evicted:
                    continue
                self._held.evicted[eviction.key] = eviction.why
                self._held.counters.evicted += 1
                self._save()
            recorded.append(Eviction(eviction.key, eviction.why))
        return tuple(recorded)

    def start(self, starts: Starts, start_task: StartTask) -> None:
        """Start what a pass admitted with the agent's ``start_task``, side by side (a
        container takes the engine ~0.2 s), outside the agent's monitor lock; each start keeps
        its own record and never raises."""
        try:
            if len(starts.launches) <= 1:
                for launch in starts.launches:
                    self._start(launch, starts.cpuset, start_task)
                return
            workers = min(len(starts.launches), MAX_CONCURRENT_STARTS)
            with ThreadPoolExecutor(workers, thread_name_prefix="speculative-start") as pool:
                list(
                    pool.map(
                        lambda launch: self._start(launch, starts.cpuset, start_task),
                        starts.launches,
                    )
                )
        finally:
            with self._started:
                for launch in starts.launches:
                    self._starting.pop(launch.key, None)
                self._started.notify_all()

    def _start(self, launch: QueuedLaunch, cpuset: tuple[int, ...], start_task: StartTask) -> None:
        try:
            start_task(launch, cpuset)
        except Exception as error:
            problem = f"could not start: {error}"
            log.warning("speculative %s %s", launch.key, problem)
            with self._lock:
                self._held.queue.pop(launch.key, None)
                self._held.ended[launch.key] = Ended(
                    launch.job_id,
                    launch.task_id,
                    launch.attempt,
                    TaskState.FAILED,
                    problem,
                    time.time(),
                )
                self._save()
            return
        with self._lock:
            self._held.queue.pop(launch.key, None)
            self._held.counters.launched += 1
            self._save()
        waited = time.time() - launch.enqueued_at
        log.info("speculative %s started after %.3f s in the queue", launch.key, waited)

    def _prune(self, now: float) -> None:
        old = [k for k, e in self._held.ended.items() if now - e.at > ENDED_RETENTION_S]
        for key in old:
            del self._held.ended[key]
        if old:
            self._save()

    def forget(self, keys: Sequence[str]) -> None:
        """The agent forgot these tasks (retention): so does the queue's record of them."""
        with self._lock:
            changed = False
            for key in keys:
                changed |= self._held.evicted.pop(key, None) is not None
                changed |= key in self._held.upgraded
                self._held.upgraded.pop(key, None)
            if changed:
                self._save()

    def _save(self) -> None:
        """Write what is held (under the lock)."""
        if self._file is None:
            return
        held = self._held
        record = {
            "queue": [_launch_record(q) for q in held.queue.values()],
            "ended": {k: {**asdict(e), "state": e.state.value} for k, e in held.ended.items()},
            "evicted": held.evicted,
            "upgraded": list(held.upgraded),
            "counters": asdict(held.counters),
        }
        self._file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self._file, json.dumps(record, indent=1, sort_keys=True))


def _launch_record(launch: QueuedLaunch) -> dict[str, Any]:
    record = asdict(launch)
    record["env"] = dict(launch.env)
    record["resources"] = {"cpu": launch.resources.cpu, "memory_mb": launch.resources.memory_mb}
    return record


def _load(path: Path | None) -> _Held:
    """What an earlier agent kept; an unreadable file is logged and set aside, never fatal."""
    held = _Held()
    if path is None or not path.exists():
        return held
    try:
        record = json.loads(path.read_text())
        for item in record.get("queue", []):
            resources = item["resources"]
            launch = QueuedLaunch(
                job_id=str(item["job_id"]),
                task_id=str(item["task_id"]),
                attempt=int(item["attempt"]),
                argv=tuple(str(a) for a in item["argv"]),
                resources=Resources(float(resources["cpu"]), int(resources["memory_mb"])),
                image=None if item.get("image") is None else str(item["image"]),
                env={str(k): str(v) for k, v in item.get("env", {}).items()},
                enqueued_at=float(item["enqueued_at"]),
            )
            held.queue[launch.key] = launch
        for key, item in record.get("ended", {}).items():
            held.ended[str(key)] = Ended(
                str(item["job_id"]),
                str(item["task_id"]),
                int(item["attempt"]),
                TaskState(item["state"]),
                str(item["message"]),
                float(item["at"]),
            )
        held.evicted = {str(k): str(v) for k, v in record.get("evicted", {}).items()}
        held.upgraded = dict.fromkeys(str(k) for k in record.get("upgraded", []))
        held.counters = _Counters(**{k: int(v) for k, v in record.get("counters", {}).items()})
    except (OSError, ValueError, KeyError, TypeError) as error:
        aside = path.with_suffix(".unreadable")
        log.error("%s is unreadable (%s): set aside as %s, starting empty", path, error, aside)
        path.replace(aside)
        return _Held()
    return held
