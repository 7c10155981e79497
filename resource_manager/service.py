"""The resource manager's gRPC servicers: translate, run the core as one unit of work, answer.

No scheduling logic lives here.  All servicers run on one asyncio event loop, so requests are
applied one at a time without a lock, and a client stream that waits (``WatchJob``) holds no
thread: however many users watch their jobs, heartbeats, registrations and task events are
served.  Agents heartbeat over a stream each (``HeartbeatStream``, kept open: a message on it
costs a fraction of a unary call) or with the unary ``Heartbeat``; both answer alike.  Each
request, and each heartbeat on a stream, is one unit of work (:meth:`RMState.run`): if anything
raises, memory and the database are left as they were before it.

Errors the caller made (bad spec, bad ask, unknown id) become INVALID_ARGUMENT / NOT_FOUND /
FAILED_PRECONDITION / ALREADY_EXISTS with a one-line message; nothing is created on refusal.  An
unexpected error answers INTERNAL with a short message and logs one line (the traceback at
debug level), and the RM keeps serving.  On a heartbeat stream, either ends that stream alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from collections.abc import Set as AbstractSet
from typing import NoReturn, TypeVar

import grpc

from plumbing import grants, wire
from plumbing.authz import caller, foreign_job, foreign_node, log_refusal
from plumbing.data_plane import DataPlane
from plumbing.intervals import SCHEDULING_PASS_DELAY_S
from plumbing.node_protocol import LaunchMaster, NodeCommand, TaskReport
from plumbing.node_wire import MasterContact, command_to_pb, report_from_pb
from plumbing.spec_text import load_job_document
from plumbing.tls import Authority, Identity, Role, issue_job_master
from plumbing.wire import JOB_STATE_FROM_PB, resources_from_pb, resources_to_pb
from policies.scheduling.asks import PhaseAsk
from policies.scheduling.framework import PreemptionAction
from policies.scheduling.jobspec import JobSpec, SpecError, parse_job_spec
from resource_manager import convert
from resource_manager.core import ResourceManagerCore
from resource_manager.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidRequestError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    StateUnavailableError,
)
from resource_manager.limits import SubmissionRate
from resource_manager.pending_why import pending_reasons
from resource_manager.records import AllocationRecord, JobRecord, KeptSlot, Now, SpeculativeNote
from resource_manager.shell import PassDue, RMShell
from resource_manager.speculative_log import SpeculativeLog
from resource_manager.trace_file import TraceFile
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

log = logging.getLogger(__name__)

MAX_PENDING_LAUNCH_CREDENTIALS = 1024
"""Job master certificates kept for launch commands being re-sent (a launch is done within a
few heartbeats; far fewer are ever in flight)."""

Clock = Callable[[], Now]
T = TypeVar("T")
MAX_IDEMPOTENCY_KEY = 64
MAX_RESOLVED_NODES = 1000  # node addresses one Allocate may ask for (speculative placement)
PASS_DELAY = SCHEDULING_PASS_DELAY_S


MAX_REASON = 200
FOREIGN_LOG_PERIOD_S = 10.0  # at most one line per this long about reports for other nodes
# What a ChangeTask asks for: a preemption action, or None for a resumption.
_TASK_CHANGES: dict[int, PreemptionAction | None] = {
    rm_pb.TASK_SUSPEND: PreemptionAction.SUSPEND,
    rm_pb.TASK_RESUME: None,
    rm_pb.TASK_RESIZE: PreemptionAction.SHRINK,
    rm_pb.TASK_PREEMPT: PreemptionAction.KILL,
}


def system_now() -> Now:
    return Now(wall=time.time(), monotonic=time.monotonic())


class JobWatchers:
    """Wakes the streams watching a job when a unit of work changed it: O(changed jobs)."""

    def __init__(self) -> None:
        self._events: dict[str, tuple[asyncio.Event, int]] = {}

    def subscribe(self, job_id: str) -> asyncio.Event:
        """The event the next change of ``job_id`` sets; pair with :meth:`unsubscribe`."""
        event, count = self._events.get(job_id, (None, 0))
        if event is None:
            event = asyncio.Event()
        self._events[job_id] = (event, count + 1)
        return event

    def unsubscribe(self, job_id: str) -> None:
        event, count = self._events.get(job_id, (None, 0))
        if event is not None:
            if count <= 1:
                del self._events[job_id]
            else:
                self._events[job_id] = (event, count - 1)

    def notify(self, job_ids: AbstractSet[str]) -> None:
        for job_id in job_ids:
            entry = self._events.get(job_id)
            if entry is not None:
                entry[0].set()
                # Watchers subscribe again for the next change: a fresh, unset event.
                self._events[job_id] = (asyncio.Event(), entry[1])


class RMState:
    """The core, the clock, the data plane and the job watchers.  Every request runs through
    :meth:`run` (a unit of work) or :meth:`read` (no writes allowed)."""

    def __init__(
        self,
        core: ResourceManagerCore,
        clock: Clock,
        advertise_address: str,
        data_plane: DataPlane | None = None,
        job_master_ca: Authority | None = None,
        grant_secret: bytes | None = None,
        submissions_per_minute: int = 0,
        oversubscription: str = "up",
        decision_trace: TraceFile | None = None,
    ) -> None:
        """``job_master_ca`` (with TLS): the RM's CA of job master certificates;
        ``grant_secret`` (with TLS): the secret its grant tokens are derived from
        (:mod:`plumbing.grants`); ``submissions_per_minute``: each user's (0: no limit);
        ``decision_trace``: where each committed unit's decisions are written (or None)."""
        self.core = core
        self.clock = clock
        self.advertise_address = advertise_address
        self.data_plane = data_plane or DataPlane()
        self.oversubscription = oversubscription  # ROSE's UP/RP switch, handed to every agent
        self.watchers = JobWatchers()
        self.decision_trace = decision_trace
        # Each node's speculative queue as its last heartbeat showed it (for ListNodes).
        self.speculative_queues: dict[str, pb.SpeculativeQueueState] = {}
        self.speculative_log = SpeculativeLog()  # job masters' speculative attempts
        self._unknown_states: set[tuple[str, int]] = set()
        self._pass_armed = False
        self._job_master_ca = job_master_ca
        # (job, attempt) -> (certificate chain, key): a launch command is re-sent with every
        # heartbeat until its node shows it done, with the same certificate.  Bounded, oldest
        # out: a launch re-sent after its entry left gets a new certificate, which the agent,
        # having launched the job master already, ignores.
        self._job_master_credentials: OrderedDict[tuple[str, int], tuple[bytes, bytes]] = (
            OrderedDict()
        )
        self._grant_secret = grant_secret
        self.submissions = SubmissionRate(submissions_per_minute)
        self._node_keys: dict[str, bytes] = {}  # one HMAC saved per grant; a key per node
        self._foreign_logged_at: float | None = None  # the last line about foreign reports
        self._foreign_unlogged = 0  # foreign reports dropped since that line
        self.shell = RMShell(core)  # every unit of work, and its effects
        # From now on the RM serves: nodes holding work in the recovered state are waited for
        # from here (memory only: nothing to commit).
        core.started(clock())

    def node_grant_key(self, node_id: str) -> bytes:
        """The key of a node's grant tokens (empty without TLS)."""
        if self._grant_secret is None:
            return b""
        key = self._node_keys.get(node_id)
        if key is None:
            key = self._node_keys[node_id] = grants.node_key(self._grant_secret, node_id)
        return key

    def speculative_passes(self, job_id: str, node_ids: list[str]) -> dict[str, bytes]:
        """Per node, the speculative pass of ``job_id`` (:mod:`plumbing.grants`), for a caller
        who may drive the job (Allocate checks): none for a job without a ``speculative``
        block, nor without TLS."""
        if self._grant_secret is None or not node_ids:
            return {}
        if self.core.job(job_id).spec.speculative is None:
            return {}
        purpose = grants.Purpose.SPECULATIVE
        return {n: grants.sign_pass(self.node_grant_key(n), purpose, job_id) for n in node_ids}

    def add_log_passes(
        self, job: JobRecord, identity: Identity | None, tasks: list[rm_pb.TaskInfo]
    ) -> None:
        """With TLS, each task's log pass (:mod:`plumbing.grants`), for the job's owner or an
        admin only (``sluice logs`` hands it to the task's agent)."""
        if self._grant_secret is None or identity is None:
            return
        if identity.role is not Role.ADMIN and (
            identity.role is not Role.CLIENT or identity.name != job.owner
        ):
            return
        keys: dict[str, bytes] = {}
        for info in tasks:
            if info.node_id and info.node_id not in keys:
                keys[info.node_id] = grants.sign_pass(
                    self.node_grant_key(info.node_id), grants.Purpose.LOGS, job.job_id
                )
            info.log_pass = keys.get(info.node_id, b"")

    def allocation_to_pb(self, allocation: AllocationRecord) -> rm_pb.Allocation:
        """A grant as sent to its job master: with TLS, with its token for the node's agent."""
        message = convert.allocation_to_pb(allocation, self.core.node_address(allocation.node_id))
        if self._grant_secret is not None:
            message.grant_token = grants.sign(
                self.node_grant_key(allocation.node_id),
                allocation.job_id,
                allocation.allocation_id,
                allocation.resources,
            )
        return message

    def job_master_credentials(self, job_id: str, attempt: int) -> tuple[bytes, bytes]:
        """The certificate chain and key of a job master attempt (empty without TLS)."""
        if self._job_master_ca is None:
            return b"", b""
        key = (job_id, attempt)
        found = self._job_master_credentials.get(key)
        if found is None:
            found = issue_job_master(self._job_master_ca, job_id)
            self._job_master_credentials[key] = found
            if len(self._job_master_credentials) > MAX_PENDING_LAUNCH_CREDENTIALS:
                self._job_master_credentials.popitem(last=False)
        return found

    def run(self, action: Callable[[ResourceManagerCore, Now], T]) -> T:
        """Apply ``action(core, now)`` as one unit of work through the RM's one shell
        (:class:`~resource_manager.shell.RMShell`: whole or not at all, the commit included),
        then carry out its effects: wake who watches what changed, and arm a scheduling pass if
        one is due.  Build a request's answer inside ``action``: if building it raises, the unit
        is rolled back, so a refused caller is never told less than was committed."""
        now = self.clock()
        outcome = self.shell.run(action, now)
        effects = outcome.effects
        if self.decision_trace is not None:
            self.decision_trace.write(effects, self.core, now.wall)
        self.watchers.notify(effects.changed_jobs)
        if effects.placed:
            log.debug("placed %d containers", len(effects.placed))
        # Nodes heartbeat every interval whatever happens: their next answer carries the
        # commands, so effects.nodes_to_tell needs nothing here.
        self._arm_pass(effects.pass_due)
        return outcome.result

    def _arm_pass(self, due: PassDue) -> None:
        """One pass :data:`PASS_DELAY` after the first change that needs one: the requests of
        that interval are one batch, and the pass is one unit of work (group commit).  After a
        pass that stopped at its placement limit the next comes at once, but behind the
        requests already received (the event loop serves those first)."""
        if self._pass_armed or due is PassDue.NO:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not serving (a test driving the state directly): passes run on demand
        self._pass_armed = True
        if due is PassDue.AT_ONCE:
            loop.call_soon(self._run_pass)
        else:
            loop.call_later(PASS_DELAY, self._run_pass)

    def _run_pass(self) -> None:
        self._pass_armed = False
        try:
            self.run(lambda core, now: core.schedule(now))
        except StateUnavailableError:
            pass  # logged by run; the next change arms another pass
        except Exception as error:  # a bug in one pass must not stop scheduling for good
            log.warning(
                "scheduling pass failed: %s: %s (nothing was changed)", type(error).__name__, error
            )
            log.debug("scheduling pass failed", exc_info=True)

    def read(self, view: Callable[[ResourceManagerCore], T]) -> T:
        return view(self.core)

    def reports(self, node_id: str, messages: list[pb.TaskEvent]) -> list[TaskReport]:
        """Convert a node's reports (task events, live tasks, job masters, speculative tasks).
        A node speaks only for what runs on it: a report of a container or task attempt the
        RM's tables put on another node is dropped, never applied, and the rest of the request
        is (one forged or confused report does not cost a legitimate agent its heartbeat); the
        log says so, one line per :data:`FOREIGN_LOG_PERIOD_S` at most.  A state this RM does
        not know is ignored and logged once per node and state, never read as LOST.  Call it
        just before the unit of work that applies them (the check reads the tables)."""
        reports = []
        tables = self.core.tables
        for message in messages:
            report = report_from_pb(message)
            if report is not None:
                holder = tables.foreign_holder(
                    node_id,
                    report.job_id,
                    report.task_id,
                    report.attempt,
                    report.allocation_id,
                    report.job_master,
                )
                if holder is None:
                    reports.append(report)
                else:
                    self._foreign_report(node_id, report, holder)
            elif (node_id, message.state) not in self._unknown_states:
                self._unknown_states.add((node_id, message.state))
                log.warning(
                    "node %s reported task state %d, unknown to this resource manager (a newer "
                    "agent?): ignoring such reports",
                    node_id,
                    message.state,
                )
        return reports

    def _foreign_report(self, node_id: str, report: TaskReport, holder: str) -> None:
        """Count a report dropped for naming another node's container or task; log the first,
        then one line per :data:`FOREIGN_LOG_PERIOD_S` at most (bounded: ids cut short)."""
        self._foreign_unlogged += 1
        now = self.clock().monotonic
        if self._foreign_logged_at is not None and (
            now - self._foreign_logged_at < FOREIGN_LOG_PERIOD_S
        ):
            return
        log.warning(
            "ignored %d report(s) of a node for another node's tasks, the last: node %s "
            "reported %s %s attempt %d (container %s) %s, which runs on node %s",
            self._foreign_unlogged,
            _short(node_id),
            _short(report.job_id),
            _short(report.task_id),
            report.attempt,
            _short(report.allocation_id),
            report.state.value,
            _short(holder),
        )
        self._foreign_logged_at = now
        self._foreign_unlogged = 0


def _short(text: str, limit: int = 64) -> str:
    """``text`` as one bounded log field."""
    text = text if len(text) <= limit else f"{text[:limit]}..."
    return text.encode("unicode_escape").decode("ascii")


async def _abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, text: str) -> NoReturn:
    await context.abort(code, text)
    raise AssertionError("unreachable")  # context.abort raises


async def _answer(context: grpc.aio.ServicerContext, what: str, call: Callable[[], T]) -> T:
    """Run ``call`` and map the core's refusals to status codes; anything unexpected becomes
    INTERNAL with one log line."""

    async def run() -> T:
        return call()

    return await _answer_async(context, what, run)


async def _answer_async(
    context: grpc.aio.ServicerContext, what: str, call: Callable[[], Awaitable[T]]
) -> T:
    """:func:`_answer` for a call that is awaited."""
    try:
        return await call()
    except StateUnavailableError as error:  # (logged by RMState.run, once while it lasts)
        code = grpc.StatusCode.RESOURCE_EXHAUSTED if error.full else grpc.StatusCode.UNAVAILABLE
        await _abort(context, code, f"{error}; nothing was changed")
    except (SpecError, InvalidRequestError) as error:
        await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))
    except NotFoundError as error:
        await _abort(context, grpc.StatusCode.NOT_FOUND, str(error))
    except ConflictError as error:
        await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(error))
    except AlreadyExistsError as error:
        await _abort(context, grpc.StatusCode.ALREADY_EXISTS, str(error))
    except LimitExceededError as error:
        log_refusal(log, what, caller(context), context.peer(), str(error))
        await _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
    except PermissionDeniedError as error:
        log_refusal(log, what, caller(context), context.peer(), str(error))
        await _abort(context, grpc.StatusCode.PERMISSION_DENIED, str(error))
    except Exception as error:
        log.warning("%s failed: %s: %s (nothing was changed)", what, type(error).__name__, error)
        log.debug("%s failed", what, exc_info=True)
        await _abort(
            context,
            grpc.StatusCode.INTERNAL,
            f"internal error in {what} ({type(error).__name__}); nothing was changed; "
            "the resource manager's log has details",
        )


class JobServicer(rm_grpc.JobServiceServicer):
    def __init__(self, state: RMState) -> None:
        self._state = state

    def _summary(self, job: JobRecord) -> rm_pb.JobSummary:
        core = self._state.core
        sprint = None
        if core.sprints.enabled and job.job_id in core.tables.in_execution:
            sprint = core.sprints.at(self._state.clock().wall).job(job.job_id)
        return convert.job_summary_to_pb(
            job, buffered=core.settings.dispatch.buffered, sprint=sprint
        )

    async def SubmitJob(
        self, request: rm_pb.SubmitJobRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.SubmitJobResponse:
        def parse() -> JobSpec:
            key = request.idempotency_key
            if len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
                raise InvalidRequestError(
                    "idempotency_key", f"must be at most {MAX_IDEMPOTENCY_KEY} printable characters"
                )
            return parse_job_spec(_document(request))

        identity = caller(context)
        owner = identity.name if identity is not None else ""
        key = request.idempotency_key

        def within_rate() -> None:
            """Before anything costly, so a flood of refusals costs the RM little."""
            if key and self._state.core.tables.job_by_key(key) is not None:
                return  # a retry is free
            problem = self._state.submissions.take(owner, self._state.clock().monotonic)
            if problem is not None:
                raise LimitExceededError(problem)

        await _answer(context, "SubmitJob", within_rate)
        # Reading a spec is pure but may take a large fraction of a second (a 1 MiB spec): on a
        # worker thread, so heartbeats on the event loop never wait for it.
        spec = await _answer_async(context, "SubmitJob", lambda: asyncio.to_thread(parse))

        def submit() -> rm_pb.SubmitJobResponse:
            return self._state.run(
                lambda core, now: rm_pb.SubmitJobResponse(
                    job=self._summary(
                        core.submit(
                            spec,
                            client_mode=request.client_mode,
                            now=now,
                            idempotency_key=key,
                            owner=owner,
                        )
                    )
                )
            )

        return await _answer(context, "SubmitJob", submit)

    async def ListJobs(
        self, request: rm_pb.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ListJobsResponse:
        return await _answer(
            context,
            "ListJobs",
            lambda: self._state.read(
                lambda core: rm_pb.ListJobsResponse(
                    jobs=[self._summary(j) for j in core.list_jobs()]
                )
            ),
        )

    async def GetJob(
        self, request: rm_pb.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.JobDetail:
        identity = caller(context)

        def detail(core: ResourceManagerCore) -> rm_pb.JobDetail:
            job = core.job(request.job_id)
            tasks = [
                convert.task_to_pb(
                    t, core.node_address(t.node_id), core.allocations.get(t.allocation_id)
                )
                for t in core.job_tasks(job.job_id)
            ]
            self._state.add_log_passes(job, identity, tasks)
            return rm_pb.JobDetail(
                summary=self._summary(job),
                spec=wire.spec_to_pb(job.spec),
                tasks=tasks,
                kept=[
                    rm_pb.ReservedSlot(
                        allocation_id=a.allocation_id,
                        phase=a.kept_for,
                        until=a.kept_until,
                        node_id=a.node_id,
                    )
                    for a in core.kept_slots(job.job_id)
                ],
                speculative=self._state.speculative_log.of(job.job_id),
                kept_ended=[
                    rm_pb.ReservedSlot(
                        allocation_id=e.allocation_id,
                        phase=e.phase,
                        node_id=e.node_id,
                        ended=e.reason,
                        ended_at=e.at,
                    )
                    for e in core.kept_log.of(job.job_id)
                ],
                pending=[
                    convert.pending_to_pb(why)
                    for why in pending_reasons(core, job.job_id, self._state.clock())
                ],
            )

        return await _answer(context, "GetJob", lambda: self._state.read(detail))

    async def WatchJob(
        self, request: rm_pb.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rm_pb.JobSummary]:
        job_id = request.job_id
        last: rm_pb.JobSummary | None = None
        watchers = self._state.watchers

        def summary_now() -> rm_pb.JobSummary:
            return self._state.read(lambda core: self._summary(core.job(job_id)))

        while True:
            changed = watchers.subscribe(job_id)
            try:
                summary = await _answer(
                    context,
                    "WatchJob",
                    lambda: self._state.read(lambda core: self._summary(core.job(job_id))),
                )
                if summary != last:
                    last = summary
                    yield summary
                    if JOB_STATE_FROM_PB[summary.state].is_final:
                        return
                await changed.wait()
            finally:
                watchers.unsubscribe(job_id)

    async def KillJob(
        self, request: rm_pb.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.JobSummary:
        identity = caller(context)

        def kill() -> rm_pb.JobSummary:
            check_owner(self._state.core.job(request.job_id), identity)
            return self._state.run(
                lambda core, now: self._summary(core.kill(request.job_id, now=now))
            )

        return await _answer(context, "KillJob", kill)

    async def ChangeTask(
        self, request: rm_pb.ChangeTaskRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ChangeTaskResponse:
        def change() -> rm_pb.ChangeTaskResponse:
            if request.change not in _TASK_CHANGES:
                raise InvalidRequestError("change", "must be suspend, resume, resize or preempt")
            action = _TASK_CHANGES[request.change]
            limits = None
            if request.change == rm_pb.TASK_RESIZE:
                if not request.HasField("limits"):
                    raise InvalidRequestError("limits", "a resize needs limits")
                limits = resources_from_pb(request.limits)
            if len(request.reason) > MAX_REASON:
                raise InvalidRequestError("reason", f"at most {MAX_REASON} characters")
            return self._state.run(
                lambda core, now: _changed_to_pb(
                    core.change_task(
                        request.job_id,
                        request.task_id,
                        action,
                        limits=limits,
                        reason=request.reason,
                        now=now,
                    )
                )
            )

        return await _answer(context, "ChangeTask", change)

    async def ListNodes(
        self, request: rm_pb.ListNodesRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ListNodesResponse:
        return await _answer(
            context,
            "ListNodes",
            lambda: self._state.read(
                lambda core: rm_pb.ListNodesResponse(
                    nodes=[
                        convert.node_to_pb(
                            n,
                            core.node_allocated(n.node_id),
                            core.opportunistic(n.node_id),
                            self._state.speculative_queues.get(n.node_id),
                        )
                        for n in sorted(core.nodes.values(), key=lambda n: n.node_id)
                    ]
                )
            ),
        )

    async def GetSprint(
        self, request: rm_pb.GetSprintRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.SprintStatus:
        def status(core: ResourceManagerCore) -> rm_pb.SprintStatus:
            book, wall = core.sprints, self._state.clock().wall
            now = book.at(wall)
            sprints = []
            for record in book.history:
                going = now.job(record.job_id) if not record.ended_at else None
                sprints.append(
                    rm_pb.SprintRun(
                        job_id=record.job_id,
                        started_at=record.started_at,
                        ended_at=record.ended_at,
                        sprinted_s=record.sprinted_s if going is None else going.sprinted_time,
                        why=record.why,
                    )
                )
            sprint = book.dias.sprint
            return rm_pb.SprintStatus(
                enabled=book.enabled,
                budget_s=now.budget,
                capacity_s=sprint.budget_s,
                replenish_s_per_hour=sprint.replenish_s_per_hour,
                factor=sprint.factor,
                sprints=sprints,
            )

        return await _answer(context, "GetSprint", lambda: self._state.read(status))

    async def ListQueues(
        self, request: rm_pb.ListQueuesRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ListQueuesResponse:
        return await _answer(
            context,
            "ListQueues",
            lambda: self._state.read(
                lambda core: rm_pb.ListQueuesResponse(
                    queues=[convert.queue_to_pb(q) for q in core.queue_status()],
                    capacity=resources_to_pb(core.tables.capacity.total_capacity),
                    source=core.book.source,
                    loaded_at=core.book.loaded_at,
                )
            ),
        )

    async def GetClusterInfo(
        self, request: rm_pb.GetClusterInfoRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ClusterInfo:
        return rm_pb.ClusterInfo(
            data_plane=self._state.data_plane.to_pb(),
            cluster_id=self._state.core.settings.cluster_id,
            oversubscription=self._state.oversubscription,
        )


def _changed_to_pb(changed: AllocationRecord | None) -> rm_pb.ChangeTaskResponse:
    if changed is None:  # a preempted container with nothing running: taken back
        return rm_pb.ChangeTaskResponse(goal="stop")
    return rm_pb.ChangeTaskResponse(
        allocation_id=changed.allocation_id,
        node_id=changed.node_id,
        goal=changed.goal.value,
        limits=resources_to_pb(changed.current_limits),
    )


def _document(request: rm_pb.SubmitJobRequest) -> object:
    if request.WhichOneof("source") == "spec_yaml":
        return load_job_document(request.spec_yaml)
    if request.WhichOneof("source") == "spec":
        return wire.spec_document_from_pb(request.spec)
    raise SpecError("spec", "is required (give spec or spec_yaml)")


async def _own_node(
    context: grpc.aio.ServicerContext, node_id: str, identity: Identity | None
) -> None:
    """An agent speaks only for the node its certificate names (with TLS; the access table has
    already let only agents through)."""
    problem = foreign_node(identity, node_id)
    if problem is not None:
        log_refusal(log, "NodeService", identity, context.peer(), problem)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, problem)


def check_owner(job: JobRecord, identity: Identity | None) -> None:
    """Only a job's owner, or an admin, may kill it or drive it in client mode (with TLS; a
    job submitted without TLS has no owner, so only admins may)."""
    if identity is None or identity.role is not Role.CLIENT or identity.name == job.owner:
        return
    whose = f"belongs to {job.owner}" if job.owner else "has no owner (submitted without TLS)"
    raise PermissionDeniedError(
        f"job_id: {job.job_id} {whose}; a client may act only on their own jobs"
    )


async def _own_job(context: grpc.aio.ServicerContext, job_id: str, state: RMState) -> None:
    """A job master acts only for the job its certificate names, and a person's client-mode
    job master only for a job of theirs (with TLS)."""
    identity = caller(context)
    if identity is not None and identity.role is Role.CLIENT:
        job = state.core.tables.find_job(job_id)
        if job is not None:  # (an unknown job is the handler's NOT_FOUND)
            await _answer(context, "MasterService", lambda: check_owner(job, identity))
        return
    problem = foreign_job(identity, job_id)
    if problem is not None:
        log_refusal(log, "MasterService", identity, context.peer(), problem)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, problem)


class NodeServicer(rm_grpc.NodeServiceServicer):
    def __init__(self, state: RMState) -> None:
        self._state = state

    async def RegisterNode(
        self, request: rm_pb.RegisterNodeRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.RegisterNodeResponse:
        await _own_node(context, request.node_id, caller(context))

        def register() -> None:
            live = self._state.reports(request.node_id, list(request.live_tasks))
            self._state.run(
                lambda core, now: core.register_node(
                    request.node_id,
                    request.address,
                    request.runtime,
                    resources_from_pb(request.capacity),
                    live,
                    now=now,
                    instance_id=request.instance_id,
                    cluster_id=request.cluster_id,
                    has_swap=request.has_swap,
                    session=request.session,
                )
            )

        await _answer(context, "RegisterNode", register)
        return rm_pb.RegisterNodeResponse(
            heartbeat_interval_s=0,
            data_plane=self._state.data_plane.to_pb(),
            cluster_id=self._state.core.settings.cluster_id,
            grant_key=self._state.node_grant_key(request.node_id),
            oversubscription=self._state.oversubscription,
            node_timeout_s=self._state.core.settings.node_timeout,  # the agent's lease
        )

    async def Heartbeat(
        self, request: rm_pb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.HeartbeatResponse:
        return await self._beat(request, context, "Heartbeat", caller(context))

    async def HeartbeatStream(
        self,
        request_iterator: AsyncIterator[rm_pb.HeartbeatRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        """One agent's heartbeats over one stream: each request answered by one response, in
        order, exactly as :meth:`Heartbeat` answers it.  A request the core refuses ends the
        stream with the status and message the unary call would answer; the stream holds no
        state between requests, so the agent opens another and goes on.  (Read and written with
        ``context.read``/``write``: cheaper per message than an async generator.)"""
        node_id = "?"  # known from the first request
        identity = caller(context)  # one connection, one certificate: read once per stream
        log.debug("a heartbeat stream opened from %s", context.peer())
        try:
            while True:
                request = await context.read()
                if request is grpc.aio.EOF:
                    return
                assert isinstance(request, rm_pb.HeartbeatRequest)
                node_id = request.node_id
                answer = await self._beat(request, context, "HeartbeatStream", identity)
                await context.write(answer)
        finally:
            # Debug only: thousands of agents each hold a stream, and reconnect together.
            log.debug("the heartbeat stream of node %s closed", node_id)

    async def _beat(
        self,
        request: rm_pb.HeartbeatRequest,
        context: grpc.aio.ServicerContext,
        what: str,
        identity: Identity | None,
    ) -> rm_pb.HeartbeatResponse:
        """Apply one heartbeat as one unit of work and answer what the node should do now; a
        refusal aborts the call (``context``) with its status, as :func:`_answer` maps it."""
        await _own_node(context, request.node_id, identity)

        def beat() -> rm_pb.HeartbeatResponse:
            live = self._state.reports(request.node_id, list(request.live_tasks))

            def unit(core: ResourceManagerCore, now: Now) -> rm_pb.HeartbeatResponse:
                reregister, commands = core.heartbeat(
                    request.node_id,
                    resources_from_pb(request.used),
                    live,
                    now=now,
                    instance_id=request.instance_id,
                    has_swap=request.has_swap,
                )
                # (answered inside the unit, as every request: see RMState.run)
                return rm_pb.HeartbeatResponse(
                    reregister=reregister, commands=[self._command_to_pb(c) for c in commands]
                )

            return self._state.run(unit)

        response = await _answer(context, what, beat)
        if request.HasField("speculative"):  # shown by ListNodes; nothing decides on it
            self._state.speculative_queues[request.node_id] = request.speculative
        return response

    def _command_to_pb(self, command: NodeCommand) -> rm_pb.NodeCommand:
        """A command on the wire; a ``LaunchMaster`` gets this RM's address and the job
        master's credentials for its attempt."""
        if not isinstance(command, LaunchMaster):
            return command_to_pb(command)
        chain, key = self._state.job_master_credentials(command.job_id, command.attempt)
        return command_to_pb(command, MasterContact(self._state.advertise_address, chain, key))

    async def ReportTaskEvents(
        self, request: rm_pb.ReportTaskEventsRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.ReportTaskEventsResponse:
        await _own_node(context, request.node_id, caller(context))

        def report() -> None:
            events = self._state.reports(request.node_id, list(request.events))
            self._state.run(
                lambda core, now: core.report_events(
                    request.node_id, events, now=now, session=request.session
                )
            )

        await _answer(context, "ReportTaskEvents", report)
        return rm_pb.ReportTaskEventsResponse()


class MasterServicer(rm_grpc.MasterServiceServicer):
    def __init__(self, state: RMState) -> None:
        self._state = state

    async def RegisterMaster(
        self, request: rm_pb.RegisterMasterRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.RegisterMasterResponse:
        await _own_job(context, request.job_id, self._state)

        def unit(core: ResourceManagerCore, now: Now) -> rm_pb.RegisterMasterResponse:
            registration = core.register_master(
                request.job_id, attempt=request.attempt or 1, now=now
            )
            job = registration.job
            return rm_pb.RegisterMasterResponse(
                spec=wire.spec_to_pb(job.spec),
                kill_requested=job.kill_requested or job.state.is_final,
                allocations=[self._state.allocation_to_pb(a) for a in registration.held],
                data_plane=self._state.data_plane.to_pb(),
                history=[
                    rm_pb.SequencedTaskEvent(
                        seq=t.seq, event=convert.task_event_to_pb(t), execution=t.execution
                    )
                    for t in registration.history
                ],
                execution=job.execution.number,
                drop_ratio=job.approximation.drop_ratio,
            )

        return await _answer(context, "RegisterMaster", lambda: self._state.run(unit))

    async def Allocate(
        self, request: rm_pb.AllocateRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.AllocateResponse:
        await _own_job(context, request.job_id, self._state)

        def allocate() -> rm_pb.AllocateResponse:
            # The whole request is checked before the unit of work: a refusal after its commit
            # would lose what the commit marked delivered (grants, events).
            if len(request.resolve_nodes) > MAX_RESOLVED_NODES:
                raise InvalidRequestError(
                    "resolve_nodes", f"at most {MAX_RESOLVED_NODES} nodes per call"
                )
            asks = [
                PhaseAsk(
                    a.phase,
                    a.count,
                    resources_from_pb(a.resources),
                    tuple(a.preferred_nodes),
                    a.local_only,
                )
                for a in request.asks
            ]
            progress = [wire.progress_from_pb(p) for p in request.progress]
            kept = [KeptSlot(k.allocation_id, k.phase, k.until, k.ended) for k in request.kept]
            SpeculativeLog.check(request.speculative)
            speculative = [
                SpeculativeNote(r.task_id, r.attempt, r.node_id, r.outcome)
                for r in request.speculative
            ]
            wanted = list(request.resolve_nodes)

            def unit(core: ResourceManagerCore, now: Now) -> rm_pb.AllocateResponse:
                # The answer is built inside the unit: if building it raises, the grants and
                # events it carries are not marked delivered (rolled back with the rest).
                result = core.allocate(
                    request.job_id,
                    asks,
                    list(request.releases),
                    progress,
                    request.events_after,
                    now=now,
                    attempt=request.master_attempt or 1,
                    kept=kept,
                    speculative=speculative,
                )
                addresses = core.node_addresses(wanted) if wanted else {}
                return rm_pb.AllocateResponse(
                    granted=[self._state.allocation_to_pb(a) for a in result.granted],
                    events=[
                        rm_pb.SequencedTaskEvent(seq=t.seq, event=convert.task_event_to_pb(t))
                        for t in result.events
                    ],
                    lost_allocations=list(result.lost_allocations),
                    kill_requested=result.kill_requested,
                    node_addresses=addresses,
                    speculative_passes=self._state.speculative_passes(
                        request.job_id, list(addresses)
                    ),
                )

            response = self._state.run(unit)
            # (memory only, checked above: nothing after the commit can refuse the call)
            self._state.speculative_log.record(request.job_id, list(request.speculative))
            return response

        return await _answer(context, "Allocate", allocate)

    async def FinishJob(
        self, request: rm_pb.FinishJobRequest, context: grpc.aio.ServicerContext
    ) -> rm_pb.FinishJobResponse:
        await _own_job(context, request.job_id, self._state)

        def finish() -> None:
            state = JOB_STATE_FROM_PB.get(request.state)
            if state is None:
                raise InvalidRequestError("state", "must be a job state")
            progress = [wire.progress_from_pb(p) for p in request.progress]
            SpeculativeLog.check(request.speculative)
            self._state.run(
                lambda core, now: core.finish_job(
                    request.job_id,
                    state,
                    request.message,
                    progress,
                    now=now,
                    attempt=request.master_attempt or 1,
                )
            )
            self._state.speculative_log.record(request.job_id, list(request.speculative))

        await _answer(context, "FinishJob", finish)
        return rm_pb.FinishJobResponse()


async def housekeeping(state: RMState, period: float = 1.0) -> None:
    """Run the core's timers (lost nodes) when :meth:`ResourceManagerCore.next_wakeup` says,
    at least every ``period`` seconds, until cancelled."""
    while True:
        wakeup = state.shell.next_wakeup()
        delay = period if wakeup is None else wakeup - state.clock().monotonic
        await asyncio.sleep(min(period, max(0.05, delay)))
        try:
            state.run(lambda core, now: core.tick(now))
        except StateUnavailableError:
            pass  # logged by run, once while it lasts; the next tick tries again
        except Exception:  # a bug in one tick must not stop liveness checks for good
            log.exception("housekeeping tick failed")
