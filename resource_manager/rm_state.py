"""The RM's service state: the one shell around its core, the clock, the job watchers, and
what the gRPC layer keeps beside the core (job master credentials, grant keys, the speculative
log and queues, the decision trace); the timers that drive passes and housekeeping.

Every request runs through :meth:`RMState.run`, which runs an action as one unit of work on the
RM's one shell (:class:`~resource_manager.shell.RMShell`) and carries out its effects with
asyncio: wake the ``WatchJob`` streams of jobs that changed, arm a scheduling pass (20 ms after
the first change of a batch, at once after a pass that stopped at its limit), write the unit's
decisions to the decision trace.  Nothing here decides what runs where.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import TypeVar

from plumbing import grants
from plumbing.data_plane import DataPlane
from plumbing.intervals import SCHEDULING_PASS_DELAY_S
from plumbing.node_protocol import TaskReport
from plumbing.node_wire import report_from_pb
from plumbing.tls import Authority, Identity, Role, issue_job_master
from resource_manager import convert
from resource_manager.core import ResourceManagerCore
from resource_manager.errors import StateUnavailableError
from resource_manager.limits import SubmissionRate
from resource_manager.records import AllocationRecord, JobRecord, Now
from resource_manager.shell import PassDue, RMShell
from resource_manager.speculative_log import SpeculativeLog
from resource_manager.trace_file import TraceFile
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb

log = logging.getLogger(__name__)

Clock = Callable[[], Now]
T = TypeVar("T")

MAX_PENDING_LAUNCH_CREDENTIALS = 1024
"""Job master certificates kept for launch commands being re-sent (a launch is done within a
few heartbeats; far fewer are ever in flight)."""

PASS_DELAY = SCHEDULING_PASS_DELAY_S
FOREIGN_LOG_PERIOD_S = 10.0  # at most one line per this long about reports for other nodes


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
