"""The resource manager process: ``sluice rm``.

The RM keeps its cluster id and, when started on port 0, the ports it first bound (the main one
and the bearer-token one) in its state directory: a restart with the same command line listens
where the agents, job masters and people already look for it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import signal
from pathlib import Path

from plumbing import data_plane, event_loop, grants, transport
from plumbing.bearer import TokenVerifier
from plumbing.daemon import publish_address, serve_aio_until_signalled
from plumbing.errors import UserError
from plumbing.gc_tuning import tune_for_large_heaps
from plumbing.intervals import AGENT_START_BUDGET_S
from plumbing.queue_file import (
    QueueFileError,
    load_dias_config,
    load_queue_file,
    load_reservation_file,
)
from plumbing.rpc import RM_MAX_RECEIVE, TokenPort, start_aio_server
from plumbing.tls import Authority, Role, TlsError, TlsFiles, load_job_master_ca
from policies.approximation.dias_config import DiasConfig
from policies.approximation.dispatch import DispatchMode
from policies.preemption.queues import QueueConfig, QueueError
from policies.scheduling.identifiers import cluster_id_problem
from policies.scheduling.jobspec import ReservationSpec
from resource_manager.access import ACCESS
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.job_service import JobServicer
from resource_manager.limits import NodeNames
from resource_manager.rm_state import RMState, housekeeping, system_now
from resource_manager.service import MasterServicer, NodeServicer
from resource_manager.sqlite_store import (
    Durability,
    SqliteStore,
    StateUnavailableError,
    StoreError,
)
from resource_manager.tables import Tables
from resource_manager.trace_file import TraceFile
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

log = logging.getLogger("sluice.rm")

DEFAULT_CLUSTER_ID = "sluice"
# Limits per identity: far above what a person or an agent does by hand or by script, low
# enough that one runaway loop cannot fill the RM's memory or crowd out everyone else.
DEFAULT_MAX_STREAMS = 64
DEFAULT_SUBMISSIONS_PER_MINUTE = 600
DEFAULT_MAX_OPEN_TASKS = 1_000_000
# The state setting that keeps the bearer-token port bound first (``bound_port``: the main one).
TOKEN_PORT_SETTING = "bound_token_port"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = CoreSettings()
    parser.add_argument(
        "--listen",
        default="127.0.0.1:7070",
        help="host:port; port 0 picks a free port the first time and keeps it afterwards",
    )
    parser.add_argument(
        "--advertise", help="address job masters use to reach the RM (default: the bound one)"
    )
    parser.add_argument("--state-dir", type=Path, default=Path(".sluice/rm"))
    transport.add_arguments(parser)
    parser.add_argument(
        "--cluster-id",
        help=f"this cluster's name; agents must be started with the same (default: the one "
        f"recorded in --state-dir, else {DEFAULT_CLUSTER_ID!r})",
    )
    parser.add_argument(
        "--node-timeout",
        type=float,
        default=defaults.node_timeout,
        help="seconds of silence before a node is lost (and its agent stops its tasks); at least "
        "3 agent heartbeats + 4 s, for a restarted agent to register and adopt its tasks",
    )
    parser.add_argument(
        "--max-master-share",
        type=float,
        default=defaults.max_master_share,
        help="fraction of the cluster job masters may hold together (one may always run; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--max-master-attempts",
        type=int,
        default=defaults.max_master_attempts,
        help="job masters launched per job before it fails (default %(default)s)",
    )
    parser.add_argument(
        "--durability",
        choices=[d.value for d in Durability],
        default=Durability.CRASH.value,
        help="what a committed change survives: 'crash' (a crash of the RM process; the "
        "default) or 'power' (power loss too: one fsync per commit)",
    )
    parser.add_argument(
        "--nodes-to-score",
        type=int,
        default=defaults.nodes_to_score,
        help="on clusters of more than 100 nodes, feasible nodes compared per container, the "
        "least allocated first (default %(default)s)",
    )
    parser.add_argument("--address-file", type=Path, help="write the bound address here once up")
    parser.add_argument(
        "--max-streams-per-caller",
        type=int,
        default=DEFAULT_MAX_STREAMS,
        help="open streams (job watchers, heartbeat streams) one identity may hold (with TLS; "
        "0: no limit; default %(default)s)",
    )
    parser.add_argument(
        "--submissions-per-minute",
        type=int,
        default=DEFAULT_SUBMISSIONS_PER_MINUTE,
        help="jobs one user may submit a minute, in bursts of as many (with TLS; 0: no limit; "
        "default %(default)s)",
    )
    parser.add_argument(
        "--max-open-tasks-per-user",
        type=int,
        default=DEFAULT_MAX_OPEN_TASKS,
        help="tasks of one user's unfinished jobs not yet done, beyond which their submissions "
        "are refused (with TLS; 0: no limit; default %(default)s)",
    )
    parser.add_argument(
        "--token-listen",
        help="host:port of a second port, TLS without client certificates, where people "
        "authenticate with bearer tokens (`sluice ca token`); off by default; port 0 picks a "
        "free port the first time and keeps it afterwards",
    )
    parser.add_argument(
        "--revoked-tokens",
        type=Path,
        help="a file of revoked token ids, one per line; re-read when it changes",
    )
    parser.add_argument(
        "--nodes-allowed",
        action="append",
        default=[],
        metavar="PATTERN",
        help="approve the node names matching this glob (repeatable, e.g. 'node-*'); with it "
        "or --nodes-allowed-file only approved names may register (default: any name; with "
        "TLS an agent registers only the node its certificate names)",
    )
    parser.add_argument(
        "--nodes-allowed-file",
        type=Path,
        help="a file of approved node-name globs, one a line (# comments); re-read when it "
        "changes, so a node is approved without restarting the RM",
    )
    parser.add_argument(
        "--queues",
        type=Path,
        help="the queue file: fair shares and how each queue is preempted (docs/preemption.md); "
        "re-read on SIGHUP.  Without it: one queue, no preemption",
    )
    parser.add_argument(
        "--reservation",
        type=Path,
        help="a YAML file holding the cluster's default slot reservation, the `reservation` "
        "block of a job spec (docs/jobspec.md), given to jobs that have none; without it, "
        "only jobs that ask for it keep slots across barriers",
    )
    parser.add_argument(
        "--preemption-interval",
        type=float,
        default=3.0,
        help="seconds between two preemption decisions at most (default %(default)s, as "
        "BIG-C's resource monitor)",
    )
    parser.add_argument(
        "--oversubscription",
        choices=["up", "rp"],
        default="up",
        help="ROSE's switch for the cluster, handed to every agent: up (batch only, the default: "
        "no throttling) or rp (latency-sensitive services share the machines: their "
        "interference blocks and throttles speculative work)",
    )
    parser.add_argument(
        "--locality-wait",
        type=float,
        default=0.0,
        help="seconds an ask waits for a node holding its input (its upstream tasks' nodes) "
        "before it takes any node; 0 (default) tries those nodes first without waiting",
    )
    parser.add_argument(
        "--dispatch",
        choices=[mode.value for mode in DispatchMode],
        default=defaults.dispatch.value,
        help="how jobs enter execution: priority (the default: as soon as their job master "
        "fits) or dias (DiAS: one FCFS buffer per priority, the head of the highest first, at "
        "most --max-running-jobs at once, never evicting; docs/approximation.md) or "
        "preemptive (the same buffers; a job at the head of a higher buffer evicts one of a "
        "lower priority, which is executed again from the start later: the paper's baseline)",
    )
    parser.add_argument(
        "--max-running-jobs",
        type=int,
        default=defaults.max_running_jobs,
        help="with --dispatch dias or preemptive: jobs in execution at once (default "
        "%(default)s, the paper's engine running one job at a time)",
    )
    parser.add_argument(
        "--dias-config",
        type=Path,
        help="the DiAS settings: drop ratios and sprint timeouts per priority, the accuracy "
        "curve, the sprint budget; may take the drop ratios `sluice model dias --json` chose "
        "(docs/approximation.md).  Without it: no dropping, no sprinting",
    )
    parser.add_argument(
        "--decision-trace",
        type=Path,
        help="append every scheduling decision (placements, preemption steps, kept containers, "
        "drops, speculative outcomes...) to this file as JSON lines, as the simulator records "
        "them (docs/simulator.md, the differential tests); off by default",
    )
    data_plane.add_arguments(parser)


def _token_port(args: argparse.Namespace, tls: TlsFiles | None) -> TokenPort | None:
    """The bearer-token port ``--token-listen`` asks for, checked (UserError names the flag)."""
    if args.token_listen is None:
        if args.revoked_tokens is not None:
            raise UserError("--revoked-tokens: needs --token-listen")
        return None
    if tls is None:
        raise UserError("--token-listen: bearer tokens need TLS (give --tls-dir)")
    host, _, port = args.token_listen.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise UserError(f"--token-listen: expected host:port, got {args.token_listen!r}")
    if args.revoked_tokens is not None and not args.revoked_tokens.is_file():
        raise UserError(f"--revoked-tokens: {args.revoked_tokens} is not a file")
    return TokenPort(args.token_listen, TokenVerifier(tls.ca_pem, args.revoked_tokens))


def _settings(args: argparse.Namespace, store: SqliteStore) -> CoreSettings:
    recorded = store.setting("cluster_id")
    cluster_id = args.cluster_id or recorded or DEFAULT_CLUSTER_ID
    problem = cluster_id_problem(cluster_id)
    if problem is not None:
        raise UserError(f"--cluster-id: {problem}")
    if recorded is not None and cluster_id != recorded:
        raise UserError(
            f"--cluster-id: {args.state_dir} holds cluster {recorded!r}, not {cluster_id!r}"
        )
    if not args.node_timeout >= AGENT_START_BUDGET_S:  # (agents check their heartbeats)
        raise UserError(
            f"--node-timeout: must be at least {AGENT_START_BUDGET_S:g} s, what a restarted agent "
            f"may take to register and adopt its tasks, got {args.node_timeout:g}"
        )
    if not 0 < args.max_master_share <= 1:
        raise UserError("--max-master-share: must be in (0, 1]")
    if args.max_master_attempts < 1:
        raise UserError("--max-master-attempts: must be at least 1")
    if args.nodes_to_score < 1:
        raise UserError("--nodes-to-score: must be at least 1")
    if not args.preemption_interval >= 0:
        raise UserError("--preemption-interval: must be 0 or more seconds")
    if not 0 <= args.locality_wait <= 3600:
        raise UserError("--locality-wait: must be 0 to 3600 seconds")
    if args.max_running_jobs < 1:
        raise UserError("--max-running-jobs: must be at least 1")
    for flag in ("max_streams_per_caller", "submissions_per_minute", "max_open_tasks_per_user"):
        if getattr(args, flag) < 0:
            raise UserError(f"--{flag.replace('_', '-')}: must be 0 (no limit) or more")
    try:
        NodeNames((), args.nodes_allowed_file)  # (read at once: a bad file is refused here)
    except ValueError as error:
        raise UserError(f"--nodes-allowed-file: {error}") from None
    return CoreSettings(
        cluster_id=cluster_id,
        node_timeout=args.node_timeout,
        max_master_share=args.max_master_share,
        max_master_attempts=args.max_master_attempts,
        nodes_to_score=args.nodes_to_score,
        max_open_tasks_per_user=args.max_open_tasks_per_user,
        preemption_interval=args.preemption_interval,
        locality_wait=args.locality_wait,
        default_reservation=_default_reservation(args),
        dispatch=DispatchMode(args.dispatch),
        dias=_dias_config(args),
        max_running_jobs=args.max_running_jobs,
        nodes_allowed=tuple(args.nodes_allowed),
        nodes_allowed_file=str(args.nodes_allowed_file or ""),
    )


def _default_reservation(args: argparse.Namespace) -> ReservationSpec | None:
    if args.reservation is None:
        return None
    try:
        return load_reservation_file(args.reservation)
    except QueueFileError as error:
        raise UserError(f"--reservation: {error}") from None


def _dias_config(args: argparse.Namespace) -> DiasConfig:
    if args.dias_config is None:
        return DiasConfig()
    try:
        return load_dias_config(args.dias_config)
    except QueueFileError as error:
        raise UserError(f"--dias-config: {error}") from None


def _queues(args: argparse.Namespace) -> QueueConfig | None:
    if args.queues is None:
        return None
    try:
        return load_queue_file(args.queues)
    except QueueFileError as error:
        raise UserError(f"--queues: {error}") from None


def _listen_address(
    listen: str, store: SqliteStore, flag: str = "--listen", key: str = "bound_port"
) -> str:
    """``listen``, with port 0 replaced by the port a previous run bound (setting ``key``), if
    any: a restart with the same command line listens where clients already look."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"{flag}: expected host:port, got {listen!r}")
    recorded = store.setting(key)
    if port == "0" and recorded is not None:
        return f"{host}:{recorded}"
    return listen


def run(args: argparse.Namespace) -> int:
    try:
        plane = data_plane.from_arguments(args)
        tls = transport.from_arguments(args, Role.RM)
        # Agents and job masters join a TLS link with certificates of this cluster's CA.
        data_plane.require_tls_dir(plane, tls is not None)
    except ValueError as error:  # (TlsError is one)
        raise UserError(str(error)) from None
    try:
        job_master_ca = load_job_master_ca(tls.directory) if tls is not None else None
    except TlsError as error:
        raise UserError(
            f"--tls-dir: {error} (the RM's directory holds the CA of its job masters: issue "
            "the RM's certificate again with `sluice ca issue --role rm`)"
        ) from None
    state_dir: Path = args.state_dir
    try:  # a full, read-only or unreadable state directory is one line, exit status 2
        state_dir.mkdir(parents=True, exist_ok=True)
        store = SqliteStore(state_dir / "rm.sqlite3", Durability(args.durability))
    except OSError as error:
        raise UserError(f"--state-dir: cannot create {state_dir}: {error.strerror}") from None
    except (StoreError, StateUnavailableError) as error:
        raise UserError(f"--state-dir: {error}") from None
    try:
        settings = _settings(args, store)
        store.save_setting("cluster_id", settings.cluster_id)
        tokens = _token_port(args, tls)
        queues = _queues(args)
        return event_loop.run(
            _serve(args, store, settings, plane, tls, job_master_ca, tokens, queues)
        )
    except StateUnavailableError as error:  # (a write at start: once serving, RMState.run's)
        raise UserError(f"--state-dir: {error}") from None
    finally:
        store.close()


def _trace_file(path: Path | None) -> TraceFile | None:
    """The ``--decision-trace`` file, opened for appending (None: not asked for)."""
    try:
        return TraceFile(path) if path is not None else None
    except OSError as error:
        raise UserError(f"--decision-trace: {error}") from None


async def _serve(
    args: argparse.Namespace,
    store: SqliteStore,
    settings: CoreSettings,
    plane: data_plane.DataPlane,
    tls: TlsFiles | None,
    job_master_ca: Authority | None,
    tokens: TokenPort | None = None,
    queues: QueueConfig | None = None,
) -> int:
    source = str(args.queues) if args.queues is not None else ""
    core = ResourceManagerCore(Tables(store), settings, queues=queues, queues_source=source)
    tune_for_large_heaps()  # after the state is loaded: see plumbing/gc_tuning.py
    state = RMState(
        core,
        system_now,
        advertise_address="",
        data_plane=plane,
        job_master_ca=job_master_ca,
        grant_secret=grants.grant_secret(tls.key_pem) if tls is not None else None,
        submissions_per_minute=args.submissions_per_minute,
        oversubscription=args.oversubscription,
        decision_trace=_trace_file(args.decision_trace),
    )
    names = rm_pb.DESCRIPTOR.services_by_name
    listen = _listen_address(args.listen, store)
    if tokens is not None:  # the bearer-token port is kept the same way as the main one
        tokens.address = _listen_address(
            tokens.address, store, "--token-listen", TOKEN_PORT_SETTING
        )
    try:
        server, port, health = await start_aio_server(
            [
                (
                    rm_grpc.add_JobServiceServicer_to_server,
                    JobServicer(state),
                    names["JobService"].full_name,
                ),
                (
                    rm_grpc.add_NodeServiceServicer_to_server,
                    NodeServicer(state),
                    names["NodeService"].full_name,
                ),
                (
                    rm_grpc.add_MasterServiceServicer_to_server,
                    MasterServicer(state),
                    names["MasterService"].full_name,
                ),
            ],
            listen,
            tls=tls,
            access=ACCESS,
            tokens=tokens,
            max_streams_per_caller=args.max_streams_per_caller,
            max_receive_bytes=RM_MAX_RECEIVE,
        )
    except (OSError, RuntimeError) as error:
        hint = " (the port this RM bound before; is another process on it?)"
        # (The message names the address that failed; 1.2.3.4:80 is not part of 1.2.3.4:8080.)
        if tokens is not None and re.search(rf"{re.escape(tokens.address)}(?!\d)", str(error)):
            flag, given, address = "--token-listen", args.token_listen, tokens.address
        else:
            flag, given, address = "--listen", args.listen, listen
        raise UserError(f"{flag} {address}: {error}{hint if address != given else ''}") from None
    store.save_setting("bound_port", str(port))
    if tokens is not None:
        store.save_setting(TOKEN_PORT_SETTING, str(tokens.port))
    address = f"{listen.rpartition(':')[0]}:{port}"
    # The advertised address is only known once bound (port 0); servicers read it lazily.
    state.advertise_address = args.advertise or address
    log.info(
        "resource manager of cluster %r listening on %s (state in %s, %d jobs recovered)",
        settings.cluster_id,
        address,
        args.state_dir,
        len(core.jobs),
    )
    if plane.has_kafka:
        log.info(
            "data plane: kafka %s%s, mqtt %s, aggregator %s",
            plane.kafka_bootstrap,
            " (TLS)" if plane.kafka_tls else "",
            plane.mqtt_url or "-",
            plane.aggregator_address or "-",
        )
    else:
        log.info("no data plane configured (--kafka): agents publish no metrics")
    for job_id, problem in store.unreadable_jobs:
        log.warning(
            "job %s left out: its stored spec is not valid for this version (%s); its row stays "
            "in %s",
            job_id,
            problem,
            args.state_dir,
        )
    if tokens is not None:
        token_address = f"{tokens.address.rpartition(':')[0]}:{tokens.port}"
        log.info("bearer tokens accepted on %s (TLS, no client certificate)", token_address)
        if args.address_file is not None:
            publish_address(
                args.address_file.with_name(args.address_file.name + ".tokens"), token_address
            )
    config = core.book.config
    log.info(
        "queues%s: %s",
        f" from {source}" if source else " (no --queues: one queue, no preemption)",
        ", ".join(f"{q.name} (share {q.share:g}, {q.mode_name})" for q in config.queues),
    )
    if args.queues is not None:
        asyncio.get_running_loop().add_signal_handler(
            signal.SIGHUP, _reload_queues, state, args.queues
        )
    publish_address(args.address_file, address)
    ticks = asyncio.create_task(housekeeping(state))
    try:
        await serve_aio_until_signalled(
            asyncio.Event(), server, health, log, "shutting down", grace=2
        )
    finally:
        ticks.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticks
    log.info("resource manager stopped")
    return 0


def _reload_queues(state: RMState, path: Path) -> None:
    """SIGHUP: read the queue file again.  A file that is not valid, or queues that drop one an
    unfinished job is in, are refused: the queues in use stay, and the log says why."""
    try:
        config = load_queue_file(path)
        state.run(lambda core, now: core.set_queues(config, source=str(path), now=now))
    except (QueueFileError, QueueError) as error:
        log.error("queue reload refused, the queues in use stay: %s", error)
        return
    log.info("queues reloaded from %s", path)
