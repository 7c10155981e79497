"""The node agent process: ``sluice agent``.

Loops: a monitor (observes tasks every ``--monitor-interval``, sends task events to the RM as soon
as they happen, re-sending what the RM did not acknowledge), a heartbeat (usage and live tasks
out, RM commands in, over a gRPC stream kept open), and metrics (one ``NodeMetrics`` sample per
``--metrics-interval`` to the Kafka topic the RM names at registration, or ``--kafka``).  A
lost RM is retried with backoff, cut short as soon as another link (the event reporter) reaches
it again; tasks keep running meanwhile, until the agent's lease on the RM expires (fencing,
:mod:`node_agent.lease`: it stops them itself about when the RM counts the node lost).  SIGTERM
stops the agent but not its tasks: a restarted agent adopts them, if it registers within the
RM's node timeout (so the agent starts fast: it imports only what its path uses, and the node
timeout must obey the rule of :mod:`plumbing.intervals`, checked at registration).

The agent's identity lives in ``<state-dir>/identity.json``: its node id, its cluster id and an
instance id made once.  A restarted agent keeps them, so the RM tells it apart from a second
agent claiming the same node id (which it refuses while the first still heartbeats), and a
state directory is never used for another node or cluster.  The RM re-sends a command with
every heartbeat until the node's report shows it done; one already being carried out is not
started twice.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from node_agent.access import ACCESS
from node_agent.agent import AgentConfig, NodeAgent
from node_agent.grant_gate import GrantGate
from node_agent.lease import retry_pause
from node_agent.metrics.counters import CounterSampler, detect_counters
from node_agent.metrics.energy import EnergyMeter, detect_rapl
from node_agent.metrics.host import HostSampler
from node_agent.metrics.pressure import parse_pressure
from node_agent.metrics.reporter import MetricsReporter
from node_agent.metrics.share import LoadScope, resolve_scope
from node_agent.runtime import make_runtime
from node_agent.runtime.base import RuntimeUnavailableError
from node_agent.service import AgentServicer, queue_state_to_pb
from node_agent.service_monitor import MACHINE_PRESSURE
from plumbing import data_plane, transport
from plumbing.broker_tls import BrokerTls
from plumbing.daemon import publish_address, serve_until_signalled
from plumbing.data_plane import DataPlane
from plumbing.errors import UserError
from plumbing.intervals import (
    HEARTBEAT_INTERVAL_S,
    MAX_BACKOFF_S,
    MONITOR_INTERVAL_S,
    node_timeout_problem,
)
from plumbing.kafka_outbox import DEFAULT_BUFFER
from plumbing.node_protocol import (
    LaunchMaster,
    NodeCommand,
    ResizeAllocation,
    ResumeAllocation,
    StopAllocation,
    SuspendAllocation,
)
from plumbing.node_wire import (
    MasterContact,
    command_from_pb,
    master_contact_from_pb,
    report_to_pb,
)
from plumbing.rpc import AGENT_MAX_RECEIVE, CHANNEL_OPTIONS, start_server
from plumbing.tls import ClientTls, Role, TlsError, channel_credentials
from plumbing.wire import resources_to_pb
from policies.approximation.energy import PowerModel
from policies.oversubscription.config import OversubscriptionConfig
from policies.scheduling.identifiers import cluster_id_problem, node_id_problem
from policies.scheduling.resources import Resources
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import node_agent_pb2_grpc as agent_grpc
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

log = logging.getLogger("sluice.agent")

RPC_TIMEOUT = 5.0
EVENTS_PER_REPORT = 1000
"""Task events per ReportTaskEvents call: an event is about 120 bytes, at most about 700 with
its message (:data:`MAX_EVENT_MESSAGE`), so a batch stays far below the RM's 4 MiB receive limit
however long the outbox grew."""
STOP_CHECK_S = 0.2
"""A wait between heartbeats notices the stop event within this (and a wake-up at once)."""

RECONNECT_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
"""The agent's channel to the RM tries to reconnect at least once a second while the RM is away
(gRPC's default backoff grows to two minutes; after a 20 s outage a restarted RM was found 4 s
late): the event reporter and the heartbeat loop see a restarted RM within a second."""


def rm_channel(address: str, tls: ClientTls | None) -> grpc.Channel:
    """The agent's channel to the RM (:data:`RECONNECT_OPTIONS`)."""
    options = [*CHANNEL_OPTIONS, *RECONNECT_OPTIONS]
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, channel_credentials(tls), options=options)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rm", required=True, help="resource manager address host:port")
    parser.add_argument("--node-id", default=socket.gethostname())
    transport.add_arguments(parser)
    parser.add_argument(
        "--cluster-id",
        default="sluice",
        help="the cluster this agent belongs to; must be the RM's (default: %(default)s)",
    )
    parser.add_argument("--listen", default="127.0.0.1:0", help="host:port (port 0 = any free)")
    parser.add_argument("--advertise", help="address others use to reach this agent")
    parser.add_argument("--runtime", choices=["process", "docker"], default="process")
    parser.add_argument("--state-dir", type=Path, default=Path(".sluice/agent"))
    parser.add_argument(
        "--cpus", type=float, help="CPU capacity offered (default: all usable CPUs)"
    )
    parser.add_argument("--memory-mb", type=int, help="memory offered (default: all of it)")
    parser.add_argument(
        "--load-scope",
        choices=["auto", "host", "own"],
        default="auto",
        help="whose CPU and memory utilisation the node reports and admits speculative tasks "
        "by: the whole host's, or its own tasks' share of what it offers (several agents on "
        "one host); auto: own when --cpus or --memory-mb offers less than the host has",
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        default=HEARTBEAT_INTERVAL_S,
        help="seconds between heartbeats; the RM's node timeout must be at least 3 of them + "
        "4 s (default %(default)s)",
    )
    parser.add_argument("--monitor-interval", type=float, default=MONITOR_INTERVAL_S)
    parser.add_argument(
        "--machine-pressure",
        type=Path,
        default=MACHINE_PRESSURE,
        help="directory of the machine's PSI files (cpu, memory, io) that latency-sensitive "
        "services are judged by where their cgroup keeps none, e.g. cgroup v1 (default "
        "%(default)s; tests point it at files they write)",
    )
    parser.add_argument(
        "--max-backoff",
        type=float,
        default=MAX_BACKOFF_S,
        help="the longest wait between attempts to reach a lost resource manager (default "
        "%(default)s s; cut short when another link reaches it)",
    )
    parser.add_argument("--docker-url", help="Docker Engine URL (default: from the environment)")
    parser.add_argument("--address-file", type=Path, help="write the bound address here once up")
    parser.add_argument(
        "--kafka", default="", help="publish metrics here (default: where the RM says)"
    )
    parser.add_argument(
        "--kafka-tls",
        action="store_true",
        help="--kafka speaks TLS, with this agent's --tls-dir (default: as the RM says)",
    )
    parser.add_argument(
        "--metrics-topic", default="", help="default: the RM's, else sluice.metrics"
    )
    parser.add_argument("--metrics-interval", type=float, default=1.0, help="seconds per sample")
    power = PowerModel()
    parser.add_argument(
        "--idle-watts",
        type=float,
        default=power.idle_w,
        help="the machine's power when idle, for the energy estimate where there is no RAPL "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--peak-watts",
        type=float,
        default=power.peak_w,
        help="its power with every core busy (default %(default)s)",
    )
    parser.add_argument(
        "--sprint-power-factor",
        type=float,
        default=power.sprint_factor,
        help="its power while a task sprints, times the above (default %(default)s, DiAS's)",
    )
    defaults = OversubscriptionConfig()
    parser.add_argument(
        "--speculative-queue-length",
        type=int,
        default=defaults.max_queue_length,
        help="speculative tasks this node queues at most; more are refused (ROSE Sec. 3.2)",
    )
    parser.add_argument(
        "--speculative-quota",
        default=",".join(f"{v:g}" for v in defaults.oversubscription_quota),
        help="CPU,MEMORY,DISK: the share of this node's capacity speculative tasks may hold "
        "(ROSE Sec. 6.1, 6.4)",
    )
    parser.add_argument(
        "--admission-thresholds",
        default=",".join(f"{v:g}" for v in defaults.admission_thresholds),
        help="CPU,MEMORY,DISK: the machine's utilisation above which no speculative task "
        "starts (ROSE Sec. 6.1)",
    )
    parser.add_argument(
        "--throttle-hold",
        type=float,
        default=defaults.throttle_hold_s,
        help="seconds the speculative queue stays blocked after a service's last anomalous "
        "sample (RP; ROSE Sec. 6.2 'temporarily')",
    )
    parser.add_argument(
        "--metrics-buffer",
        type=int,
        default=DEFAULT_BUFFER,
        help="samples kept while Kafka is unreachable; the oldest are dropped beyond this",
    )


def _total_memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)


MAX_EVENT_MESSAGE = 512
"""Characters of a task event's message sent to the RM (a runtime's error can be long): with
:data:`EVENTS_PER_REPORT` this bounds a report well below the RM's receive limit."""


PROBE_TIMEOUT_S = 0.5
"""A connection to the RM that has not been accepted or refused by then is not a refusal (a
partition that drops packets): the monitor pass goes on."""


def rm_refuses_connections(address: str) -> bool:
    """Whether a TCP connection to ``address`` (host:port, [v6]:port) is refused: the machine
    answers and no process listens on the port.  A connection accepted (even by a stopped
    process: the kernel queues it), timed out or failing otherwise is not a refusal."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S):
            return False
    except ConnectionRefusedError:
        return True
    except (OSError, ValueError):
        return False


def machine_pressure_of(directory: Path) -> Path:
    """--machine-pressure checked: a directory other than the kernel's must hold a ``cpu`` PSI
    file that parses (else services would silently never be judged); a one-line UserError."""
    if directory == MACHINE_PRESSURE:
        return directory  # the kernel's: absent without PSI, and then nothing is judged by it
    try:
        parse_pressure((directory / "cpu").read_text(), source=str(directory / "cpu"))
    except OSError as error:
        raise UserError(
            f"--machine-pressure: cannot read {directory / 'cpu'}: {error.strerror}"
        ) from None
    except ValueError as error:
        raise UserError(f"--machine-pressure: {error}") from None
    return directory


def oversubscription_of(args: argparse.Namespace) -> OversubscriptionConfig:
    """The node's admission settings from its flags; a bad one is a one-line UserError."""

    def fractions(flag: str, text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(part) for part in text.split(","))
        except ValueError:
            raise UserError(f"{flag}: expected CPU,MEMORY,DISK fractions, got {text!r}") from None
        if len(values) != 3 or not all(0.0 <= v <= 1.0 for v in values):
            raise UserError(f"{flag}: expected three fractions in [0, 1], got {text!r}")
        return values

    if args.speculative_queue_length < 0:
        raise UserError(
            f"--speculative-queue-length: must be 0 or more, got {args.speculative_queue_length}"
        )
    if not (math.isfinite(args.throttle_hold) and args.throttle_hold >= 0):
        raise UserError(f"--throttle-hold: must be 0 or more seconds, got {args.throttle_hold}")
    return OversubscriptionConfig(
        throttle_hold_s=args.throttle_hold,
        max_queue_length=args.speculative_queue_length,
        oversubscription_quota=fractions("--speculative-quota", args.speculative_quota),
        admission_thresholds=fractions("--admission-thresholds", args.admission_thresholds),
    )


# The RM's answers that no retry changes: the agent is misconfigured (another live agent has
# its node id, it belongs to another cluster, its node id is malformed).
_REFUSALS = (
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.INVALID_ARGUMENT,
)


class _HeartbeatStream:
    """One open ``NodeService.HeartbeatStream`` call.

    The RM answers each request with one response, in order, so :meth:`exchange` writes one
    request and reads the next response.  Between heartbeats the call's request iterator (read
    by gRPC on a thread of its own) waits on a queue.  Once an exchange raised, the stream is
    dead: :meth:`close` it and open another.
    """

    def __init__(self, rm: rm_grpc.NodeServiceStub) -> None:
        self._requests: queue.SimpleQueue[rm_pb.HeartbeatRequest | None] = queue.SimpleQueue()
        self._call = rm.HeartbeatStream(iter(self._requests.get, None))
        self._expired = threading.Event()

    def exchange(self, request: rm_pb.HeartbeatRequest, timeout: float) -> rm_pb.HeartbeatResponse:
        """Send ``request`` and return its answer.  Raises grpc.RpcError if the stream failed,
        or if the answer did not come within ``timeout`` seconds (the call is then cancelled)."""
        self._requests.put(request)
        # A blocking read of a stream takes no timeout: a timer cancels the call instead.
        watchdog = threading.Timer(timeout, self._expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            response: rm_pb.HeartbeatResponse = next(self._call)
        except StopIteration:
            raise grpc.RpcError("the resource manager ended the heartbeat stream") from None
        except grpc.RpcError:
            if self._expired.is_set():
                raise grpc.RpcError(f"no answer within {timeout:g} s") from None
            raise
        finally:
            watchdog.cancel()
        return response

    def _expire(self) -> None:
        self._expired.set()
        self._call.cancel()

    def close(self) -> None:
        """End the call at once, and its request iterator (whose thread then exits)."""
        self._requests.put(None)
        self._call.cancel()


@dataclass(frozen=True)
class AgentIdentity:
    node_id: str
    cluster_id: str
    instance_id: str


def load_identity(state_dir: Path, node_id: str, cluster_id: str) -> AgentIdentity:
    """The agent's identity from ``state_dir/identity.json``, made on first use.  Raises
    UserError if the directory belongs to another node or cluster."""
    for flag, problem in (
        ("--node-id", node_id_problem(node_id)),
        ("--cluster-id", cluster_id_problem(cluster_id)),
    ):
        if problem is not None:
            raise UserError(f"{flag}: {problem}")
    path = state_dir / "identity.json"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        recorded = json.loads(path.read_text())
        identity = AgentIdentity(
            str(recorded["node_id"]), str(recorded["cluster_id"]), str(recorded["instance_id"])
        )
    except FileNotFoundError:
        identity = AgentIdentity(node_id, cluster_id, uuid.uuid4().hex)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(identity.__dict__))
        tmp.replace(path)
        return identity
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"--state-dir: {path} is unreadable ({error})") from None
    if (identity.node_id, identity.cluster_id) != (node_id, cluster_id):
        raise UserError(
            f"--state-dir: {state_dir} belongs to node {identity.node_id!r} of cluster "
            f"{identity.cluster_id!r}, not {node_id!r} of {cluster_id!r}"
        )
    return identity


class AgentDaemon:
    """Wires a NodeAgent to the RM and to its own gRPC server."""

    def __init__(
        self,
        agent: NodeAgent,
        rm_address: str,
        address: str,
        runtime: str,
        stop_event: threading.Event,
        on_data_plane: Callable[[DataPlane], None] | None = None,
        identity: AgentIdentity | None = None,
        tls: ClientTls | None = None,
        gate: GrantGate | None = None,
        max_backoff: float = MAX_BACKOFF_S,
    ) -> None:
        """``gate`` (with TLS) learns the node's grant key from each registration."""
        self.agent = agent
        self._gate = gate
        self.identity = identity or AgentIdentity(agent.config.node_id, "", "")
        # This process's own id, sent with its registrations and task events: the RM does not
        # lose for missing from a registration's snapshot what this process reported by events
        # that reached it first (a task started after the snapshot was taken).
        self.session = uuid.uuid4().hex
        # Held while events are taken from the outbox and sent, and while a registration takes
        # its snapshot and is sent: a registration then shows every event not yet delivered,
        # none being in flight beside it.
        self._reporting = threading.Lock()
        self.refused: str | None = None  # why the RM refused this agent at its first registration
        # Why the agent stopped at its first registration: the RM's node timeout is too short
        # for its heartbeat interval (plumbing/intervals.py).
        self.misconfigured: str | None = None
        self._max_backoff = max_backoff
        self._interval = HEARTBEAT_INTERVAL_S  # heartbeat_loop's
        # Set when another link (the event reporter) reaches the RM after it was unreachable:
        # the heartbeat loop stops waiting out its backoff and registers at once.
        self._wake = threading.Event()
        self._woken_by = ""  # what set _wake, for the log
        self._fencing: threading.Thread | None = None
        self._in_flight: set[tuple[str, str]] = set()
        self._in_flight_lock = threading.Lock()
        self._on_data_plane = on_data_plane
        self.address = address
        self.runtime = runtime
        self._rm_address = rm_address
        self._channel = rm_channel(rm_address, tls)
        self._rm = rm_grpc.NodeServiceStub(self._channel)
        self.stop_event = stop_event
        self._registered = False
        self._ever_registered = False
        self._rm_reachable = True
        self._rm_down_said = False  # said once per outage that no RM runs (see _check_lease)
        self._streaming = True  # until the RM answers the stream UNIMPLEMENTED (an older RM)
        self._stream: _HeartbeatStream | None = None  # the open one, used by heartbeat_loop only
        self._commands = ThreadPoolExecutor(max_workers=4, thread_name_prefix="command")

    def why_refused(self) -> str | None:
        """Why the agent stopped at its first registration (one line), or None."""
        if self.refused is not None:
            return f"the resource manager refused this agent: {self.refused}"
        return self.misconfigured

    # ------------------------------------------------------------------ RM link

    def _rm_call_failed(self, what: str, error: grpc.RpcError) -> None:
        if self._rm_reachable:
            log.warning(
                "%s failed, will retry: %s",
                what,
                error.details() if isinstance(error, grpc.Call) else error,
            )
        self._rm_reachable = False

    def _rm_call_ok(self, *, wake: bool = True) -> None:
        """A call reached the RM.  ``wake``: it was another link's than the heartbeat loop's,
        which may be waiting out a long backoff: it is woken."""
        self._rm_down_said = False
        if not self._rm_reachable:
            log.info("resource manager at %s reachable again", self._rm_address)
            if wake:
                self._woken_by = "another link reached the resource manager"
                self._wake.set()
        self._rm_reachable = True

    def register(self) -> None:
        config = self.agent.config
        with self._reporting:  # no report in flight: the snapshot holds every undelivered event
            request = rm_pb.RegisterNodeRequest(
                node_id=config.node_id,
                address=self.address,
                capacity=resources_to_pb(config.capacity),
                runtime=self.runtime,
                live_tasks=[
                    report_to_pb(e, config.node_id, max_message=MAX_EVENT_MESSAGE)
                    for e in self.agent.registration_events()
                ],
                instance_id=self.identity.instance_id,
                cluster_id=self.identity.cluster_id,
                has_swap=self.agent.has_swap,
                session=self.session,
            )
            response = self._rm.RegisterNode(request, timeout=RPC_TIMEOUT)
        node_timeout = response.node_timeout_s
        problem = node_timeout_problem(node_timeout, self._interval) if node_timeout else None
        if problem is not None and not self._ever_registered:
            self.misconfigured = (
                f"--heartbeat-interval {self._interval:g}: the resource manager's --node-timeout "
                f"does not allow it: {problem}"
            )
            log.error("%s", self.misconfigured)
            self.stop_event.set()
            return
        if problem is not None:
            log.error("the resource manager's --node-timeout is now inconsistent: %s", problem)
        self.agent.lease.renewed(time.monotonic(), node_timeout)
        if self._gate is not None:
            self._gate.set_key(response.grant_key)
        self._registered = True
        self._ever_registered = True
        if self._on_data_plane is not None and response.HasField("data_plane"):
            self._on_data_plane(DataPlane.from_pb(response.data_plane))
        if response.oversubscription:
            self.agent.set_oversubscription_mode(response.oversubscription)
        log.info(
            "registered with the resource manager at %s as %s", self._rm_address, config.node_id
        )

    def heartbeat_loop(self, interval: float) -> None:
        """Heartbeat every ``interval`` seconds until ``stop_event`` is set, registering first
        and again whenever the RM asks.

        The heartbeats go over one ``HeartbeatStream`` kept open from one to the next: one
        request per interval, each of which must be answered within RPC_TIMEOUT, else the stream
        has failed (and is cancelled).  On any failure the loop logs it (once until the RM
        answers again), backs off (doubling up to ``max_backoff``, a line per doubling; cut
        short as soon as another link reaches the RM again), registers again if needed and
        opens a new stream.  Each answered registration or heartbeat renews the agent's lease
        (node_agent/lease.py).  An RM that answers the stream UNIMPLEMENTED (an older RM) gets
        unary ``Heartbeat`` calls for the rest of the run.  A refusal of the first registration,
        or an RM whose node timeout does not allow ``interval``, stops the agent
        (:meth:`why_refused`).  ``stop_event`` ends the loop at its next wait (within
        STOP_CHECK_S) and closes the stream: at once between heartbeats, else when the
        heartbeat in flight is answered or times out.
        """
        self._interval = interval
        try:
            self._heartbeat_until_stopped(interval)
        finally:
            self._close_stream()

    def _heartbeat_until_stopped(self, interval: float) -> None:
        backoff = interval
        while not self.stop_event.is_set():
            self._wake.clear()  # (a wake-up from before this attempt is spent)
            try:
                if not self._registered:
                    self.register()
                    if self.stop_event.is_set():
                        return  # misconfigured
                if self._streaming:
                    self._stream_heartbeat()
                else:
                    self._heartbeat()
                self._rm_call_ok(wake=False)
                backoff = interval
            except grpc.RpcError as error:
                self._close_stream()
                code = error.code() if isinstance(error, grpc.Call) else None
                if code is grpc.StatusCode.UNIMPLEMENTED and self._streaming:
                    log.info(
                        "the resource manager at %s has no heartbeat stream (an older version): "
                        "heartbeating with unary calls from now on",
                        self._rm_address,
                    )
                    self._streaming = False
                    continue  # heartbeat again at once, the unary way
                if code in _REFUSALS and not self._registered:
                    details = error.details() if isinstance(error, grpc.Call) else str(error)
                    if not self._ever_registered:
                        log.error("the resource manager refused this agent: %s", details)
                        self.refused = details
                        self.stop_event.set()
                        return
                    log.error("the resource manager refuses to register this agent: %s", details)
                else:
                    self._rm_call_failed("heartbeat", error)
                lease = self.agent.lease
                lease.attempt_failed()
                longer = retry_pause(
                    backoff,
                    interval,
                    self._max_backoff,
                    lease.node_timeout,
                    fenced=lease.is_fenced,
                    rm_down=self._rm_down_said,
                )
                if longer != backoff:  # (a line per doubling: a few per outage)
                    log.info("next attempt to reach the resource manager in %g s", longer)
                backoff = longer
            if self._pause(backoff):
                # Another link reached the RM, or an RM listens again: it is there, so the
                # attempts start over from the heartbeat interval (a restarting RM may fail
                # the first call while it binds; the next one must not wait a doubled backoff).
                backoff = interval

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``, less if the agent stops (noticed within STOP_CHECK_S) or another
        link reaches the RM again (at once: then the loop registers without waiting out its
        backoff, and logs that it was woken).  True if woken."""
        deadline = time.monotonic() + seconds
        while not self.stop_event.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._wake.wait(min(left, STOP_CHECK_S)):
                log.info(
                    "heartbeat woken: %s at %s (%.1f s of a %.1f s wait left): heartbeating at "
                    "once",
                    self._woken_by,
                    self._rm_address,
                    left,
                    seconds,
                )
                return True
        return False

    def _stream_heartbeat(self) -> None:
        """One heartbeat over the open stream (opened first if there is none).  Raises
        grpc.RpcError if the stream failed; it must then be closed."""
        request = self._heartbeat_request()
        if self._stream is None:
            self._stream = _HeartbeatStream(self._rm)
        self._on_heartbeat_response(self._stream.exchange(request, RPC_TIMEOUT))

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _heartbeat(self) -> None:
        """One heartbeat as a unary call (an RM without the stream)."""
        response = self._rm.Heartbeat(self._heartbeat_request(), timeout=RPC_TIMEOUT)
        self._on_heartbeat_response(response)

    def _heartbeat_request(self) -> rm_pb.HeartbeatRequest:
        """What this node uses and runs now, made afresh for each heartbeat."""
        config = self.agent.config
        return rm_pb.HeartbeatRequest(
            node_id=config.node_id,
            used=resources_to_pb(self.agent.used),
            live_tasks=[
                report_to_pb(e, config.node_id, max_message=MAX_EVENT_MESSAGE)
                for e in self.agent.live_events()
            ],
            instance_id=self.identity.instance_id,
            has_swap=self.agent.has_swap,
            speculative=queue_state_to_pb(self.agent.queue_state()),
        )

    def _on_heartbeat_response(self, response: rm_pb.HeartbeatResponse) -> None:
        """Act on the RM's answer: register again if it does not know this node, else renew
        the lease and start each command not already being carried out (the RM repeats a
        command until done)."""
        if response.reregister:
            log.info("the resource manager does not know this node: registering again")
            self._registered = False
            self.register()
            return
        self.agent.lease.renewed(time.monotonic())
        for message in response.commands:
            command = command_from_pb(message)
            if command is None:
                log.warning("ignoring an unknown command from the resource manager: %s", message)
                continue
            contact = (
                master_contact_from_pb(message.launch_master)
                if isinstance(command, LaunchMaster)
                else None
            )
            key = (type(command).__name__, command.allocation_id)
            with self._in_flight_lock:
                if key in self._in_flight:
                    continue  # repeated by the RM while still being carried out
                self._in_flight.add(key)
            self._commands.submit(self._execute, command, contact, key)

    def _execute(
        self, command: NodeCommand, contact: MasterContact | None, key: tuple[str, str]
    ) -> None:
        """Carry out one command (``contact``: a LaunchMaster's, from its message)."""
        try:
            if isinstance(command, LaunchMaster):
                assert contact is not None
                self.agent.launch_master(
                    command.job_id,
                    command.allocation_id,
                    command.resources,
                    contact.rm_address,
                    command.attempt,
                    contact.tls_cert_chain_pem,
                    contact.tls_key_pem,
                )
            elif isinstance(command, StopAllocation):
                self.agent.stop_allocation(command.job_id, command.allocation_id, command.reason)
            elif isinstance(command, SuspendAllocation):
                self.agent.suspend_allocation(
                    command.job_id, command.allocation_id, command.reason, command.limits
                )
            elif isinstance(command, ResumeAllocation):
                self.agent.resume_allocation(command.job_id, command.allocation_id, command.limits)
            elif isinstance(command, ResizeAllocation):
                self.agent.resize_allocation(
                    command.job_id,
                    command.allocation_id,
                    command.limits,
                    command.step,
                    command.freeze_on_swap,
                )
            else:
                self.agent.sprint_allocation(command.job_id, command.allocation_id, command.factor)
        except Exception as error:
            log.warning("command %s failed: %s", key[0], error)
            log.debug("command %s failed", command, exc_info=True)
        finally:
            with self._in_flight_lock:
                self._in_flight.discard(key)

    def monitor_loop(self, interval: float) -> None:
        while not self.stop_event.is_set():
            try:
                self.agent.preemption_round()
                self.agent.monitor_once(time.time())
                self._report()
                self._check_lease()
            except Exception:  # keep observing: one bad read must not blind the agent
                log.exception("monitor pass failed")
            self.stop_event.wait(interval)

    def _check_lease(self) -> None:
        """Fence if the lease on the RM expired (node_agent/lease.py): the tasks are stopped on
        a thread of their own, so that the monitor loop goes on observing and reporting them.

        Unless no RM runs at all: a connection to the RM's address refused means its machine
        answers and nothing listens there (the RM stopped, or restarting), so nothing counts
        this node lost, and a restarted RM gives it the whole node timeout to register
        (:meth:`Lease.not_counting`).  Only an RM that may be running and cannot be reached (a
        partition, a machine gone, a hung RM: the connection times out or is accepted) fences
        the tasks.  So restarting the RM, however slowly it starts, stops no task."""
        now = time.monotonic()
        # Looked at on every pass while the RM is unreachable, so that the lease runs from the
        # last refusal, within a monitor interval of the restarted RM's first answer.
        if not self._rm_reachable and rm_refuses_connections(self._rm_address):
            if not self._rm_down_said:
                log.warning(
                    "resource manager at %s not reachable, and nothing listens there "
                    "(connection refused): no resource manager runs to count this node lost, "
                    "so its tasks run on until one answers",
                    self._rm_address,
                )
                self._rm_down_said = True
            self.agent.lease.not_counting(now)
            return
        if not self._rm_reachable and self._rm_down_said:
            # Refused before, listening now: an RM has just started there, and it gives every
            # node it recovered the whole node timeout from its start; the heartbeat loop, which
            # may be waiting out its backoff, registers at once.
            self._rm_down_said = False
            self.agent.lease.not_counting(now)
            self._woken_by = "a resource manager listens again"
            self._wake.set()
            return
        silent = self.agent.lease.due(now)
        if silent is None:
            return
        self.agent.lease.fenced()
        self._fencing = threading.Thread(
            target=self.agent.fence, args=(silent,), name="fence", daemon=True
        )
        self._fencing.start()

    def _report(self) -> None:
        """Send the outbox in batches of at most ``EVENTS_PER_REPORT``: a backlog kept through
        a long RM outage must not outgrow the RM's receive limit (plumbing/rpc.py) and be
        refused whole.  A batch the RM did not take goes back, with everything after it.
        Skipped while a registration is being sent: it carries the outbox itself."""
        if not self._reporting.acquire(blocking=False):
            return
        try:
            self._send_outbox()
        finally:
            self._reporting.release()

    def _send_outbox(self) -> None:
        events = self.agent.take_outbox()
        for start in range(0, len(events), EVENTS_PER_REPORT):
            batch = events[start : start + EVENTS_PER_REPORT]
            try:
                self._rm.ReportTaskEvents(
                    rm_pb.ReportTaskEventsRequest(
                        node_id=self.agent.config.node_id,
                        events=[
                            report_to_pb(
                                e, self.agent.config.node_id, max_message=MAX_EVENT_MESSAGE
                            )
                            for e in batch
                        ],
                        session=self.session,
                    ),
                    timeout=RPC_TIMEOUT,
                )
            except grpc.RpcError as error:
                self.agent.requeue(events[start:])
                self._rm_call_failed("reporting task events", error)
                return
            self._rm_call_ok()
            self.agent.acknowledged(batch)

    def close(self) -> None:
        self._commands.shutdown(wait=False, cancel_futures=True)
        self._channel.close()


def run(args: argparse.Namespace) -> int:
    _check_kafka_flags(args)  # before anything is written (and the intervals)
    state_dir: Path = args.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    node_id: str = args.node_id
    identity = load_identity(state_dir, node_id, args.cluster_id)  # checks --node-id first
    try:
        tls = transport.from_arguments(args, Role.AGENT)
    except TlsError as error:
        raise UserError(str(error)) from None
    if tls is not None and tls.identity.name != node_id:
        raise UserError(
            f"--tls-dir: its certificate is for agent {tls.identity.name!r}, not --node-id "
            f"{node_id!r}"
        )
    broker_tls = BrokerTls.of(tls) if tls is not None else None  # for a Kafka over TLS
    try:
        tasks = make_runtime(
            args.runtime,
            node_id,
            state_dir / "tasks",
            cluster_id=identity.cluster_id,
            docker_url=args.docker_url,
        )
        masters = (
            tasks
            if args.runtime == "process"
            else make_runtime(
                "process",
                f"{node_id}-masters",
                state_dir / "masters",
                cluster_id=identity.cluster_id,
            )
        )
    except RuntimeUnavailableError as error:
        raise UserError(f"--runtime {args.runtime}: {error}") from None
    log.info("runtime %s: %s", args.runtime, tasks.describe())
    cpu_ids = tuple(sorted(os.sched_getaffinity(0)))
    capacity = Resources(
        cpu=args.cpus if args.cpus is not None else float(len(cpu_ids)),
        memory_mb=args.memory_mb if args.memory_mb is not None else _total_memory_mb(),
    )
    if capacity.cpu <= 0 or capacity.memory_mb <= 0:
        raise UserError("--cpus and --memory-mb must be positive")
    agent = NodeAgent(
        AgentConfig(
            node_id=node_id,
            cpu_ids=cpu_ids,
            capacity=capacity,
            ca_pem=tls.ca_pem if tls is not None else None,
            masters_tls_root=state_dir / "masters-tls" if tls is not None else None,
            oversubscription=oversubscription_of(args),
            state_dir=state_dir,
            monitor_interval=args.monitor_interval,
            machine_pressure=machine_pressure_of(args.machine_pressure),
            own_share=_own_share(args.load_scope, capacity, len(cpu_ids)),
        ),
        tasks,
        masters,
    )
    adopted = [o for o in agent.observations() if o.state.value != "exited"]
    if adopted:
        log.info(
            "adopted %d running tasks: %s", len(adopted), ", ".join(o.task_key for o in adopted)
        )

    reporter = _metrics_reporter(agent, args, state_dir, broker_tls)

    stop = threading.Event()
    gate = GrantGate(enforced=tls is not None)
    servicer = AgentServicer(agent, on_drained=stop.set, gate=gate)
    server, port, health = start_server(
        [
            (
                agent_grpc.add_AgentServiceServicer_to_server,
                servicer,
                agent_pb.DESCRIPTOR.services_by_name["AgentService"].full_name,
            )
        ],
        args.listen,
        tls=tls,
        access=ACCESS,
        max_receive_bytes=AGENT_MAX_RECEIVE,
    )
    host = args.listen.rsplit(":", 1)[0]
    address = args.advertise or f"{host}:{port}"
    daemon = AgentDaemon(
        agent,
        args.rm,
        address,
        args.runtime,
        stop,
        on_data_plane=lambda plane: reporter.use(_override(plane, args)),
        identity=identity,
        tls=ClientTls.of(tls) if tls is not None else None,
        gate=gate,
        max_backoff=args.max_backoff,
    )
    if args.kafka:
        reporter.use(_override(DataPlane(), args))
    log.info(
        "node agent %s listening on %s (%g cpu, %d MiB)",
        node_id,
        address,
        capacity.cpu,
        capacity.memory_mb,
    )
    publish_address(args.address_file, address)

    threads = [
        threading.Thread(
            target=daemon.monitor_loop, args=(args.monitor_interval,), name="monitor", daemon=True
        ),
        threading.Thread(
            target=daemon.heartbeat_loop,
            args=(args.heartbeat_interval,),
            name="heartbeat",
            daemon=True,
        ),
        threading.Thread(target=reporter.run, args=(stop,), name="metrics", daemon=True),
    ]
    serve_until_signalled(
        stop, threads, server, health, log, "stopping the agent; tasks keep running"
    )
    daemon.close()
    reporter.close()
    agent.close_services()
    tasks.close()
    if masters is not tasks:
        masters.close()
    why = daemon.why_refused()
    if why is not None:
        raise UserError(why)
    log.info("node agent stopped")
    return 0


def _check_intervals(args: argparse.Namespace) -> None:
    """Refuse an interval that is not a positive number of seconds.  (Whether the RM's node
    timeout allows --heartbeat-interval is checked at the first registration, which tells it.)"""
    for flag, value in (
        ("--heartbeat-interval", args.heartbeat_interval),
        ("--monitor-interval", args.monitor_interval),
        ("--max-backoff", args.max_backoff),
    ):
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"{flag}: must be a positive number of seconds, got {value:g}")


def _check_kafka_flags(args: argparse.Namespace) -> None:
    """Refuse --kafka-tls without --kafka, or without a certificate to speak it with (the
    agent runs --insecure; otherwise it has a TLS directory or refuses to start anyway); and
    an interval that is not positive."""
    _check_intervals(args)
    if args.kafka_tls and not args.kafka:
        raise UserError("--kafka-tls: needs --kafka (without it, the RM says whether it is TLS)")
    try:
        data_plane.require_tls_dir(_override(DataPlane(), args), not args.insecure)
    except ValueError as error:
        raise UserError(str(error)) from None


def _metrics_reporter(
    agent: NodeAgent, args: argparse.Namespace, state_dir: Path, broker_tls: BrokerTls | None
) -> MetricsReporter:
    if args.metrics_interval <= 0:
        raise UserError("--metrics-interval: must be positive")
    if args.metrics_buffer < 1:
        raise UserError("--metrics-buffer: must be at least 1")
    _override(DataPlane(), args)  # a bad --kafka or --metrics-topic fails start-up, not later
    support = detect_counters()
    if support.available:
        log.info("hardware counters available: CPI and MPKI are reported")
    else:
        log.info("hardware counters unavailable (%s): CPI and MPKI reported absent", support.reason)
    try:
        power = PowerModel(args.idle_watts, args.peak_watts, args.sprint_power_factor)
    except ValueError as error:
        raise UserError(f"--idle-watts, --peak-watts, --sprint-power-factor: {error}") from None
    return MetricsReporter(
        agent,
        HostSampler(disk_path=state_dir),
        CounterSampler(support),
        support,
        interval=args.metrics_interval,
        buffer=args.metrics_buffer,
        tls=broker_tls,
        energy=EnergyMeter(power, detect_rapl()),
    )


def _own_share(requested: str, capacity: Resources, host_cpus: int) -> bool:
    """--load-scope made definite (node_agent/metrics/share.py), and said."""
    scope = resolve_scope(LoadScope(requested), capacity, host_cpus, _total_memory_mb())
    log.info(
        "load scope: %s (%s)",
        scope.value,
        "the host's utilisation"
        if scope is LoadScope.HOST
        else "this node's tasks' share of what it offers",
    )
    return scope is LoadScope.OWN


def _override(plane: DataPlane, args: argparse.Namespace) -> DataPlane:
    """The RM's data plane with this agent's --kafka / --metrics-topic taking precedence; with
    its own --kafka, its own --kafka-tls says whether that broker is TLS."""
    try:
        return DataPlane(
            kafka_bootstrap=args.kafka or plane.kafka_bootstrap,
            metrics_topic=args.metrics_topic or plane.metrics_topic,
            kafka_tls=args.kafka_tls if args.kafka else plane.kafka_tls,
        )
    except ValueError as error:
        raise UserError(str(error)) from None
