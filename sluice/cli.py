"""The ``sluice`` command: daemons, the local cluster, jobs, nodes, logs, models and the demo.

User mistakes (bad files, unknown ids, an unreachable cluster) end as one line on stderr and a
non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from plumbing.errors import UserError

# What the commands use is imported by each command (issue 28): `sluice --help` and the parser
# import no gRPC, protobuf, TLS or policy module; these are for the type checker only.
if TYPE_CHECKING:
    from plumbing.broker_tls import BrokerTls
    from policies.scheduling.jobspec import JobSpec
    from sluice.client import RMClient
    from sluice_pb import aggregator_pb2 as apb
    from sluice_pb import node_agent_pb2 as agent_pb
    from sluice_pb import resource_manager_pb2 as rm_pb
    from sluice_pb.node_agent_pb2_grpc import AgentServiceStub

EXIT_USER_ERROR = 2
MODEL_TOPICS = ("reservation", "preempt", "dias", "filter")

Handler = Callable[[argparse.Namespace], int]


# ---------------------------------------------------------------------------- helpers


def load_spec_file(path: Path) -> tuple[str, JobSpec]:
    """Read and validate a job file exactly as the resource manager will (the shared loader,
    then ``parse_job_spec``); return its text, to send as written, and the spec.

    Any problem is a UserError of one line naming the file, the field and the problem; a file
    over the size limit is refused from its size, before it is read."""
    from plumbing.spec_text import decode_spec_text, load_job_document, read_spec_file
    from policies.scheduling.jobspec import SpecError, parse_job_spec

    try:
        text = decode_spec_text(read_spec_file(path))
        return text, parse_job_spec(load_job_document(text))
    except OSError as error:
        raise UserError(f"{path}: {error.strerror or error}") from None
    except SpecError as error:
        raise UserError(f"{path}: {error}") from None


def _client(args: argparse.Namespace) -> RMClient:
    from sluice.client import RMClient, resolve_rm, resolve_tls

    return RMClient.connect(resolve_rm(args.rm, args.dir), resolve_tls(args.tls_dir, args.dir))


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


# ---------------------------------------------------------------------------- job commands


def cmd_submit(args: argparse.Namespace) -> int:
    from sluice.render import as_json
    from sluice_pb.common_pb2 import JOB_SUCCEEDED

    text, _ = load_spec_file(args.file)
    client = _client(args)
    try:
        job = client.submit(text)
        if not args.wait:
            if args.json:
                _print_json(as_json(job))
            else:
                print(job.job_id)
            return 0
        if not args.json:
            print(f"submitted {job.job_id}", file=sys.stderr)
        final = watch(client, job.job_id, quiet=args.json)
        if args.json:
            _print_json(as_json(final))
        return 0 if final.state == JOB_SUCCEEDED else 1
    finally:
        client.close()


def watch(client: RMClient, job_id: str, *, quiet: bool = False) -> rm_pb.JobSummary:
    """Follow a job until it ends, printing a line per change; return its final summary."""
    from sluice.render import progress_line
    from sluice_pb import resource_manager_pb2 as rm_pb

    last: rm_pb.JobSummary | None = None
    for summary in client.jobs.WatchJob(rm_pb.GetJobRequest(job_id=job_id)):
        last = summary
        if not quiet:
            print(progress_line(summary), file=sys.stderr, flush=True)
    if last is None:
        raise UserError(f"job {job_id}: no status received")
    if not quiet and last.message:
        print(f"{last.job_id}: {last.message}", file=sys.stderr)
    return last


def cmd_run(args: argparse.Namespace) -> int:
    from job_master.master import JobMaster, RMUnreachableError, SupersededError
    from policies.scheduling.lifecycle import JobState
    from policies.scheduling.progress import PhaseProgress

    text, spec = load_spec_file(args.file)
    client = _client(args)
    try:
        job = client.submit(text, client_mode=True)
    finally:
        client.close()
    print(
        f"submitted {job.job_id}; running its job master here (Ctrl-C kills the job)",
        file=sys.stderr,
    )
    stop = threading.Event()

    def show(progress: Sequence[PhaseProgress]) -> None:
        parts = " ".join(f"{p.name}:{p.succeeded}/{p.tasks}" for p in progress)
        print(f"{job.job_id} {spec.name}: {parts}", file=sys.stderr, flush=True)

    master = JobMaster(
        client.address,
        job.job_id,
        on_progress=show,
        stop=stop,
        tls=client.tls,
        broker_tls=_broker_tls(args),
    )
    try:
        state = master.run()
    except KeyboardInterrupt:
        stop.set()
        print("interrupted: killing the job", file=sys.stderr)
        state = JobState.KILLED
    except (RMUnreachableError, SupersededError) as error:
        raise UserError(str(error)) from None
    print(f"{job.job_id} {state.value}", file=sys.stderr)
    return 0 if state is JobState.SUCCEEDED else 1


def _broker_tls(args: argparse.Namespace) -> BrokerTls | None:
    """Your certificate's files (the TLS directory the CLI uses: ``--tls-dir``,
    ``$SLUICE_TLS_DIR``, then the local cluster's), for a client-mode job master's links to
    TLS brokers; None without one (plaintext, or a bearer token, which brokers do not take)."""
    from plumbing.broker_tls import BrokerTls
    from plumbing.tls import TlsError
    from sluice.client import cluster_file, read_cluster

    chosen: Path | None = args.tls_dir
    if chosen is None and os.environ.get("SLUICE_TLS_DIR"):
        chosen = Path(os.environ["SLUICE_TLS_DIR"])
    if chosen is None and cluster_file(args.dir).exists():
        made = read_cluster(args.dir).get("client_tls")
        chosen = Path(made) if isinstance(made, str) and made else None
    if chosen is None:
        return None
    try:
        return BrokerTls.of_dir(chosen)
    except TlsError:
        return None  # a bearer token's directory: the job master says what it leaves out


def cmd_jobs(args: argparse.Namespace) -> int:
    from sluice.render import as_json, jobs_table
    from sluice_pb import resource_manager_pb2 as rm_pb

    client = _client(args)
    try:
        if args.watch:
            from sluice.cli_follow import watch

            def table() -> str:
                return jobs_table(client.jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=10).jobs)

            return watch(table, sys.stdout, interval=args.interval, title="sluice jobs")
        jobs = client.jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=10).jobs
    finally:
        client.close()
    if args.json:
        _print_json([as_json(j) for j in jobs])
    else:
        print(jobs_table(jobs))
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    from sluice.render import as_json, job_detail
    from sluice_pb import resource_manager_pb2 as rm_pb

    client = _client(args)
    try:
        detail = client.jobs.GetJob(rm_pb.GetJobRequest(job_id=args.job_id), timeout=10)
    finally:
        client.close()
    if args.json:
        _print_json(as_json(detail))
    else:
        from sluice.service_health import service_lines  # a service's watch, from its nodes

        print(job_detail(detail, service_lines(detail, client.tls)))
    return 0


def cmd_kill(args: argparse.Namespace) -> int:
    from plumbing.wire import JOB_STATE_FROM_PB
    from sluice_pb import resource_manager_pb2 as rm_pb

    client = _client(args)
    try:
        job = client.jobs.KillJob(rm_pb.GetJobRequest(job_id=args.job_id), timeout=10)
    finally:
        client.close()
    print(f"{job.job_id} {JOB_STATE_FROM_PB[job.state].value}")
    return 0


_TASK_CHANGES = ("preempt", "resize", "resume", "suspend")  # rm_pb.TASK_<CHANGE>


def cmd_task(args: argparse.Namespace) -> int:
    """Change a task's container through the RM, which has its node carry it out."""
    from sluice_pb import resource_manager_pb2 as rm_pb

    request = rm_pb.ChangeTaskRequest(
        job_id=args.job_id,
        task_id=args.task,
        change=f"TASK_{args.change.upper()}",  # the enum by name
        reason=args.reason or "",
    )
    if args.change == "resize":
        from sluice.cli_follow import check_resize_flags

        check_resize_flags(args.cpu, args.memory_mb)  # (before reaching for the RM)
    client = _client(args)
    try:
        if args.change == "resize":
            from sluice.cli_follow import resize_limits

            # One limit given: the other stays what the container has now.
            detail = None
            if args.cpu is None or args.memory_mb is None:
                detail = client.jobs.GetJob(rm_pb.GetJobRequest(job_id=args.job_id), timeout=10)
            cpu, memory_mb = resize_limits(detail, args.task, args.cpu, args.memory_mb)
            request.limits.cpu = cpu
            request.limits.memory_mb = memory_mb
        answer = client.jobs.ChangeTask(request, timeout=10)
    finally:
        client.close()
    if not answer.allocation_id:
        print(f"{args.job_id} {args.task}: container taken back (nothing ran in it)")
    else:
        print(
            f"{args.job_id} {args.task}: container {answer.allocation_id} on {answer.node_id} "
            f"to {answer.goal} at {answer.limits.cpu:g} cpu, {answer.limits.memory_mb} MiB "
            "(its node carries it out at its next heartbeat)"
        )
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from sluice.client import agent_stub
    from sluice_pb import node_agent_pb2 as agent_pb
    from sluice_pb import resource_manager_pb2 as rm_pb

    client = _client(args)
    try:
        detail = client.jobs.GetJob(rm_pb.GetJobRequest(job_id=args.job_id), timeout=10)
    finally:
        client.close()
    attempts = [t for t in detail.tasks if t.task_id == args.task]
    if args.attempt:
        attempts = [t for t in attempts if t.attempt == args.attempt]
    if not attempts:
        known = sorted({t.task_id for t in detail.tasks})
        hint = f" (known: {', '.join(known[:10])}{'…' if len(known) > 10 else ''})" if known else ""
        raise UserError(f"task: {args.task!r} of {args.job_id} has not run{hint}")
    task = max(attempts, key=lambda t: t.attempt)
    channel, stub = agent_stub(task.node_address, client.tls)
    ref = agent_pb.TaskRef(
        job_id=args.job_id,
        task_id=task.task_id,
        attempt=task.attempt,
        log_pass=task.log_pass,  # with TLS, the owner's or an admin's (from GetJob)
    )
    try:
        if args.follow:
            return _follow_logs(args, stub, ref)
        for chunk in stub.GetTaskLogs(ref, timeout=30):
            sys.stdout.buffer.write(chunk.data)
        sys.stdout.flush()
    finally:
        channel.close()
    return 0


def _follow_logs(args: argparse.Namespace, stub: AgentServiceStub, ref: agent_pb.TaskRef) -> int:
    """``sluice logs -f``: the attempt's output as it is written, until it ends (Ctrl-C ends
    following, status 0)."""
    from sluice.cli_follow import attempt_state, follow_log
    from sluice_pb import resource_manager_pb2 as rm_pb

    client = _client(args)

    def read() -> bytes:
        return b"".join(chunk.data for chunk in stub.GetTaskLogs(ref, timeout=30))

    def state() -> int:
        detail = client.jobs.GetJob(rm_pb.GetJobRequest(job_id=args.job_id), timeout=10)
        return attempt_state(detail, ref.task_id, ref.attempt)

    try:
        follow_log(read, state, sys.stdout.buffer)
    except KeyboardInterrupt:
        pass
    finally:
        client.close()
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    from sluice import machines
    from sluice.render import as_json, nodes_table, terminal_width
    from sluice_pb import resource_manager_pb2 as rm_pb

    client = _client(args)
    try:
        nodes = client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=10).nodes
        listing = _machine_listing(args, client)
    finally:
        client.close()
    if args.json:
        statuses = {m.node_id: as_json(m) for m in listing.machines} if listing else {}
        _print_json([{**as_json(n), "metrics": statuses.get(n.node_id)} for n in nodes])
    else:
        width = None if args.wide else terminal_width()
        print(nodes_table(nodes, machines.node_columns(listing), width))
    return 0


def cmd_queues(args: argparse.Namespace) -> int:
    from sluice.render import as_json, queues_table
    from sluice_pb import resource_manager_pb2 as rm_pb

    client = _client(args)
    try:
        listing = client.jobs.ListQueues(rm_pb.ListQueuesRequest(), timeout=10)
    finally:
        client.close()
    if args.json:
        _print_json(as_json(listing))
    else:
        print(queues_table(listing))
    return 0


def cmd_sprint(args: argparse.Namespace) -> int:
    from sluice.render import as_json, sprint_status
    from sluice_pb import resource_manager_pb2 as rm_pb

    client = _client(args)
    try:
        status = client.jobs.GetSprint(rm_pb.GetSprintRequest(), timeout=10)
    finally:
        client.close()
    if args.json:
        _print_json(as_json(status))
    else:
        print(sprint_status(status))
    return 0


def _machine_listing(args: argparse.Namespace, client: RMClient) -> apb.ListMachinesReply | None:
    """The aggregator's view of the machines, or None (with a note) when there is none."""
    from sluice import machines

    try:
        return machines.list_machines(
            machines.aggregator_address(args.aggregator, client), client.tls
        )
    except UserError as error:
        print(f"sluice: note: no load figures: {error}", file=sys.stderr)
        return None


def cmd_candidates(args: argparse.Namespace) -> int:
    from sluice import machines
    from sluice.render import as_json

    client = _client(args)
    try:
        address = machines.aggregator_address(args.aggregator, client)
    finally:
        client.close()
    reply = machines.get_candidates(address, client.tls)
    if args.json:
        _print_json(as_json(reply) | {"message": None})
        return 0
    print(machines.candidates_text(reply, machines.list_machines(address, client.tls)))
    return 0


# ---------------------------------------------------------------------------- local cluster


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_local_up(args: argparse.Namespace) -> int:
    from aggregator import flags as aggregator_flags
    from sluice import local_cluster

    if args.nodes < 1:
        raise UserError("--nodes: must be at least 1")
    _check_data_plane_flags(args)
    try:
        aggregator_flags.check(args)  # --load-threshold, --window...: before anything starts
    except ValueError as error:
        raise UserError(str(error)) from None
    cluster = local_cluster.up(
        local_cluster.LocalClusterSpec(
            directory=args.dir,
            nodes=args.nodes,
            runtime=args.runtime,
            cpus_per_node=args.cpus,
            memory_mb_per_node=args.memory_mb,
            kafka=args.kafka,
            kafka_tls=args.kafka_tls,
            mqtt=args.mqtt,
            influx_url=args.influx_url,
            aggregator_period=args.period,
            insecure=args.insecure,
            queues=args.queues,
            oversubscription=args.oversubscription,
            dispatch=args.dispatch,
            max_running_jobs=args.max_running_jobs,
            dias_config=args.dias_config,
            aggregator_args=aggregator_flags.forwarded(args),
        ),
        _say,
    )
    print(cluster["rm"])
    return 0


def _check_data_plane_flags(args: argparse.Namespace) -> None:
    """Refuse bad --kafka / --kafka-tls / --mqtt / --influx-url / --period before starting
    anything."""
    from aggregator.influx_store import parse_influx_url
    from plumbing.data_plane import DataPlane

    try:
        plane = DataPlane(
            kafka_bootstrap=args.kafka or "", mqtt_url=args.mqtt or "", kafka_tls=args.kafka_tls
        )
        if args.insecure and (plane.kafka_tls or plane.mqtt_tls):
            raise ValueError(
                "--insecure: a data plane over TLS (--kafka-tls, mqtts://) needs the cluster's "
                "certificates, which --insecure leaves out"
            )
        if args.influx_url:
            parse_influx_url(args.influx_url)
    except ValueError as error:
        raise UserError(str(error)) from None
    if not args.period > 0:
        raise UserError("--period: must be positive")


def cmd_local_down(args: argparse.Namespace) -> int:
    from sluice import local_cluster

    local_cluster.down(args.dir, _say)
    return 0


def cmd_local_restart(args: argparse.Namespace) -> int:
    from sluice import local_cluster

    local_cluster.restart(args.dir, args.daemon, _say)
    return 0


def cmd_local_status(args: argparse.Namespace) -> int:
    from sluice import local_cluster

    report = local_cluster.status(args.dir)
    if args.json:
        _print_json(report)
        return 0
    if report["state"] == "none":
        print(f"no local cluster in {report['directory']} (start one with `sluice local up`)")
        return 0
    cluster = report["cluster"]
    alive = report["alive"]
    assert isinstance(cluster, dict) and isinstance(alive, dict)
    print(f"resource manager {cluster['rm']} ({'up' if alive['rm'] else 'DOWN'})")
    for node in cluster["nodes"]:
        state = "up" if alive[node["node_id"]] else "DOWN"
        print(f"{node['node_id']:<8} {node['address']} ({state}, {cluster['runtime']} runtime)")
    for service in cluster.get("services", []):
        state = "up" if alive[service["name"]] else "DOWN"
        print(f"{service['name']:<10} {service.get('address', '-')} ({state})")
    if report["state"] == "stopped":
        print(
            f"the local cluster in {report['directory']} is stopped: none of its processes runs "
            "(`sluice local down` cleans up what it left, then `sluice local up`)"
        )
    return 1 if report["state"] == "degraded" else 0


# ---------------------------------------------------------------------------- daemons and demo


def cmd_rm(args: argparse.Namespace) -> int:
    from resource_manager.server import run

    _daemon_logging(args)
    return run(args)


def cmd_agent(args: argparse.Namespace) -> int:
    from node_agent.daemon import run

    _daemon_logging(args)
    return run(args)


def cmd_aggregator(args: argparse.Namespace) -> int:
    from aggregator.daemon import run

    _daemon_logging(args)
    return run(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from sluice.demo import run_demo

    return run_demo(args)


def _daemon_logging(args: argparse.Namespace) -> None:
    level = getattr(logging, args.log_level.upper())
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # kafka-python logs every connection and metadata refresh at INFO, and every failed
    # connection attempt (a refused connection, a failed TLS handshake) at ERROR, once per
    # retry; outages are ours to tell, once each, with their cause.
    logging.getLogger("kafka").setLevel(level if level == logging.DEBUG else logging.CRITICAL)


# ---------------------------------------------------------------------------- parser


# What `local up --dispatch` and `local restart` take, as policies.approximation.dispatch's
# DispatchMode and sluice.local_cluster's DAEMONS say (tests/unit/sluice/test_imports.py checks):
# written out so that building the parser imports neither.
DISPATCH_MODES = ("priority", "dias", "preemptive")
LOCAL_DAEMONS = "rm, aggregator, kafka, mqtt, agent NODE_ID"


def default_dir() -> Path:
    """The local cluster's directory: ``$SLUICE_DIR``, else ``~/.sluice``."""
    return Path(os.environ.get("SLUICE_DIR") or Path.home() / ".sluice")


RM_HELP = "resource manager address (default: $SLUICE_RM, then the local cluster)"
DIR_HELP = "local cluster directory (default: $SLUICE_DIR or ~/.sluice)"
TLS_HELP = (
    "your TLS directory, from `sluice ca issue --role client` (default: $SLUICE_TLS_DIR, then "
    "the local cluster's)"
)


def _add_cluster_options(parser: argparse.ArgumentParser, *, rm: bool = True) -> None:
    """``--dir`` (and ``--rm``) after a command too: ``sluice local up --dir D``, ``sluice jobs
    --rm ADDR``.  Only the top-level parser holds the defaults: a subcommand's parser copies every
    attribute it sets over the top level's, so here an option is set only when given."""
    if rm:
        parser.add_argument("--rm", default=argparse.SUPPRESS, help=RM_HELP)
        parser.add_argument("--tls-dir", type=Path, default=argparse.SUPPRESS, help=TLS_HELP)
    parser.add_argument("--dir", type=Path, default=argparse.SUPPRESS, help=DIR_HELP)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:  # noqa: PLR0915 - one flat list reads best
    """The ``sluice`` command's parser.  With ``only`` (the command named, or "" for none), the
    commands of ``_LAZY_COMMANDS`` other than that one are listed by name and help alone, their
    modules not imported; without it, every command is built in full."""
    parser = argparse.ArgumentParser(
        prog="sluice",
        description="Sluice: a two-tier cluster scheduler for shared clusters.",
        epilog="Pages cited as docs/X.md: `sluice docs X`.  Example files named as "
        "examples/...: `sluice examples` (`--copy DIR` copies them out).",
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    parser.add_argument("--rm", help=RM_HELP)
    parser.add_argument("--dir", type=Path, default=default_dir(), help=DIR_HELP)
    parser.add_argument("--tls-dir", type=Path, default=None, help=TLS_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("submit", help="submit a job file")
    p.add_argument("file", type=Path)
    p.add_argument("--wait", action="store_true", help="follow the job until it ends")
    p.add_argument("--json", action="store_true")
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_submit)

    p = sub.add_parser("run", help="submit a job and run its job master here (client mode)")
    p.add_argument("file", type=Path)
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("jobs", help="list jobs")
    p.add_argument("--json", action="store_true")
    p.add_argument("--watch", action="store_true", help="show the table again until Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0, help="--watch: seconds between tables")
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_jobs)

    p = sub.add_parser("job", help="show one job with its phases and task attempts")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true")
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_job)

    p = sub.add_parser("kill", help="kill a job")
    p.add_argument("job_id")
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_kill)

    p = sub.add_parser(
        "task", help="suspend, resume, resize or preempt a task's container (an operator's hand)"
    )
    p.add_argument("change", choices=sorted(_TASK_CHANGES))
    p.add_argument("job_id")
    p.add_argument("task", help="task id, e.g. map-3 (its latest live attempt)")
    p.add_argument(
        "--cpu", type=float, help="resize: the new CPU limit, within the grant (default: as now)"
    )
    p.add_argument(
        "--memory-mb",
        type=int,
        help="resize: the new memory limit, within the grant (default: as now)",
    )
    p.add_argument("--reason", help="recorded with the change")
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_task)

    p = sub.add_parser("logs", help="print a task's output (its latest attempt)")
    p.add_argument("job_id")
    p.add_argument("task", help="task id, e.g. map-3")
    p.add_argument("--attempt", type=int, help="a specific attempt")
    p.add_argument(
        "-f", "--follow", action="store_true", help="print its output as it comes, until it ends"
    )
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_logs)

    p = sub.add_parser("nodes", help="list nodes, with their load and indicators")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--wide", action="store_true", help="every column (default: those that fit the terminal)"
    )
    p.add_argument(
        "--aggregator",
        help="aggregator address (default: $SLUICE_AGGREGATOR, then the one the RM names)",
    )
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_nodes)

    p = sub.add_parser(
        "queues", help="the queues: share, usage, pending demand, what is preempted from each"
    )
    p.add_argument("--json", action="store_true")
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_queues)

    p = sub.add_parser(
        "sprint", help="DiAS sprinting: the budget left, the jobs sprinting, the last sprints"
    )
    p.add_argument("--json", action="store_true")
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_sprint)

    p = sub.add_parser("candidates", help="the aggregator's candidate machines and versions")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--aggregator",
        help="aggregator address (default: $SLUICE_AGGREGATOR, then the one the RM names)",
    )
    _add_cluster_options(p)
    p.set_defaults(handler=cmd_candidates)

    p = sub.add_parser("local", help="a cluster on this machine")
    _add_cluster_options(p, rm=False)
    local = p.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    p = local.add_parser("up", help="start a resource manager and N agents")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--runtime", choices=["process", "docker"], default="process")
    p.add_argument("--cpus", type=float, help="CPU capacity per node (default: all usable CPUs)")
    p.add_argument("--memory-mb", type=int, default=4096, help="memory per node (default: 4096)")
    p.add_argument("--kafka", help="use this Kafka broker host:port (default: start Tansu)")
    p.add_argument(
        "--kafka-tls",
        action="store_true",
        help="--kafka speaks TLS: the daemons use their certificates (Tansu has no TLS)",
    )
    p.add_argument(
        "--mqtt",
        help="use this MQTT broker mqtt://host:port or mqtts://host:port (TLS) (default: start "
        "amqtt, over TLS unless --insecure)",
    )
    p.add_argument("--influx-url", help="keep samples in this InfluxDB (default: memory only)")
    p.add_argument("--period", type=float, default=10.0, help="aggregator ranking period, seconds")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="no TLS: plaintext links and no authentication (default: a CA of the cluster's own "
        "and a certificate per daemon, in DIR/tls)",
    )
    p.add_argument(
        "--queues",
        type=Path,
        help="the RM's queue file (docs/preemption.md); the RM re-reads it on SIGHUP",
    )
    p.add_argument(
        "--oversubscription",
        choices=["up", "rp"],
        default="up",
        help="ROSE's switch, for the RM (which hands it to the agents) and the aggregator: up "
        "(batch only, the default) or rp (latency-sensitive services share the machines)",
    )
    p.add_argument(
        "--dispatch",
        choices=DISPATCH_MODES,
        help="the RM's dispatch (docs/approximation.md): priority (the default), dias (priority "
        "buffers, never evicting) or preemptive (the buffers, evicting: the paper's baseline)",
    )
    p.add_argument(
        "--max-running-jobs",
        type=int,
        help="with --dispatch dias or preemptive: jobs in execution at once (the RM's default: 1)",
    )
    p.add_argument(
        "--dias-config",
        type=Path,
        help="the RM's DiAS settings: drop ratios, sprint timeouts, accuracy curve, sprint budget "
        "(e.g. examples/dias/dias.yaml: `sluice examples`)",
    )
    from aggregator import flags as aggregator_flags  # light: no numpy

    aggregator_flags.add_arguments(p, for_local=True)  # passed on to its aggregator
    _add_cluster_options(p, rm=False)
    p.set_defaults(handler=cmd_local_up)
    p = local.add_parser("down", help="stop everything `local up` started")
    _add_cluster_options(p, rm=False)
    p.set_defaults(handler=cmd_local_down)
    p = local.add_parser(
        "restart",
        help="stop one daemon (if it runs) and start it again with its recorded command line, "
        "on the same ports",
    )
    p.add_argument(
        "daemon",
        nargs="+",
        metavar="DAEMON",
        help=f"which: {LOCAL_DAEMONS} (e.g. `agent node-1`)",
    )
    _add_cluster_options(p, rm=False)
    p.set_defaults(handler=cmd_local_restart)
    p = local.add_parser("status", help="is the local cluster up?")
    p.add_argument("--json", action="store_true")
    _add_cluster_options(p, rm=False)
    p.set_defaults(handler=cmd_local_status)

    for name, (help_text, register) in _LAZY_COMMANDS.items():
        if only is None or only == name:
            register(sub, help_text)
        else:
            sub.add_parser(name, help=help_text)  # listed in --help; never parsed
    return parser


def _add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )


# ---------------------------------------------------------------------------- lazy commands
#
# These commands take their arguments from modules that are slow to import (a daemon's, with its
# numeric and database libraries; the simulator's, with plotting; the models'; the CA's, with
# cryptography): their parsers are built only when the command is named, so that every other
# command, and `sluice --help`, answers at once.  A restarted node agent, too, must register
# within the RM's node timeout to keep its tasks (docs/architecture.md, "Node timeout and lease").

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _register_rm(sub: Subparsers, help_text: str) -> None:
    from resource_manager.server import add_arguments

    p = sub.add_parser("rm", help=help_text)
    _add_log_level(p)
    add_arguments(p)
    p.set_defaults(handler=cmd_rm)


def _register_agent(sub: Subparsers, help_text: str) -> None:
    from node_agent.daemon import add_arguments

    p = sub.add_parser("agent", help=help_text)
    _add_log_level(p)
    add_arguments(p)
    p.set_defaults(handler=cmd_agent)


def _register_aggregator(sub: Subparsers, help_text: str) -> None:
    from aggregator.daemon import add_arguments

    p = sub.add_parser("aggregator", help=help_text)
    _add_log_level(p)
    add_arguments(p)
    p.set_defaults(handler=cmd_aggregator)


def _register_demo(sub: Subparsers, help_text: str) -> None:
    p = sub.add_parser("demo", help=help_text)
    p.add_argument("--runtime", choices=["process", "docker"], default="process")
    p.add_argument("--nodes", type=int, default=2)
    p.set_defaults(handler=cmd_demo)


def _register_sim(sub: Subparsers, help_text: str) -> None:
    from simulator.cli import register

    register(sub)


def _register_ca(sub: Subparsers, help_text: str) -> None:
    from sluice import ca

    ca.register(sub)


def _register_model(sub: Subparsers, help_text: str) -> None:
    model = sub.add_parser("model", help=help_text)
    topics = model.add_subparsers(dest="model_command", required=True, metavar="MODEL")
    for topic in MODEL_TOPICS:
        try:
            module = importlib.import_module(f"sluice.model.{topic}")
        except ModuleNotFoundError as error:
            if error.name != f"sluice.model.{topic}":
                raise  # a library the model needs is missing: main says which
            continue
        module.register(topics)


def _register_examples(sub: Subparsers, help_text: str) -> None:
    from sluice.cli_examples import register_examples

    register_examples(sub, help_text)


def _register_docs(sub: Subparsers, help_text: str) -> None:
    from sluice.cli_examples import register_docs

    register_docs(sub, help_text)


# name -> (help, what builds its parser); in the order `sluice --help` lists them.
_LAZY_COMMANDS: dict[str, tuple[str, Callable[[Subparsers, str], None]]] = {
    "rm": ("run a resource manager (daemon)", _register_rm),
    "agent": ("run a node agent (daemon)", _register_agent),
    "aggregator": ("run the cluster aggregator (daemon)", _register_aggregator),
    "demo": ("run the bundled workload on a throw-away local cluster", _register_demo),
    "sim": ("simulate a workload on the scheduler's own code", _register_sim),
    "ca": ("the cluster's certificate authority (mutual TLS)", _register_ca),
    "model": ("the policies' models, for choosing their knobs", _register_model),
    "examples": ("example files shipped with Sluice; --copy DIR copies them", _register_examples),
    "docs": ("the documentation shipped with Sluice: `sluice docs preemption`", _register_docs),
}

# The top-level options that take a value, to find the command in a command line.
_VALUED_OPTIONS = ("--rm", "--dir", "--tls-dir")


def command_of(argv: Sequence[str]) -> str:
    """The command a command line names (its first word past the top-level options), or ""
    when it names none (``sluice --help``, ``sluice --version``)."""
    words = iter(argv)
    for word in words:
        # argparse takes a unique prefix of an option (--tls for --tls-dir) too
        if len(word) > 2 and any(option.startswith(word) for option in _VALUED_OPTIONS):
            next(words, None)
        elif word == "--":
            return next(words, "")
        elif not word.startswith("-"):
            return word
    return ""


class _VersionAction(argparse.Action):
    """``--version``: the installed distribution's version, read only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"sluice {version('sluice')}")
        except PackageNotFoundError:
            print("sluice (not installed: running from a source tree)")
        parser.exit()


# A missing library of an optional extra (pyproject.toml), by its top-level module: the hint that
# names the extra.
_EXTRA_HINTS = {"matplotlib": "the simulator needs `pip install 'sluice[sim]'`"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser(command_of(argv))
        args = parser.parse_args(argv)
    except ModuleNotFoundError as error:
        return _missing_extra(error)
    handler: Handler = args.handler
    import grpc  # most commands call the RM; its errors are told below

    try:
        return handler(args)
    except UserError as error:
        print(f"sluice: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except grpc.RpcError as error:
        from plumbing.rpc import describe_rpc_error
        from sluice.client import tls_problem

        # The TLS directory is read unchecked (sluice/client.py): a refused handshake may be
        # its certificate's fault, which only the full check can name.
        if isinstance(error, grpc.Call) and error.code() is grpc.StatusCode.UNAVAILABLE:
            problem = tls_problem(getattr(args, "tls_dir", None), args.dir)
            if problem is not None:
                print(f"sluice: error: {problem}", file=sys.stderr)
                return EXIT_USER_ERROR
        target = args.rm or "the resource manager"
        print(f"sluice: error: {describe_rpc_error(error, target)}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as error:
        return _missing_extra(error)
    except KeyboardInterrupt:
        print("sluice: interrupted", file=sys.stderr)
        return 130


def _missing_extra(error: ModuleNotFoundError) -> int:
    """A library of an optional extra is not installed: one line naming the extra; anything
    else missing is a broken installation, and its traceback is kept."""
    missing = (error.name or "").split(".")[0]
    if missing not in _EXTRA_HINTS:
        raise error
    print(f"sluice: error: no module {missing!r}: {_EXTRA_HINTS[missing]}", file=sys.stderr)
    return EXIT_USER_ERROR
