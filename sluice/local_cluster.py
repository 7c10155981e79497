"""``sluice local up|down|status``: a whole cluster on this machine, as background processes.

``up`` starts the data plane — a Kafka-protocol broker and an MQTT broker (embedded: Tansu and
amqtt, unless ``--kafka`` / ``--mqtt`` name existing ones) and the cluster aggregator (with
InfluxDB when ``--influx-url`` is given) — then one resource manager and N node agents.  Each is
its own process, in its own session, logging to ``DIR/logs``.  It waits until every node has
registered and writes ``DIR/cluster.json``.  ``down`` drains every agent (stopping its tasks and
removing their cgroups and containers), stops every process it started, and checks that nothing
is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from node_agent.runtime import make_runtime
from plumbing.errors import UserError
from sluice import brokers
from sluice.client import RMClient, agent_stub, cluster_file, read_cluster
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import resource_manager_pb2 as rm_pb

START_TIMEOUT = 30.0
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
    mqtt: str | None = None  # None: start an embedded broker
    influx_url: str | None = None  # None: windows in memory only
    aggregator_period: float = 10.0
    metrics_interval: float = 1.0
    metrics_buffer: int | None = None  # None: the agent's default


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still "exists"; reap it if so.
    with contextlib.suppress(ChildProcessError):
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished == pid:
            return False
    return True


def up(spec: LocalClusterSpec, say: Say) -> dict[str, object]:
    directory = spec.directory.resolve()
    if cluster_file(directory).exists():
        existing = read_cluster(directory)
        if _alive(int(existing.get("rm_pid", 0))):  # type: ignore[call-overload]
            raise UserError(
                f"a local cluster already runs in {directory} (`sluice local down` first)"
            )
        cluster_file(directory).unlink()
    directory.mkdir(parents=True, exist_ok=True)
    logs = directory / "logs"
    python = sys.executable
    services: list[dict[str, object]] = []
    try:
        plane = _start_data_plane(spec, directory, logs, services, say)
    except BaseException:
        _terminate([int(str(s["pid"])) for s in services])
        raise
    rm_addr_file = directory / "rm.addr"
    rm_addr_file.unlink(missing_ok=True)
    rm = _spawn(
        [
            python,
            "-m",
            "sluice",
            "rm",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            str(directory / "rm"),
            "--address-file",
            str(rm_addr_file),
            "--node-timeout",
            str(max(5.0, spec.heartbeat_interval * 10)),
            "--kafka",
            plane["kafka"],
            "--mqtt",
            plane["mqtt"],
            "--aggregator",
            plane["aggregator"],
        ],
        logs / "rm.log",
    )
    started: list[subprocess.Popen[bytes]] = [rm]
    try:
        rm_address = _wait_for_file(rm_addr_file, rm, "the resource manager", logs / "rm.log")
        say(f"resource manager at {rm_address}")
        nodes = []
        for index in range(1, spec.nodes + 1):
            node_id = f"node-{index}"
            addr_file = directory / f"{node_id}.addr"
            addr_file.unlink(missing_ok=True)
            argv = [
                python,
                "-m",
                "sluice",
                "agent",
                "--rm",
                rm_address,
                "--node-id",
                node_id,
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
            ]
            if spec.metrics_buffer is not None:
                argv += ["--metrics-buffer", str(spec.metrics_buffer)]
            if spec.cpus_per_node is not None:
                argv += ["--cpus", str(spec.cpus_per_node)]
            if spec.memory_mb_per_node is not None:
                argv += ["--memory-mb", str(spec.memory_mb_per_node)]
            agent = _spawn(argv, logs / f"{node_id}.log")
            started.append(agent)
            nodes.append({"node_id": node_id, "pid": agent.pid, "addr_file": str(addr_file)})
        for node, agent in zip(nodes, started[1:], strict=True):
            node["address"] = _wait_for_file(
                Path(str(node["addr_file"])),
                agent,
                f"agent {node['node_id']}",
                logs / f"{node['node_id']}.log",
            )
        _wait_registered(rm_address, spec.nodes, started, logs)
    except BaseException:
        _terminate([p.pid for p in started] + [int(str(s["pid"])) for s in services])
        raise
    cluster: dict[str, object] = {
        "rm": rm_address,
        "rm_pid": rm.pid,
        "runtime": spec.runtime,
        "directory": str(directory),
        "nodes": [{k: v for k, v in n.items() if k != "addr_file"} for n in nodes],
        "services": services,
        "data_plane": plane,
        "started": time.time(),
    }
    tmp = cluster_file(directory).with_suffix(".tmp")
    tmp.write_text(json.dumps(cluster, indent=2))
    tmp.replace(cluster_file(directory))
    say(f"{spec.nodes} nodes registered ({spec.runtime} runtime); see {cluster_file(directory)}")
    return cluster


def _start_data_plane(
    spec: LocalClusterSpec,
    directory: Path,
    logs: Path,
    services: list[dict[str, object]],
    say: Say,
) -> dict[str, str]:
    """Brokers (unless given) and the aggregator; ``services`` collects what was started."""
    kafka = spec.kafka
    if kafka is None:
        broker = brokers.start_kafka(brokers.free_port(), logs / "kafka.log")
        services.append({"name": "kafka", "pid": broker.process.pid, "address": broker.address})
        kafka = broker.address
        say(f"embedded Kafka-protocol broker (Tansu) at {kafka}")
    mqtt = spec.mqtt
    if mqtt is None:
        broker = brokers.start_embedded_mqtt(brokers.free_port(), logs / "mqtt.log")
        services.append({"name": "mqtt", "pid": broker.process.pid, "address": broker.address})
        mqtt = f"mqtt://{broker.address}"
        say(f"embedded MQTT broker (amqtt) at {mqtt}")
    addr_file = directory / "aggregator.addr"
    addr_file.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "sluice",
        "aggregator",
        "--listen",
        "127.0.0.1:0",
        "--address-file",
        str(addr_file),
        "--kafka",
        kafka,
        "--mqtt",
        mqtt,
        "--period",
        str(spec.aggregator_period),
        # Three missed samples make a machine disconnected (at least a second, so a busy
        # machine's late sample does not flap it).
        "--stale-after",
        str(max(1.0, spec.metrics_interval * 3)),
    ]
    if spec.influx_url:
        argv += ["--influx-url", spec.influx_url]
    log_path = logs / "aggregator.log"
    process = _spawn(argv, log_path)
    services.append({"name": "aggregator", "pid": process.pid, "argv": argv})
    address = _wait_for_file(addr_file, process, "the aggregator", log_path)
    services[-1]["address"] = address
    storage = f"InfluxDB {spec.influx_url}" if spec.influx_url else "windows in memory only"
    say(f"aggregator at {address} (ranking every {spec.aggregator_period:g} s; {storage})")
    return {"kafka": kafka, "mqtt": mqtt, "aggregator": address}


def _terminate(pids: list[int], timeout: float = 10.0) -> None:
    """SIGTERM ``pids``, then SIGKILL those still alive after ``timeout`` seconds."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _wait_registered(
    rm_address: str, count: int, processes: list[subprocess.Popen[bytes]], logs: Path
) -> None:
    client = RMClient.connect(rm_address)
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
                if sum(1 for n in nodes if n.state == rm_pb.NODE_READY) >= count:
                    return
            time.sleep(0.1)
        raise UserError(f"nodes did not register within {START_TIMEOUT:.0f} s (see {logs})")
    finally:
        client.close()


def down(directory: Path, say: Say) -> None:
    directory = directory.resolve()
    cluster = read_cluster(directory)
    nodes = cluster.get("nodes", [])
    assert isinstance(nodes, list)
    for node in nodes:
        channel, stub = agent_stub(str(node["address"]))
        try:
            drained = stub.Drain(agent_pb.DrainRequest(exit_after=True), timeout=60)
            say(f"{node['node_id']}: stopped {drained.stopped_tasks} tasks")
        except grpc.RpcError:
            say(f"{node['node_id']}: agent not answering; cleaning up after it")
        finally:
            channel.close()
    pids = [int(n["pid"]) for n in nodes] + [int(cluster["rm_pid"])]  # type: ignore[call-overload]
    _terminate(pids)
    # The data plane last: the agents and the RM no longer publish to it.
    services = cluster.get("services", [])
    assert isinstance(services, list)
    _terminate([int(s["pid"]) for s in reversed(services)])
    # Whatever a crashed agent could not clean up (tasks, cgroups, containers) goes now.
    runtime = str(cluster.get("runtime", "process"))
    for node in nodes:
        node_id = str(node["node_id"])
        state_dir = directory / node_id
        runtimes = [(runtime, node_id, state_dir / "tasks")]
        if runtime != "process":
            runtimes.append(("process", f"{node_id}-masters", state_dir / "masters"))
        for kind, rid, path in runtimes:
            if path.exists():
                make_runtime(kind, rid, path).purge()
    cluster_file(directory).unlink(missing_ok=True)
    say(f"local cluster in {directory} stopped")


def status(directory: Path) -> dict[str, object]:
    cluster = read_cluster(directory.resolve())
    processes = {"rm": _alive(int(cluster["rm_pid"]))}  # type: ignore[call-overload]
    for node in cluster.get("nodes", []):  # type: ignore[attr-defined]
        processes[str(node["node_id"])] = _alive(int(node["pid"]))
    for service in cluster.get("services", []):  # type: ignore[attr-defined]
        processes[str(service["name"])] = _alive(int(service["pid"]))
    return {"cluster": cluster, "alive": processes}
