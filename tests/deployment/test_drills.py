"""The operator drills of deploy/ (deploy/DRILLS.md), each run from the outside as an operator
would, against a deployment of two workers: remove a worker and add it back, back up and
restore the RM's state, rotate the certificates, and a rolling upgrade while tasks run.

Run by scripts/test_deployment.sh with the lead's module.  The tests share one deployment and
run in file order, each leaving it as it found it: both workers ready, no job running."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deployment.deployment import (
    Deployment,
    brought_up,
    certificate_serial,
    final_job_state,
    job_spec,
    kill_job,
    presented_serial,
    running_tasks,
    task_containers,
    wait_until,
)

pytestmark = pytest.mark.deployment

WORKERS = ("worker-1", "worker-2")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    deployment = Deployment.prepare(tmp_path_factory.mktemp("drills"))
    with brought_up(deployment, "--workers", str(len(WORKERS))):
        yield deployment


def all_ready(deployment: Deployment) -> bool:
    return deployment.ready_nodes() == set(WORKERS)


def succeeds(deployment: Deployment, name: str) -> str:
    """A short job submitted and run to success; its id."""
    job_id = deployment.submit(job_spec(name, 1, "true", 0.1))
    assert wait_until(lambda: final_job_state(deployment, job_id), 120, name) == "succeeded"
    return job_id


def progress(output: str) -> str:
    """A drill's output, its progress lines (with their timings) printed for the log."""
    for line in output.splitlines():
        if line.startswith("== "):
            print(line)
    return output


def compose_labelled(deployment: Deployment, kind: str, label: str) -> list[str]:
    """Containers or volumes of this deployment's project with the compose ``label``."""
    listing = ("ps", "-aq") if kind == "container" else ("volume", "ls", "-q")
    return deployment.docker(
        *listing,
        "--filter", f"label=com.docker.compose.project={deployment.project}",
        "--filter", f"label={label}",
    ).split()  # fmt: skip


# ---------------------------------------------------------------------------- a worker out, back


def test_a_removed_worker_is_drained_its_task_runs_elsewhere_and_nothing_of_it_is_left(
    deployment: Deployment,
) -> None:
    wait_until(lambda: all_ready(deployment), 60, "both workers ready")
    job_id = deployment.submit(job_spec("through-remove", 2, "sleep 600", 0.5))
    tasks = wait_until(lambda: running_tasks(deployment, job_id, 2), 120, "two tasks running")
    master = deployment.job(job_id)["summary"]["master_node"]
    # Placement spreads: the worker without the job master runs a task.
    victim = next(t for t in tasks if t["node_id"] != master)
    node = victim["node_id"]

    output = progress(deployment.script("remove-worker.sh", node, timeout=300))
    assert f"{node} removed" in output, output
    assert node not in deployment.ready_nodes()

    def rerun_elsewhere() -> dict[str, Any] | None:
        return next(
            (
                t
                for t in deployment.job(job_id)["tasks"]
                if t["task_id"] == victim["task_id"]
                and t["attempt"] > victim["attempt"]
                and t["state"] == "running"
                and t["node_id"] != node
            ),
            None,
        )

    wait_until(rerun_elsewhere, 120, f"{victim['task_id']} running again on the other worker")
    assert not compose_labelled(deployment, "container", f"com.docker.compose.service=agent-{node}")
    assert not compose_labelled(deployment, "volume", f"com.docker.compose.volume=agent-{node}")
    assert not task_containers(deployment, f"sluice.node={node}")
    assert not (deployment.directory / "workers" / f"{node}.yml").exists()
    assert not (deployment.directory / "tls" / "agents" / node).exists()

    # An unknown worker is refused, naming the problem.
    refused = deployment.script("remove-worker.sh", "worker-9", check=False)
    assert "worker-9: no such worker" in refused, refused

    # Back, by the ordinary command, with a new certificate.
    deployment.script("add-worker.sh", node, timeout=300)
    wait_until(lambda: all_ready(deployment), 120, f"{node} back")
    kill_job(deployment, job_id)


# ---------------------------------------------------------------------------- the RM's state


def test_a_restore_brings_back_the_backed_up_state_and_loses_what_came_after(
    deployment: Deployment, tmp_path: Path
) -> None:
    before = succeeds(deployment, "before-backup")
    backup = tmp_path / "rm.db"
    output = progress(deployment.script("backup.sh", str(backup)))
    assert backup.stat().st_size > 0 and "jobs" in output, output
    after = succeeds(deployment, "after-backup")

    # A file that is not the RM's state is refused, and the RM is left alone.
    wrong = tmp_path / "wrong.db"
    wrong.write_text("not a database\n")
    refused = deployment.script("restore.sh", str(wrong), check=False)
    assert "refused" in refused, refused

    progress(deployment.script("restore.sh", str(backup), timeout=300))
    assert final_job_state(deployment, before) == "succeeded"
    gone = deployment.cli("job", after, check=False)
    assert not gone, f"{after}, submitted after the backup, is still there: {gone}"
    wait_until(lambda: all_ready(deployment), 120, "the workers registered again")
    # Ids given out after the backup are not given out again (an agent still knows them).
    assert succeeds(deployment, "after-restore") != after


# ---------------------------------------------------------------------------- certificates


SERVERS = ("rm", "aggregator", "kafka", "mosquitto", "influxdb", "admin")
ROTATED = (*SERVERS, *(f"agents/{w}" for w in WORKERS))


def test_rotating_the_certificates_changes_every_servers_and_keeps_the_jobs(
    deployment: Deployment,
) -> None:
    tls = deployment.directory / "tls"
    serials = {d: certificate_serial(tls / d) for d in ROTATED}
    person = certificate_serial(deployment.person_tls)
    rm_port = int(deployment.settings["SLUICE_RM_PORT"])
    assert presented_serial(rm_port, deployment.person_tls) == serials["rm"]
    job_id = deployment.submit(job_spec("through-rotation", 2, "sleep 600", 0.5))
    before = wait_until(lambda: running_tasks(deployment, job_id, 2), 120, "two tasks running")

    progress(deployment.script("rotate-certs.sh", timeout=600))
    renewed = {d: certificate_serial(tls / d) for d in ROTATED}
    assert not {d for d in ROTATED if renewed[d] == serials[d]}, "not re-issued"
    assert certificate_serial(deployment.person_tls) == person  # a person's is not touched
    assert presented_serial(rm_port, deployment.person_tls) == renewed["rm"]  # and in use
    wait_until(lambda: all_ready(deployment), 60, "both workers ready")
    after = wait_until(lambda: running_tasks(deployment, job_id, 2), 60, "the tasks running")
    assert {(t["task_id"], t["attempt"]) for t in after} == {
        (t["task_id"], t["attempt"]) for t in before
    }
    kill_job(deployment, job_id)
    succeeds(deployment, "after-rotation")


# ---------------------------------------------------------------------------- upgrade


def test_a_rolling_upgrade_restarts_no_running_task(deployment: Deployment) -> None:
    job_id = deployment.submit(job_spec("through-upgrade", 2, "sleep 600", 1.5))
    before = wait_until(lambda: running_tasks(deployment, job_id, 2), 120, "a task on each")
    assert {t["node_id"] for t in before} == set(WORKERS)
    containers = set(task_containers(deployment, f"sluice.job={job_id}"))
    agents = {w: deployment.container(f"agent-{w}") for w in WORKERS}

    output = progress(deployment.script("upgrade.sh", "--from-debian", timeout=600))
    assert "upgraded in" in output, output
    assert all(deployment.container(f"agent-{w}") != agents[w] for w in WORKERS)
    wait_until(lambda: all_ready(deployment), 60, "both workers ready")
    after = wait_until(lambda: running_tasks(deployment, job_id, 2), 60, "the tasks running")
    assert {(t["task_id"], t["attempt"]) for t in after} == {
        (t["task_id"], t["attempt"]) for t in before
    }
    assert set(task_containers(deployment, f"sluice.job={job_id}")) == containers
    kill_job(deployment, job_id)
