"""A real cluster for integration tests: an RM and agents as separate processes.

Built on ``sluice.local_cluster`` (the same code as ``sluice local up``), plus what the tests need
to break things: SIGKILL a process and start it again with the same arguments.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from sluice import local_cluster
from sluice.client import RMClient, agent_stub, cluster_client_tls
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import node_agent_pb2_grpc as agent_grpc
from sluice_pb import resource_manager_pb2 as rm_pb

FINAL = {pb.JOB_SUCCEEDED, pb.JOB_FAILED, pb.JOB_KILLED}


def unavailable(reason: str) -> None:
    """Skip, or fail under CI, when the machine lacks what the test needs."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def wait_until(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(0.1)


def job_spec(name: str, phases: list[dict[str, Any]], priority: int = 5, retries: int = 0) -> str:
    import yaml

    return yaml.safe_dump(
        {"name": name, "priority": priority, "max_retries": retries, "phases": phases}
    )


def phase(
    name: str,
    tasks: int,
    script: str,
    after: list[str] | None = None,
    cpu: float = 0.5,
    mem: int = 64,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": name,
        "tasks": tasks,
        "command": ["sh", "-c", script],
        "resources": {"cpu": cpu, "memory_mb": mem},
    }
    if after:
        doc["after"] = after
    return doc


class Gate:
    """Holds a task until the test opens it, so that what a test looks at while the task runs
    does not race the task's end, however long the cluster took to get there.

    ``hold(script)`` is a task script that first waits for a file: on the host for the process
    runtime, inside the task's container for the docker runtime (Debian's busybox has ``[`` and
    a fractional ``sleep``).  ``open`` creates it there.  ``close`` (after the test) kills the
    jobs given to ``kill_on_close`` that a failed test left held, and removes the file."""

    def __init__(self) -> None:
        self.path = f"/tmp/sluice-test-gate-{uuid.uuid4().hex[:12]}"
        self._jobs: list[tuple[Cluster, str]] = []

    def hold(self, script: str) -> str:
        return f"while [ ! -e {self.path} ]; do sleep 0.1; done; {script}"

    def kill_on_close(self, cluster: Cluster, job_id: str) -> str:
        self._jobs.append((cluster, job_id))
        return job_id

    def open(self, cluster: Cluster, job_id: str, task_ids: list[str]) -> None:
        """Let the job's ``task_ids`` go on (each must be running, in its container for docker).
        The file stays until ``close``: a task may look for it only a little later."""
        if cluster.runtime != "docker":
            Path(self.path).touch()
            return
        import docker

        client = docker.from_env()
        try:
            for task_id in task_ids:
                labels = {
                    "sluice.cluster": cluster.info["cluster_id"],
                    "sluice.job": job_id,
                    "sluice.task": task_id,
                }
                (container,) = client.containers.list(
                    filters={"label": [f"{k}={v}" for k, v in labels.items()]}
                )
                _exec_in(client, container.id, ["touch", self.path])
        finally:
            client.close()

    def close(self) -> None:
        for cluster, job_id in self._jobs:
            with contextlib.suppress(grpc.RpcError):
                detail = cluster.job(job_id)
                if detail.summary.state not in FINAL:
                    cluster.client.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10)
        Path(self.path).unlink(missing_ok=True)


def _exec_in(client: Any, container_id: str, command: list[str]) -> None:
    """Run ``command`` in the container and require that it exited 0.

    Not ``Container.exec_run``: it reads the exec's exit code right after the output stream
    closes, and the engine may not have recorded the exit yet, so it answers ``None`` now and
    then on a busy host (docker-py #1381 and #2450; it failed a CI run here).  The exec is
    inspected until the engine says it is no longer running."""
    api = client.api
    exec_id = api.exec_create(container_id, command)["Id"]
    output = api.exec_start(exec_id)
    wait_until(lambda: not api.exec_inspect(exec_id)["Running"], 30, f"{command} ended")
    exit_code = api.exec_inspect(exec_id)["ExitCode"]
    assert exit_code == 0, (
        f"{command} in container {container_id[:12]}: exit {exit_code}, {output!r}"
    )


@dataclass
class Cluster:
    directory: Path
    runtime: str
    info: dict[str, Any]
    client: RMClient

    # ------------------------------------------------------------------ jobs

    def submit(self, spec_yaml: str) -> str:
        return str(
            self.client.jobs.SubmitJob(
                rm_pb.SubmitJobRequest(spec_yaml=spec_yaml), timeout=30
            ).job.job_id
        )

    def job(self, job_id: str) -> rm_pb.JobDetail:
        return self.client.jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10)

    def wait_final(self, job_id: str, timeout: float = 60.0) -> rm_pb.JobDetail:
        def final() -> rm_pb.JobDetail | None:
            with contextlib.suppress(grpc.RpcError):
                detail = self.job(job_id)
                if detail.summary.state in FINAL:
                    return detail
            return None

        return wait_until(final, timeout, f"job {job_id} final")

    def wait_task_running(self, job_id: str, task_id: str, timeout: float = 30.0) -> rm_pb.TaskInfo:
        def running() -> rm_pb.TaskInfo | None:
            for task in self.job(job_id).tasks:
                if task.task_id == task_id and task.state == pb.TASK_RUNNING:
                    return task
            return None

        return wait_until(running, timeout, f"{task_id} running")

    # ------------------------------------------------------------------ agents

    def agent(self, address: str) -> agent_grpc.AgentServiceStub:
        channel, stub = agent_stub(address, self.client.tls)
        self._channels.append(channel)
        return stub

    def agent_tasks(self, address: str) -> list[agent_pb.TaskStatus]:
        return list(self.agent(address).ListTasks(agent_pb.ListTasksRequest(), timeout=10).tasks)

    def node(self, node_id: str) -> dict[str, Any]:
        return next(n for n in self.info["nodes"] if n["node_id"] == node_id)

    # ------------------------------------------------------------------ failures

    def kill_process(self, pid: int) -> None:
        """SIGKILL ``pid`` and wait until it is gone (it may be gone already: killed before and
        reaped)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not _alive(pid), 10, f"pid {pid} gone")

    def restart_agent(self, node_id: str) -> None:
        """SIGKILL the agent and start it again with its command line, on the same address."""
        self.kill_process(int(self.node(node_id)["pid"]))
        self.start_agent(node_id)

    def start_agent(self, node_id: str) -> None:
        """Start the (stopped) agent again with its command line, on the same address."""
        node = self.node(node_id)
        argv = local_cluster.pinned_argv(node["argv"], node["address"])
        start_recorded(node, "pid", argv, self.directory / "logs" / f"{node_id}.log")
        self.save_info()

    def restart_rm(self, extra: list[str] | None = None) -> None:
        """SIGKILL the RM and start it again with the very command line `local up` used (its
        port 0 included: the RM keeps the port it first bound)."""
        self.kill_process(int(self.info["rm_pid"]))
        self.start_rm(extra)

    def start_rm(self, extra: list[str] | None = None) -> None:
        """Start the (stopped) RM again with its recorded command line (and ``extra``)."""
        argv = [*self.info["rm_argv"], *(extra or [])]
        start_recorded(self.info, "rm_pid", argv, self.directory / "logs" / "rm.log")
        self.save_info()

    def service(self, name: str) -> dict[str, Any]:
        return next(s for s in self.info["services"] if s["name"] == name)

    def restart_aggregator(self, extra: list[str] | None = None) -> None:
        """SIGKILL the aggregator and start it again with the same flags (and ``extra``)."""
        aggregator = self.service("aggregator")
        self.kill_process(int(aggregator["pid"]))
        argv = [*aggregator["argv"], *(extra or [])]
        # Listen where it listened, so the RM's --aggregator stays right.
        argv[argv.index("--listen") + 1] = aggregator["address"]
        start_recorded(aggregator, "pid", argv, self.directory / "logs" / "aggregator.log")
        self.save_info()

    def save_info(self) -> None:
        """Write ``info`` back to cluster.json: a test that starts a daemon itself records its
        pid there, so that `local down` (every test's teardown) stops it."""
        import json

        (self.directory / "cluster.json").write_text(json.dumps(self.info))

    def __post_init__(self) -> None:
        self._channels: list[grpc.Channel] = []

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        self.client.close()


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def start_recorded(record: dict[str, Any], pid_key: str, argv: list[str], log: Path) -> None:
    """Start a daemon and record it in ``record`` (a part of cluster.json's info) as `local up`
    does: its pid and, beside it, its identity, which `local down` checks before it signals.  A
    pid written alone (the old identity left beside it) could only be told by its command
    line, and `local down` said so for every daemon a test had restarted."""
    local_cluster._record_pid(record, pid_key, _spawn(argv, log))


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def start_cluster(directory: Path, runtime: str, nodes: int = 2, **spec: Any) -> Cluster:
    """A local cluster; ``spec`` overrides ``LocalClusterSpec`` fields (brokers, periods...)."""
    info = local_cluster.up(
        local_cluster.LocalClusterSpec(
            directory=directory,
            nodes=nodes,
            runtime=runtime,
            cpus_per_node=2.0,
            memory_mb_per_node=2048,
            **spec,
        ),
        lambda _: None,
    )
    tls = cluster_client_tls(info)
    return Cluster(directory, runtime, dict(info), RMClient.connect(str(info["rm"]), tls))


def running_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    runtime: str = "process",
    nodes: int = 1,
    **spec: Any,
) -> Iterator[Cluster]:
    """A cluster for a module's tests, stopped after them: ``yield from`` it in a fixture."""
    directory = tmp_path_factory.mktemp(name)
    cluster = start_cluster(directory, runtime, nodes, **spec)
    try:
        yield cluster
    finally:
        cluster.close()
        local_cluster.down(directory, lambda _: None)
