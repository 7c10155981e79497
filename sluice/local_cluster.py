"""``sluice local up|down|status|restart``: a whole cluster on this machine, as background
processes.

``up`` starts the data plane — a Kafka-protocol broker and an MQTT broker (embedded: Tansu and
amqtt, unless ``--kafka`` / ``--mqtt`` name existing ones) and the cluster aggregator (with
InfluxDB when ``--influx-url`` is given) — then one resource manager and N node agents.  Each is
its own process, in its own session, logging to ``DIR/logs``.  What does not wait on another
starts at once: the brokers and the RM together (ports are picked first, so each is told the
others' addresses before they serve), the aggregator once the brokers serve, every agent
together once the RM serves; each is said as it starts and as it is ready.  It waits until
every node has registered and writes ``DIR/cluster.json``.  ``down`` drains every agent
(stopping its tasks and removing their cgroups and containers) through its ``Drain`` RPC,
starting an agent that died again first so that it can, then stops every process it started
(each pid only while it is still that process: ``cluster.json`` records each one's identity
beside its pid, see ``sluice.process_identity``).  ``down`` and ``status`` where no cluster
runs say so.

Each directory is its own cluster: its cluster id (``local-<hash of the directory>``) names its
cgroups and containers, so two local clusters on one machine, both with a ``node-1``, never
touch each other's tasks.  The RM is started on free ports (main and bearer-token) that it then
keeps across restarts in its state directory; ``cluster.json`` records every other daemon's
command line on the port it bound first, so ``restart`` (one daemon, stopped and started again
with its recorded command line) brings each back where the others look for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from plumbing.errors import UserError
from plumbing.intervals import node_timeout_for
from plumbing.queue_file import QueueFileError, load_dias_config, load_queue_file
from plumbing.tls import ClientTls, TlsError
from sluice import brokers
from sluice.client import RMClient, agent_stub, cluster_client_tls, cluster_file, read_cluster
from sluice.cluster_certs import ClusterCerts, ensure_certificates
from sluice.process_identity import ProcessIdentity, Recorded, Verdict, judge, read_identity, stop
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb

START_TIMEOUT = 30.0
IDENTITY_WAIT = 5.0  # seconds a child just spawned may take to show its command line
Say = Callable[[str], None]


@dataclass(frozen=True)
class LocalClusterSpec:
    directory: Path
    nodes: int = 2
    runtime: str = "process"
    cpus_per_node: float | None = None
    memory_mb_per_node: int | None = None
    heartbeat_interval: float = 0.5
    kafka: str | None = None  # None: start an embedded broker
    kafka_tls: bool = False  # the given Kafka speaks TLS (Tansu, the embedded one, cannot)
    mqtt: str | None = None  # None: start an embedded broker
    influx_url: str | None = None  # None: windows in memory only
    aggregator_period: float = 10.0
    metrics_interval: float = 1.0
    metrics_buffer: int | None = None  # None: the agent's default
    max_master_share: float | None = None  # None: the RM's default
    aggregator_ranking: str | None = None  # None: the aggregator's default ("rose")
    insecure: bool = False  # no TLS: plaintext links, no authentication
    queues: Path | None = None  # the RM's queue file (docs/preemption.md); None: one queue
    preemption_interval: float | None = None  # None: the RM's default
    oversubscription: str = "up"  # ROSE's UP/RP switch: the RM's (agents') and the aggregator's
    agent_args: tuple[str, ...] = ()  # more flags for every agent (its speculative queue...)
    aggregator_args: tuple[str, ...] = ()  # more flags for the aggregator (its load filter...)
    dispatch: str | None = None  # the RM's --dispatch (priority, dias, preemptive); None: default
    max_running_jobs: int | None = None  # with dispatch dias/preemptive; None: the RM's default
    dias_config: Path | None = None  # the RM's DiAS settings (docs/approximation.md)
    rm_args: tuple[str, ...] = ()  # more flags for the RM


def cluster_id_for(directory: Path) -> str:
    """The cluster id of the local cluster kept in ``directory`` (stable, unique per path)."""
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:10]
    return f"local-{digest}"


def _spawn(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log_file:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives the CLI; Ctrl-C in the shell does not reach it
        )


def _wait_for_file(path: Path, process: subprocess.Popen[bytes], what: str, log_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text().strip()
        if process.poll() is not None:
            raise UserError(f"{what} exited with code {process.returncode}: {_last_line(log_path)}")
        time.sleep(0.05)
    raise UserError(f"{what} did not start within {START_TIMEOUT:.0f} s (see {log_path})")


def _last_line(log_path: Path) -> str:
    try:
        lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"


def _identity_key(pid_key: str) -> str:
    """Where a record keeps the identity of the pid under ``pid_key``: ``rm_identity`` beside
    ``rm_pid``, ``identity`` beside ``pid``."""
    return pid_key.removesuffix("pid") + "identity"


def _record_pid(
    record: dict[str, object], pid_key: str, process: subprocess.Popen[bytes]
) -> dict[str, object]:
    """Record ``process`` (a child just started) in ``record``: its pid under ``pid_key``, its
    identity beside it (start time, boot, command line: what tells it from a later process
    with the same pid).  Returns ``record``."""
    record[pid_key] = process.pid
    identity = _child_identity(process)
    if identity is not None:
        record[_identity_key(pid_key)] = identity.to_record()
    else:  # it already exited: a later process with its pid is not it (no start time matches)
        record[_identity_key(pid_key)] = ProcessIdentity(process.pid, -1, "", ()).to_record()
    return record


def _child_identity(process: subprocess.Popen[bytes]) -> ProcessIdentity | None:
    """The identity of ``process``, a child just started; None once it has exited.  Right
    after ``Popen`` returns, the child's ``execve`` may not have published its command line yet
    (``/proc/PID/cmdline`` reads empty, a third of the time on a loaded host), and an identity
    with no command line is never judged to be the process later: wait for it (briefly)."""
    deadline = time.monotonic() + IDENTITY_WAIT
    while True:
        # Until reaped (poll() reaps), a child keeps its pid: what /proc shows is this process.
        identity = read_identity(process.pid) if process.poll() is None else None
        if identity is None or identity.cmdline or time.monotonic() > deadline:
            return identity
        time.sleep(0.005)


def _recorded_process(record: dict[str, object], name: str, pid_key: str, argv: object) -> Recorded:
    """The process ``record`` names under ``pid_key``, with the identity recorded beside it."""
    try:
        pid = int(str(record.get(pid_key, 0)))
    except ValueError:
        pid = 0
    return Recorded(
        name,
        pid,
        ProcessIdentity.from_record(record.get(_identity_key(pid_key))),
        [str(a) for a in argv] if isinstance(argv, list) else [],
    )


def _rm_process(cluster: dict[str, object]) -> Recorded:
    return _recorded_process(cluster, "the RM", "rm_pid", cluster.get("rm_argv"))


def _node_process(node: dict[str, object]) -> Recorded:
    return _recorded_process(node, f"{node['node_id']}'s agent", "pid", node.get("argv"))


def _service_process(service: dict[str, object]) -> Recorded:
    name = str(service.get("name"))
    label = "the aggregator" if name == "aggregator" else f"the {name} broker"
    return _recorded_process(service, label, "pid", service.get("argv"))


def _services(services: list[dict[str, object]]) -> list[Recorded]:
    return [_service_process(s) for s in services]


def _children(processes: list[subprocess.Popen[bytes]]) -> list[Recorded]:
    """Children of ours still running, to stop (one that exited, and was reaped, is left)."""
    return [
        _recorded_process(_record_pid({}, "pid", p), f"pid {p.pid}", "pid", p.args)
        for p in processes
        if p.poll() is None
    ]


def _still_ours(process: Recorded) -> bool:
    """Whether the recorded process still runs (under its pid: not another one that got it)."""
    now = read_identity(process.pid) if process.pid > 0 else None
    return judge(process.pid, process.identity, process.argv, now) is Verdict.OURS


def _rm_options(spec: LocalClusterSpec) -> list[str]:
    """The RM's scheduling flags the spec sets."""
    options = []
    if spec.max_master_share is not None:
        options += ["--max-master-share", str(spec.max_master_share)]
    if spec.queues is not None:
        # The file itself, not a copy: edit it and send the RM a SIGHUP to reload it.
        options += ["--queues", str(spec.queues.resolve())]
    if spec.preemption_interval is not None:
        options += ["--preemption-interval", str(spec.preemption_interval)]
    options += ["--oversubscription", spec.oversubscription]
    if spec.dispatch is not None:
        options += ["--dispatch", spec.dispatch]
    if spec.max_running_jobs is not None:
        options += ["--max-running-jobs", str(spec.max_running_jobs)]
    if spec.dias_config is not None:
        options += ["--dias-config", str(spec.dias_config.resolve())]
    return [*options, *spec.rm_args]


def _check_rm_settings(spec: LocalClusterSpec) -> None:
    """A bad queue file, DiAS settings file or job count is refused before anything starts."""
    try:
        if spec.queues is not None:
            load_queue_file(spec.queues)
    except QueueFileError as error:
        raise UserError(f"--queues: {error}") from None
    try:
        if spec.dias_config is not None:
            load_dias_config(spec.dias_config)
    except QueueFileError as error:
        raise UserError(f"--dias-config: {error}") from None
    if spec.max_running_jobs is not None and spec.max_running_jobs < 1:
        raise UserError("--max-running-jobs: must be at least 1")


def up(spec: LocalClusterSpec, say: Say) -> dict[str, object]:
    """Start the cluster and return its ``cluster.json`` record.  Whatever does not wait on
    another starts at once: the brokers and the RM together (each is told the others'
    addresses, on ports picked before they start), the aggregator once the brokers serve, then
    the agents together once the RM serves.  ``say`` hears each daemon as it starts and as it
    is ready."""
    _check_rm_settings(spec)
    if spec.kafka_tls and spec.kafka is None:
        raise UserError("--kafka-tls: needs --kafka (the embedded broker, Tansu, has no TLS)")
    directory = spec.directory.resolve()
    if cluster_file(directory).exists():
        existing = read_cluster(directory)
        if _still_ours(_rm_process(existing)):
            raise UserError(
                f"a local cluster already runs in {directory} (`sluice local down` first)"
            )
        cluster_file(directory).unlink()
    directory.mkdir(parents=True, exist_ok=True)
    logs = directory / "logs"
    cluster_id = cluster_id_for(directory)
    node_ids = [f"node-{index}" for index in range(1, spec.nodes + 1)]
    certs = _certificates(spec, directory, cluster_id, node_ids, say)
    client_tls = ClientTls.load(certs.client) if certs is not None else None
    say(f"starting a local cluster of {spec.nodes} nodes in {directory} (logs in {logs})")
    clock = _Clock()
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="local-up")
    plane = _Plane(spec, certs)
    started: list[subprocess.Popen[bytes]] = []
    try:
        # The brokers and the RM at once (the RM only names the others), the aggregator as soon
        # as the brokers serve (it reads and publishes from its start), the agents once the RM
        # serves.
        brokers_starting = _start_brokers(plane, logs, pool, say)
        rm_argv = _rm_argv(spec, plane, directory, cluster_id, certs)
        rm = _spawn_rm(rm_argv, directory, say)
        started.append(rm)
        _wait_ready(brokers_starting, say, clock)
        aggregator = _spawn_aggregator(spec, plane, directory, logs, certs, say)
        started.append(aggregator.process)
        daemons = [
            aggregator.pending("the aggregator"),
            _Pending.of_file("the resource manager", directory / "rm.addr", rm, logs / "rm.log"),
        ]
        ready = _wait_ready(daemons, say, clock, needed={"the resource manager"})
        rm_address = ready["the resource manager"]
        tokens_file = directory / "rm.addr.tokens"
        rm_tokens = tokens_file.read_text().strip() if tokens_file.exists() else ""
        # Every agent at once, now that the RM serves (the aggregator may still be starting).
        nodes, agents = _start_agents(spec, directory, rm_address, cluster_id, certs, started, say)
        _wait_ready([*daemons, *agents], say, clock, addresses=ready)
        for node in nodes:
            node["address"] = ready[f"agent {node['node_id']}"]
            node["argv"] = pinned_argv(node["argv"], str(node["address"]))  # type: ignore[arg-type]
        _wait_registered(rm_address, client_tls, spec.nodes, started, logs, say, clock)
    except BaseException:
        stop([*_children(started), *_services(plane.broker_records(wait=True))], say)
        raise
    finally:
        pool.shutdown(wait=False)
    cluster: dict[str, object] = {
        "cluster_id": cluster_id,
        "rm": rm_address,
        "rm_tokens": rm_tokens,  # the bearer-token port ("" without TLS)
        "rm_argv": rm_argv,
        "runtime": spec.runtime,
        "directory": str(directory),
        "nodes": nodes,
        # In the order they start: `down` stops them the other way round.
        "services": [*plane.broker_records(wait=False), aggregator.record],
        "data_plane": {"kafka": plane.kafka, "mqtt": plane.mqtt, "aggregator": plane.aggregator},
        "client_tls": str(certs.client) if certs is not None else "",
        "started": time.time(),
    }
    _record_pid(cluster, "rm_pid", rm)
    _write_cluster(directory, cluster)
    say(
        f"{spec.nodes} nodes registered ({spec.runtime} runtime) in {clock.elapsed():.1f} s; "
        f"see {cluster_file(directory)}"
    )
    return cluster


def _start_agents(
    spec: LocalClusterSpec,
    directory: Path,
    rm_address: str,
    cluster_id: str,
    certs: ClusterCerts | None,
    started: list[subprocess.Popen[bytes]],
    say: Say,
) -> tuple[list[dict[str, object]], list[_Pending]]:
    """Start every node's agent at once (each joins ``started``): their ``cluster.json``
    records (the address is added once each serves) and what to wait on."""
    logs = directory / "logs"
    node_ids = [f"node-{index}" for index in range(1, spec.nodes + 1)]
    nodes: list[dict[str, object]] = []
    agents: list[_Pending] = []
    for node_id in node_ids:
        addr_file = directory / f"{node_id}.addr"
        addr_file.unlink(missing_ok=True)
        argv = _agent_argv(spec, directory, rm_address, cluster_id, node_id, certs)
        agent = _spawn(argv, logs / f"{node_id}.log")
        started.append(agent)
        nodes.append(_record_pid({"node_id": node_id, "argv": argv}, "pid", agent))
        agents.append(
            _Pending.of_file(f"agent {node_id}", addr_file, agent, logs / f"{node_id}.log")
        )
    say(f"starting {len(node_ids)} node agents ({', '.join(node_ids)}, {spec.runtime} runtime)")
    return nodes, agents


class _Clock:
    """Seconds since ``up`` began, for its progress lines."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start


@dataclass
class _Pending:
    """A daemon starting: ``ready()`` is its address once it serves, None until then, and
    raises UserError once it cannot (it exited)."""

    name: str
    ready: Callable[[], str | None]
    log_path: Path

    @classmethod
    def of_file(
        cls, name: str, address_file: Path, process: subprocess.Popen[bytes], log_path: Path
    ) -> _Pending:
        """A daemon that publishes its address in ``address_file`` once it serves (removed
        before it was spawned)."""

        def ready() -> str | None:
            if address_file.exists():
                return address_file.read_text().strip() or None
            if process.poll() is not None:
                raise UserError(
                    f"{name} exited with code {process.returncode}: {_last_line(log_path)}"
                )
            return None

        return cls(name, ready, log_path)

    @classmethod
    def of_future(
        cls, name: str, future: Future[brokers.ServiceProcess], log_path: Path
    ) -> _Pending:
        """A broker that ``brokers.start_*`` starts in ``future`` (which raises its error)."""
        return cls(name, lambda: future.result().address if future.done() else None, log_path)


def _wait_ready(
    pending: list[_Pending],
    say: Say,
    clock: _Clock,
    needed: set[str] | None = None,
    addresses: dict[str, str] | None = None,
) -> dict[str, str]:
    """Wait until those of ``pending`` named in ``needed`` (None: all) serve, saying each of
    ``pending`` as it does; ``addresses`` (updated, and returned) holds those ready by name,
    so that a later call goes on with the others.  UserError when one exits, or when none gets
    ready for ``START_TIMEOUT`` (progress restarts the clock: daemons starting together on a
    loaded machine take longer, not forever)."""
    addresses = {} if addresses is None else addresses
    needed = {p.name for p in pending} if needed is None else needed
    deadline = time.monotonic() + START_TIMEOUT
    while not needed <= addresses.keys():
        for item in pending:
            if item.name in addresses:
                continue
            address = item.ready()
            if address is not None:
                addresses[item.name] = address
                say(f"{item.name} ready at {address} ({clock.elapsed():.1f} s)")
                deadline = time.monotonic() + START_TIMEOUT
        if needed <= addresses.keys():
            break
        if time.monotonic() > deadline:
            late = [p for p in pending if p.name in needed and p.name not in addresses]
            raise UserError(
                f"{', '.join(p.name for p in late)} did not start within {START_TIMEOUT:.0f} s "
                f"(see {late[0].log_path})"
            )
        time.sleep(0.05)
    return addresses


class _Plane:
    """The data plane's addresses, known before anything starts (free ports picked first), and
    the embedded brokers being started."""

    def __init__(self, spec: LocalClusterSpec, certs: ClusterCerts | None) -> None:
        self.certs = certs
        self.embedded_kafka = brokers.free_port() if spec.kafka is None else None
        self.embedded_mqtt = brokers.free_port() if spec.mqtt is None else None
        self.kafka = spec.kafka or f"127.0.0.1:{self.embedded_kafka}"
        scheme = "mqtts" if certs is not None else "mqtt"
        self.mqtt = spec.mqtt or f"{scheme}://127.0.0.1:{self.embedded_mqtt}"
        self.aggregator = f"127.0.0.1:{brokers.free_port()}"
        self.futures: list[Future[brokers.ServiceProcess]] = []

    def broker_records(self, *, wait: bool) -> list[dict[str, object]]:
        """The embedded brokers started, as ``cluster.json`` records them; with ``wait``, after
        those still starting are done (to stop them all), else only those started."""
        records = []
        for future in self.futures:
            if not (wait or future.done()):
                continue
            with contextlib.suppress(Exception):
                records.append(_service_record(future.result()))
        return records


def _start_brokers(plane: _Plane, logs: Path, pool: ThreadPoolExecutor, say: Say) -> list[_Pending]:
    """Start the embedded brokers (those not given), each in ``pool``."""
    pending = []
    if plane.embedded_kafka is not None:
        say(
            f"starting the embedded Kafka-protocol broker (Tansu) at {plane.kafka}, plaintext "
            "(Tansu has no TLS): kafka-python clients work, librdkafka before 2.2 (e.g. Debian "
            "12's kcat) fails its handshake; --kafka HOST:PORT uses an Apache Kafka instead"
        )
        future = pool.submit(brokers.start_kafka, plane.embedded_kafka, logs / "kafka.log")
        plane.futures.append(future)
        pending.append(_Pending.of_future("kafka", future, logs / "kafka.log"))
    if plane.embedded_mqtt is not None:
        # Over TLS when the cluster has certificates: the broker presents a broker certificate
        # of the cluster's CA and admits only clients holding one of that CA's.
        tls = plane.certs is not None
        say(
            f"starting the embedded MQTT broker (amqtt) at {plane.mqtt}"
            + (" (TLS, client certificates of the cluster required)" if tls else "")
        )
        future = pool.submit(
            brokers.start_embedded_mqtt,
            plane.embedded_mqtt,
            logs / "mqtt.log",
            tls_dir=plane.certs.mqtt_broker if plane.certs is not None else None,
        )
        plane.futures.append(future)
        pending.append(_Pending.of_future("mqtt", future, logs / "mqtt.log"))
    return pending


@dataclass
class _Started:
    """A daemon of ours just spawned, and its ``cluster.json`` record."""

    process: subprocess.Popen[bytes]
    record: dict[str, object]
    address_file: Path
    log_path: Path

    def pending(self, name: str) -> _Pending:
        return _Pending.of_file(name, self.address_file, self.process, self.log_path)


def _spawn_rm(argv: list[str], directory: Path, say: Say) -> subprocess.Popen[bytes]:
    for stale in _published_files(directory / "rm.addr"):
        stale.unlink(missing_ok=True)
    process = _spawn(argv, directory / "logs" / "rm.log")
    say("starting the resource manager")
    return process


def _rm_argv(
    spec: LocalClusterSpec,
    plane: _Plane,
    directory: Path,
    cluster_id: str,
    certs: ClusterCerts | None,
) -> list[str]:
    rm_argv = [
        sys.executable,
        "-m",
        "sluice",
        "rm",
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
        str(directory / "rm"),
        "--cluster-id",
        cluster_id,
        "--address-file",
        str(directory / "rm.addr"),
        "--node-timeout",
        str(node_timeout_for(spec.heartbeat_interval)),
        "--kafka",
        plane.kafka,
        "--mqtt",
        plane.mqtt,
        "--aggregator",
        plane.aggregator,
        *_tls_flags(certs.rm if certs is not None else None),
        *(["--kafka-tls"] if spec.kafka_tls else []),
    ]
    rm_argv += _rm_options(spec)
    if certs is not None:  # people without a certificate come with bearer tokens
        rm_argv += ["--token-listen", "127.0.0.1:0"]
    return rm_argv


def _agent_argv(
    spec: LocalClusterSpec,
    directory: Path,
    rm_address: str,
    cluster_id: str,
    node_id: str,
    certs: ClusterCerts | None,
) -> list[str]:
    addr_file = directory / f"{node_id}.addr"
    argv = [
        sys.executable,
        "-m",
        "sluice",
        "agent",
        "--rm",
        rm_address,
        "--node-id",
        node_id,
        "--cluster-id",
        cluster_id,
        "--runtime",
        spec.runtime,
        "--state-dir",
        str(directory / node_id),
        "--address-file",
        str(addr_file),
        "--heartbeat-interval",
        str(spec.heartbeat_interval),
        "--metrics-interval",
        str(spec.metrics_interval),
        # The nodes share this host: each judges its own tasks' share of what it offers, not
        # the host's load, or a busy host makes no node a candidate (node_agent/metrics/share.py).
        "--load-scope",
        "own",
        *_tls_flags(certs.agents[node_id] if certs is not None else None),
    ]
    if spec.metrics_buffer is not None:
        argv += ["--metrics-buffer", str(spec.metrics_buffer)]
    if spec.cpus_per_node is not None:
        argv += ["--cpus", str(spec.cpus_per_node)]
    if spec.memory_mb_per_node is not None:
        argv += ["--memory-mb", str(spec.memory_mb_per_node)]
    return [*argv, *spec.agent_args]


def _certificates(
    spec: LocalClusterSpec, directory: Path, cluster_id: str, node_ids: list[str], say: Say
) -> ClusterCerts | None:
    """The cluster's certificates (None with ``--insecure``)."""
    if spec.insecure:
        say("WARNING: --insecure: no TLS; anyone who can reach these ports owns the cluster")
        return None
    try:
        certs = ensure_certificates(directory / "tls", cluster_id, node_ids)
    except (TlsError, OSError) as error:
        raise UserError(
            f"{directory / 'tls'}: cannot make the cluster's certificates: {error}"
        ) from None
    say(f"TLS on every link; your client certificate is in {certs.client}")
    return certs


def _tls_flags(tls_dir: Path | None) -> list[str]:
    return ["--tls-dir", str(tls_dir)] if tls_dir is not None else ["--insecure"]


def _spawn_aggregator(
    spec: LocalClusterSpec,
    plane: _Plane,
    directory: Path,
    logs: Path,
    certs: ClusterCerts | None,
    say: Say,
) -> _Started:
    """Spawn the aggregator on ``plane.aggregator`` (the RM hands that address out, so the
    port is picked first; the command line ``cluster.json`` records keeps it)."""
    addr_file = directory / "aggregator.addr"
    addr_file.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "sluice",
        "aggregator",
        "--listen",
        plane.aggregator,
        "--address-file",
        str(addr_file),
        "--kafka",
        plane.kafka,
        "--mqtt",
        plane.mqtt,
        "--period",
        str(spec.aggregator_period),
        # Three missed samples make a machine disconnected (at least a second, so a busy
        # machine's late sample does not flap it).
        "--stale-after",
        str(max(1.0, spec.metrics_interval * 3)),
        *_tls_flags(certs.aggregator if certs is not None else None),
        *(["--kafka-tls"] if spec.kafka_tls else []),
    ]
    if spec.influx_url:
        argv += ["--influx-url", spec.influx_url]
    if spec.aggregator_ranking is not None:
        argv += ["--ranking", spec.aggregator_ranking]
    argv += ["--mode", spec.oversubscription, *spec.aggregator_args]
    log_path = logs / "aggregator.log"
    process = _spawn(argv, log_path)
    storage = f"InfluxDB {spec.influx_url}" if spec.influx_url else "windows in memory only"
    say(
        f"starting the aggregator at {plane.aggregator} (ranking every "
        f"{spec.aggregator_period:g} s; {storage})"
    )
    record = _record_pid(
        {"name": "aggregator", "argv": argv, "address": plane.aggregator}, "pid", process
    )
    return _Started(process, record, addr_file, log_path)


def pinned_argv(argv: list[str], address: str) -> list[str]:
    """``argv`` listening on ``address``, the one it bound first (port 0 picks another port on
    every start): the command line ``cluster.json`` records, to start the daemon again with."""
    if "--listen" in argv:
        at = argv.index("--listen") + 1
        return [*argv[:at], address, *argv[at + 1 :]]
    return [*argv, "--listen", address]


def _service_record(broker: brokers.ServiceProcess) -> dict[str, object]:
    """An embedded broker as ``cluster.json`` records it (its port is in its command line)."""
    argv = broker.process.args
    assert isinstance(argv, list)
    record: dict[str, object] = {
        "name": broker.name,
        "address": broker.address,
        "argv": [str(a) for a in argv],
    }
    return _record_pid(record, "pid", broker.process)


def _wait_registered(
    rm_address: str,
    tls: ClientTls | None,
    count: int,
    processes: list[subprocess.Popen[bytes]],
    logs: Path,
    say: Say | None = None,
    clock: _Clock | None = None,
) -> None:
    """Until ``count`` nodes are ready at the RM (``say`` hears each as it registers)."""
    client = RMClient.connect(rm_address, tls)
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for process in processes:
                if process.poll() is not None:
                    raise UserError(
                        f"a cluster process exited with code {process.returncode} (see {logs})"
                    )
            with contextlib.suppress(grpc.RpcError):
                nodes = client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=2).nodes
                ready = sorted(n.node_id for n in nodes if n.state == rm_pb.NODE_READY)
                for node_id in ready:
                    if node_id not in seen and say is not None:
                        at = f" ({clock.elapsed():.1f} s)" if clock is not None else ""
                        say(f"{node_id} registered with the resource manager{at}")
                seen.update(ready)
                if len(ready) >= count:
                    return
            time.sleep(0.1)
        raise UserError(f"nodes did not register within {START_TIMEOUT:.0f} s (see {logs})")
    finally:
        client.close()


def down(directory: Path, say: Say) -> None:
    """Stop the local cluster in ``directory`` (see the module's docstring).  No cluster there
    (never started, or already down) is said and is not an error: there is nothing to stop."""
    directory = directory.resolve()
    if not cluster_file(directory).exists():
        say(f"no local cluster in {directory}: nothing to stop")
        return
    cluster = read_cluster(directory)
    nodes = cluster.get("nodes", [])
    assert isinstance(nodes, list)
    tls = cluster_client_tls(cluster)
    if status(directory)["state"] == "stopped":
        say(
            f"the local cluster in {directory} was not running (none of its processes is); "
            "cleaning up what it left"
        )
    for node in nodes:
        say(f"{node['node_id']}: {_drain(node, directory, tls, say)}")
    # Each pid is signalled only while it is still the recorded process (process_identity).
    stop([*(_node_process(n) for n in nodes), _rm_process(cluster)], say)
    # The data plane last: the agents and the RM no longer publish to it.
    services = cluster.get("services", [])
    assert isinstance(services, list)
    stop(_services(list(reversed(services))), say)
    cluster_file(directory).unlink(missing_ok=True)
    say(f"local cluster in {directory} stopped")


def _drain(node: dict[str, object], directory: Path, tls: ClientTls | None, say: Say) -> str:
    """Stop every task of the node and remove its cgroups and containers, through the agent's
    Drain.  An agent that is not answering is started again first (it adopts what its
    predecessor left: tasks, cgroups, containers) and then drained."""
    stopped = _drain_at(str(node["address"]), tls)
    if stopped is not None:
        return f"stopped {stopped} tasks"
    stop([_node_process(node)], say)  # alive but not answering: replace it
    argv = node.get("argv")
    if not isinstance(argv, list):
        return "agent not answering, and its command line is unknown: nothing cleaned up"
    log_path = directory / "logs" / f"{node['node_id']}.log"
    addr_file = directory / f"{node['node_id']}.addr"
    addr_file.unlink(missing_ok=True)
    process = _spawn([str(a) for a in argv], log_path)
    try:
        address = _wait_for_file(addr_file, process, f"agent {node['node_id']}", log_path)
    except UserError as error:
        stop(_children([process]), say)
        return f"agent not answering, and it could not be restarted to clean up: {error}"
    _record_pid(node, "pid", process)
    stopped = _drain_at(address, tls)
    stop([_node_process(node)], say)
    if stopped is None:
        return "agent restarted to clean up, but its Drain failed"
    return f"agent was not answering; restarted it and stopped {stopped} tasks"


def _drain_at(address: str, tls: ClientTls | None) -> int | None:
    """Drain the agent at ``address`` and let it exit; the number of tasks it stopped, or None
    when it does not answer."""
    channel, stub = agent_stub(address, tls)
    try:
        return int(stub.Drain(agent_pb.DrainRequest(exit_after=True), timeout=60).stopped_tasks)
    except grpc.RpcError:
        return None
    finally:
        channel.close()


def status(directory: Path) -> dict[str, object]:
    """The local cluster in ``directory``: ``cluster`` (its cluster.json, None when there is
    none), ``alive`` (whether each daemon still runs, by name) and ``state``: "up" (every
    daemon runs), "degraded" (some do), "stopped" (none does) or "none" (no cluster here)."""
    directory = directory.resolve()
    if not cluster_file(directory).exists():
        return {"cluster": None, "alive": {}, "state": "none", "directory": str(directory)}
    cluster = read_cluster(directory)
    processes = {"rm": _still_ours(_rm_process(cluster))}
    for node in cluster.get("nodes", []):  # type: ignore[attr-defined]
        processes[str(node["node_id"])] = _still_ours(_node_process(node))
    for service in cluster.get("services", []):  # type: ignore[attr-defined]
        processes[str(service["name"])] = _still_ours(_service_process(service))
    alive = sum(processes.values())
    state = "up" if alive == len(processes) else "stopped" if alive == 0 else "degraded"
    return {"cluster": cluster, "alive": processes, "state": state, "directory": str(directory)}


# ---------------------------------------------------------------------------- restart

STOP_TIMEOUT = 10.0  # seconds a daemon gets to stop on SIGTERM before it is killed
DAEMONS = "rm, aggregator, kafka, mqtt, agent NODE_ID"


@dataclass
class _Daemon:
    """One process of the local cluster, as ``cluster.json`` records it."""

    name: str  # as the user names it: "rm", "aggregator", "agent node-1"
    record: dict[str, object]  # its entry in cluster.json, updated in place
    pid_key: str  # where its pid is in ``record``
    argv: list[str]
    log_path: Path
    address_file: Path | None  # where it publishes its address once serving (None: brokers)


def restart(directory: Path, daemon: list[str], say: Say) -> dict[str, object]:
    """Stop one daemon of the local cluster in ``directory`` if it runs (SIGTERM, then SIGKILL
    after ``STOP_TIMEOUT``) and start it again with the command line ``cluster.json`` records,
    on the same ports; return once it serves (the RM: every node ready again; an agent: its
    node ready).  ``daemon`` is ``["rm"]``, ``["aggregator"]``, ``["kafka"]``, ``["mqtt"]`` or
    ``["agent", NODE_ID]``; anything else is a UserError naming the choices."""
    directory = directory.resolve()
    cluster = read_cluster(directory)
    target = _find_daemon(cluster, directory, daemon)
    recorded = _recorded_process(target.record, target.name, target.pid_key, target.argv)
    if _still_ours(recorded):
        say(f"stopping {target.name} (pid {recorded.pid})")
    # Signalled only while still the recorded process; another one with its pid is said.
    if stop([recorded], say, STOP_TIMEOUT)[target.name] is Verdict.GONE:
        say(f"{target.name} was not running")
    say(f"starting {target.name} (log: {target.log_path})")
    for stale in _published_files(target.address_file):
        stale.unlink(missing_ok=True)
    process = _spawn(target.argv, target.log_path)
    _record_pid(target.record, target.pid_key, process)
    _write_cluster(directory, cluster)  # the new pid, whatever happens next
    try:
        moved = _wait_serving(cluster, target, process)
    except BaseException:
        stop(_children([process]), say)
        raise
    for note in moved:
        say(note)
    if moved:
        _write_cluster(directory, cluster)
    say(f"{target.name} restarted (pid {process.pid}) and ready")
    return cluster


def _find_daemon(cluster: dict[str, object], directory: Path, words: list[str]) -> _Daemon:
    logs = directory / "logs"
    nodes = cluster.get("nodes", [])
    services = cluster.get("services", [])
    assert isinstance(nodes, list) and isinstance(services, list)
    node_ids = [str(n["node_id"]) for n in nodes]
    if words == ["rm"]:
        return _Daemon(
            "rm",
            cluster,
            "rm_pid",
            _recorded_argv(cluster.get("rm_argv"), "rm"),
            logs / "rm.log",
            directory / "rm.addr",
        )
    if len(words) == 1 and words[0] in ("aggregator", "kafka", "mqtt"):
        name = words[0]
        service = next((s for s in services if s.get("name") == name), None)
        if service is None:
            plane = cluster.get("data_plane", {})
            given = plane.get(name, "?") if isinstance(plane, dict) else "?"
            raise UserError(
                f"{name}: not started by `sluice local up` (this cluster uses {given}): restart "
                "it where it runs"
            )
        return _Daemon(
            name,
            service,
            "pid",
            _recorded_argv(service.get("argv"), name),
            logs / f"{name}.log",
            directory / "aggregator.addr" if name == "aggregator" else None,
        )
    node_id = words[1] if len(words) == 2 and words[0] == "agent" else None
    if node_id in node_ids:
        node = nodes[node_ids.index(node_id)]
        return _Daemon(
            f"agent {node_id}",
            node,
            "pid",
            _recorded_argv(node.get("argv"), f"agent {node_id}"),
            logs / f"{node_id}.log",
            directory / f"{node_id}.addr",
        )
    if node_id is not None:
        raise UserError(f"agent {node_id!r}: no such node (nodes: {', '.join(node_ids)})")
    raise UserError(
        f"unknown daemon {' '.join(words)!r}: expected one of {DAEMONS} "
        f"(nodes: {', '.join(node_ids)})"
    )


def _recorded_argv(argv: object, name: str) -> list[str]:
    if not isinstance(argv, list) or not argv:
        raise UserError(
            f"{name}: its command line is not recorded (a cluster started by an older sluice): "
            "`sluice local down` and `up` again"
        )
    return [str(a) for a in argv]


def _published_files(address_file: Path | None) -> list[Path]:
    """What a daemon publishes once serving: its address file (and the RM's tokens file)."""
    if address_file is None:
        return []
    return [address_file, address_file.with_name(address_file.name + ".tokens")]


def _wait_serving(
    cluster: dict[str, object], target: _Daemon, process: subprocess.Popen[bytes]
) -> list[str]:
    """Wait until ``target`` serves where ``cluster.json`` says it does; UserError if it exits,
    does not start in time, or comes up where the others do not look for it (the RM's main
    port, the aggregator's).  What moved where nobody is told (an agent registers its address;
    the bearer-token port: a cluster started before ports were kept) is updated in ``cluster``
    and returned, one line each."""
    tls = cluster_client_tls(cluster)
    if target.address_file is None:  # a broker: its port is in its command line
        _wait_port(str(target.record["address"]), process, target.name, target.log_path)
        return []
    address = _wait_for_file(target.address_file, process, target.name, target.log_path)
    key = "rm" if target.name == "rm" else "address"
    moved = []
    if address != target.record.get(key):
        if not target.name.startswith("agent "):
            raise UserError(
                f"{target.name} came up at {address}, not at {target.record.get(key)} where the "
                f"cluster looks for it (see {target.log_path})"
            )
        moved.append(f"{target.name} moved from {target.record.get(key)} to {address}")
        target.record[key] = address
        target.record["argv"] = pinned_argv(target.argv, address)  # and stays there from now on
    if target.name == "rm":
        tokens = target.address_file.with_name(target.address_file.name + ".tokens")
        recorded_tokens = str(cluster.get("rm_tokens", ""))
        now = tokens.read_text().strip() if tokens.exists() else ""
        if now != recorded_tokens:
            moved.append(
                f"rm: the bearer-token port moved from {recorded_tokens or 'none'} to "
                f"{now or 'none'}; hand out the new one"
            )
            cluster["rm_tokens"] = now
        nodes = cluster.get("nodes", [])
        assert isinstance(nodes, list)
        _wait_registered(address, tls, len(nodes), [process], target.log_path.parent)
    elif target.name.startswith("agent "):
        _wait_node_ready(
            str(cluster["rm"]), tls, str(target.record["node_id"]), address, process, target
        )
    return moved


def _wait_port(address: str, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + START_TIMEOUT
    while not brokers.port_open(host, int(port)):
        if process.poll() is not None:
            raise UserError(f"{what} exited with code {process.returncode}: {_last_line(log)}")
        if time.monotonic() > deadline:
            raise UserError(f"{what} did not answer on {address} within {START_TIMEOUT:.0f} s")
        time.sleep(0.05)


def _wait_node_ready(
    rm_address: str,
    tls: ClientTls | None,
    node_id: str,
    address: str,
    process: subprocess.Popen[bytes],
    target: _Daemon,
) -> None:
    """Until the RM has the node ready at ``address`` (the restarted agent registered)."""
    client = RMClient.connect(rm_address, tls)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise UserError(
                    f"{target.name} exited with code {process.returncode}: "
                    f"{_last_line(target.log_path)}"
                )
            with contextlib.suppress(grpc.RpcError):
                nodes = client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=2).nodes
                if any(
                    n.node_id == node_id and n.address == address and n.state == rm_pb.NODE_READY
                    for n in nodes
                ):
                    return
            time.sleep(0.1)
        raise UserError(
            f"{target.name} did not register with the RM within {START_TIMEOUT:.0f} s "
            f"(see {target.log_path})"
        )
    finally:
        client.close()


def _write_cluster(directory: Path, cluster: dict[str, object]) -> None:
    tmp = cluster_file(directory).with_suffix(".tmp")
    tmp.write_text(json.dumps(cluster, indent=2))
    tmp.replace(cluster_file(directory))
