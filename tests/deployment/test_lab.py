"""Lab mode, end to end (issue 30): the control plane on this host with SLUICE_HOST its own
routable address, one worker here, and one "on another machine": its bundle (add-worker.sh
--remote) started as a Compose project of its own, on a network of its own, so that it reaches
the control plane only through SLUICE_HOST's published ports, as a machine elsewhere would.

Run by scripts/test_deployment.sh beside test_deployment.py.  The tests share one deployment
and run in file order."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from node_agent.agent import task_key
from node_agent.runtime.task_state import encode_name
from sluice.brokers import free_port
from tests.deployment.deployment import (
    LabDeployment,
    RemoteWorker,
    brought_up,
    host_address,
    wait_until,
)

pytestmark = pytest.mark.deployment

LOCAL, REMOTE = "here-1", "far-1"
FINAL = {"succeeded", "failed", "killed"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabDeployment]:
    deployment = LabDeployment.prepare_lab(tmp_path_factory.mktemp("lab"), host_address())
    bundle = deployment.directory / "remote" / REMOTE
    with brought_up(deployment, "--workers", "0"):
        try:
            # The process runtime here (tasks in cgroups inside the agent's container), the
            # docker runtime on the remote worker: both runtimes run in the deployment.
            deployment.script(
                "add-worker.sh", LOCAL, "--cpus", "1", "--runtime", "process", timeout=300
            )
            yield deployment
        finally:
            if (bundle / ".env").exists():
                RemoteWorker(bundle).compose("down", "--volumes", check=False)


@pytest.fixture(scope="module")
def remote(lab: LabDeployment) -> RemoteWorker:
    """add-worker.sh NAME --remote SLUICE_HOST, and its bundle started while it waits."""
    started = time.monotonic()
    port = str(free_port())
    adding = lab.start_script(
        "add-worker.sh", REMOTE, "--remote", lab.host, "--port", port, "--cpus", "1"
    )
    bundle = lab.directory / "remote" / REMOTE
    try:
        wait_until(lambda: (bundle / ".env").exists() or adding.poll() is not None, 120, "bundle")
        assert adding.poll() is None, adding.communicate()[0]
        worker = RemoteWorker(bundle)
        worker.compose("up", "-d")
        output, _ = adding.communicate(timeout=300)
    finally:
        if adding.poll() is None:
            adding.kill()
    assert adding.returncode == 0, output
    assert f"ready at {lab.host}:{port}" in output, output
    lab.timings[f"add-worker.sh {REMOTE} --remote (bundle up, until ready)"] = (
        time.monotonic() - started
    )
    return worker


def agent_port(lab: LabDeployment, name: str) -> str:
    """The host port worker ``name``'s file publishes its agent on."""
    for entry in yaml.safe_load((lab.directory / "workers" / f"{name}.yml").read_text())[
        "services"
    ][f"agent-{name}"]["ports"]:
        return str(entry).split(":")[-2]
    raise AssertionError(f"{name}: publishes no port")


def test_both_workers_are_ready_at_sluice_host_addresses(
    lab: LabDeployment, remote: RemoteWorker
) -> None:
    both = {LOCAL, REMOTE}
    assert wait_until(lambda: lab.ready_nodes() == both, 60, "both workers ready")
    addresses = {n["node_id"]: n["address"] for n in lab.nodes()}
    remote_port = (remote.directory / ".env").read_text().split("SLUICE_WORKER_PORT=")[1].split()[0]
    assert addresses == {
        LOCAL: f"{lab.host}:{agent_port(lab, LOCAL)}",
        REMOTE: f"{lab.host}:{remote_port}",
    }
    # The remote worker is on no network of the control plane's: a machine elsewhere.
    agent = remote.compose("ps", "-q", "agent").strip()
    networks = lab.docker(
        "inspect", "--format", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", agent
    ).split()
    assert networks == [f"{remote.project}_default"]


def test_a_job_runs_across_both_workers(lab: LabDeployment, remote: RemoteWorker) -> None:
    """Two tasks of 0.75 CPU on workers of 1 CPU: one on each worker, so the job master, on
    one of them, starts a task on the other at its SLUICE_HOST address; the local worker's runs
    in a cgroup under its agent's container (the process runtime)."""
    document = {
        "name": "across",
        "phases": [
            {
                "name": "work",
                "tasks": 2,
                "command": ["sh", "-c", "sleep 10"],
                "resources": {"cpu": 0.75, "memory_mb": 32},
            }
        ],
    }
    job_id = lab.submit(yaml.safe_dump(document))

    def local_task() -> dict[str, Any] | None:
        tasks = lab.job(job_id)["tasks"]
        return next((t for t in tasks if t["node_id"] == LOCAL and t["state"] == "running"), None)

    task = wait_until(local_task, 120, f"the task on {LOCAL} running")
    # The process runtime's task runs in a cgroup of its own under the agent container's: its
    # limits are within the container's, and removing the container removes it.
    agent = lab.docker("inspect", "--format", "{{.Id}}", lab.container(f"agent-{LOCAL}")).strip()
    key = encode_name(task_key(job_id, task["task_id"], task["attempt"]))
    found = list(Path("/sys/fs/cgroup/cpu/docker", agent).glob(f"**/{key}"))
    found += list(Path("/sys/fs/cgroup/docker", agent).glob(f"**/{key}"))  # cgroup v2
    assert found, f"{key}: no cgroup under the agent container's ({agent[:12]})"

    def final() -> str | None:
        state: str = lab.job(job_id)["summary"]["state"]
        return state if state in FINAL else None

    assert wait_until(final, 240, "the job across both workers") == "succeeded"
    detail = lab.job(job_id)
    tasks = detail["tasks"]
    assert {t["node_id"] for t in tasks} == {LOCAL, REMOTE}
    assert all(t["state"] == "succeeded" and t["attempt"] == 1 for t in tasks), tasks
    assert detail["summary"]["master_node"] in {LOCAL, REMOTE}


def test_the_remote_workers_metrics_reach_the_aggregator(
    lab: LabDeployment, remote: RemoteWorker
) -> None:
    """Its agent publishes to Kafka at SLUICE_HOST; `sluice nodes` shows its load."""

    def remote_load() -> list[float] | None:
        for node in lab.nodes():
            metrics = node.get("metrics") or {}
            if node["node_id"] == REMOTE and metrics.get("window_samples", 0) > 0:
                load: list[float] = metrics["approximated_load"]
                return load or None
        return None

    assert wait_until(remote_load, 90, f"{REMOTE}'s load in `sluice nodes`")
    table = lab.cli("nodes", "--wide")
    assert REMOTE in table


def test_teardown_leaves_nothing_behind(lab: LabDeployment, remote: RemoteWorker) -> None:
    agents = [remote.compose("ps", "-q", "agent").strip(), lab.container(f"agent-{LOCAL}")]
    remote.compose("down", "--volumes")
    output = lab.script("down.sh", "--volumes")
    assert "nothing of it is left" in output, output
    for project in (lab.project, remote.project):
        for kind in ("ps -aq", "volume ls -q"):
            found = lab.docker(
                *kind.split(), "--filter", f"label=com.docker.compose.project={project}"
            ).split()
            assert not found, (project, kind, found)
        networks = lab.docker("network", "ls", "--format", "{{.Name}}").split()
        assert f"{project}_default" not in networks
    assert not lab.docker("ps", "-aq", "--filter", f"label=sluice.cluster={lab.project}").split()
    leftovers = [path for a in agents for path in Path("/sys/fs/cgroup").glob(f"*/docker/{a}")]
    assert not leftovers, leftovers
    lab.docker("image", "rm", lab.settings["SLUICE_IMAGE"])
