"""The docker-compose deployment, end to end (issue 30): built as a host without a registry
must build it, brought up by its own scripts, used from the host like a user's laptop, broken
on purpose, and torn down to nothing.

Run by scripts/test_deployment.sh (from the README's test command), not by the main pytest run:
it builds images and runs a dozen containers.  The tests share one deployment and run in file
order, each leaving it as it found it: three workers ready, no job running."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
import yaml
from paho.mqtt.enums import CallbackAPIVersion

from policies.oversubscription.candidate_sync import decode_machine_list
from tests.deployment.deployment import Deployment, brought_up, wait_until

pytestmark = pytest.mark.deployment

WORKERS = ("worker-1", "worker-2", "worker-3")
FINAL = {"succeeded", "failed", "killed"}

# BIG-C's queues for the preemption scenario: long jobs best-effort, shrunk gracefully.
QUEUES = {
    "default": "long",
    "queues": {
        "short": {"share": 0.95},
        "long": {
            "share": 0.05,
            "mode": "graceful",
            "graceful_step": {"cpu": 0.5, "memory_mb": 64},
            "resume_after_offers": 1,
        },
    },
}


# DiAS's settings for the last scenario (docs/approximation.md).
DIAS = {
    "priorities": [{"priority": 0, "drop_ratio": 0.2}, {"priority": 5, "sprint_timeout_s": 2}],
    "sprint": {"budget_s": 3, "replenish_s_per_hour": 1800, "factor": 2.0},
}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    deployment = Deployment.prepare(tmp_path_factory.mktemp("deployment"))
    (deployment.directory / "config" / "queues.yaml").write_text(yaml.safe_dump(QUEUES))
    with brought_up(deployment, "--workers", str(len(WORKERS))):
        yield deployment


# ---------------------------------------------------------------------------- helpers


def phase(name: str, tasks: int, command: str, cpu: float = 0.5) -> dict[str, Any]:
    return {
        "name": name,
        "tasks": tasks,
        "command": ["sh", "-c", command],
        "resources": {"cpu": cpu, "memory_mb": 32},
    }


def spec(name: str, tasks: int, command: str, cpu: float, **fields: Any) -> str:
    """A job of one phase, ``work``."""
    return yaml.safe_dump({"name": name, "phases": [phase("work", tasks, command, cpu)], **fields})


def tasks_of(deployment: Deployment, job_id: str) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = deployment.job(job_id)["tasks"]
    return tasks


def running(deployment: Deployment, job_id: str, count: int) -> list[dict[str, Any]] | None:
    tasks = [t for t in tasks_of(deployment, job_id) if t["state"] == "running"]
    return tasks if len(tasks) == count else None


def final_state(deployment: Deployment, job_id: str) -> str | None:
    state: str = deployment.job(job_id)["summary"]["state"]
    return state if state in FINAL else None


def kill(deployment: Deployment, job_id: str) -> None:
    deployment.cli("kill", job_id)
    wait_until(lambda: final_state(deployment, job_id), 60, f"{job_id} killed")
    wait_until(lambda: not task_containers(deployment, job_id), 60, f"{job_id}'s containers gone")


def task_containers(deployment: Deployment, job_id: str) -> list[str]:
    """The docker runtime's containers of ``job_id``, running or not, on this host's engine."""
    return deployment.docker(
        "ps", "-aq", "--filter", f"label=sluice.cluster={deployment.project}",
        "--filter", f"label=sluice.job={job_id}",
    ).split()  # fmt: skip


def attempt_containers(
    deployment: Deployment, job_id: str, task_id: str, attempt: int, *, running_only: bool = False
) -> list[str]:
    """The containers of one attempt of a task (the docker runtime names them ``...-<job>.
    <task>.<attempt>-<hash>``)."""
    listing = deployment.docker(
        "ps", *(() if running_only else ("-a",)), "--format", "{{.ID}} {{.Names}}",
        "--filter", f"label=sluice.cluster={deployment.project}",
        "--filter", f"label=sluice.job={job_id}", "--filter", f"label=sluice.task={task_id}",
    )  # fmt: skip
    marker = f"-{job_id}.{task_id}.{attempt}-"
    return [line.split()[0] for line in listing.splitlines() if marker in line]


def health(deployment: Deployment, service: str) -> str:
    return deployment.docker(
        "inspect", "--format", "{{.State.Health.Status}}", deployment.container(service)
    ).strip()


# ---------------------------------------------------------------------------- bring-up


def test_the_control_plane_is_healthy_and_every_worker_ready(deployment: Deployment) -> None:
    for service in ("kafka", "mosquitto", "influxdb", "aggregator", "rm"):
        assert health(deployment, service) == "healthy", service
    assert wait_until(deployment.ready_nodes, 60, "three workers ready") == set(WORKERS)
    # Each worker is a machine of its own: its own address on the network.
    addresses = {n["node_id"]: n["address"] for n in deployment.nodes()}
    assert addresses == {w: f"{w}:7072" for w in WORKERS}


def test_a_dag_job_runs_end_to_end_from_the_host(deployment: Deployment) -> None:
    examples = Path(__file__).resolve().parents[2] / "sluice" / "examples"
    job_id = deployment.submit((examples / "analytics.yaml").read_text())
    assert wait_until(lambda: final_state(deployment, job_id), 180, "the DAG job") == "succeeded"
    tasks = tasks_of(deployment, job_id)
    assert {t["phase"] for t in tasks} == {"extract", "transform", "report"}
    assert all(t["attempt"] == 1 and t["state"] == "succeeded" for t in tasks)
    wait_until(lambda: not task_containers(deployment, job_id), 60, "its containers removed")


# ---------------------------------------------------------------------------- data plane


def test_metrics_reach_influxdb_through_kafka(deployment: Deployment) -> None:
    """Agents publish to Kafka over TLS; the aggregator stores them in InfluxDB over TLS."""
    query = (
        "import json, urllib.request, urllib.parse;"
        "q = urllib.parse.quote('SELECT count(*) FROM node_metrics GROUP BY node');"
        "print(urllib.request.urlopen('http://127.0.0.1:18086/query?db=sluice&q=' + q).read()"
        ".decode())"
    )

    def nodes_with_samples() -> set[str]:
        reply = json.loads(
            deployment.compose("exec", "-T", "influxdb", "python", "-c", query, timeout=60)
        )
        series = reply["results"][0].get("series", [])
        return {s["tags"]["node"] for s in series}

    assert wait_until(
        lambda: nodes_with_samples() >= set(WORKERS), 90, "every worker's samples in InfluxDB"
    )


def test_candidate_lists_reach_a_client_over_mqtt_with_tls(deployment: Deployment) -> None:
    """From the host, with the person's certificate, as a job master subscribes."""
    tls = deployment.person_tls
    context = ssl.create_default_context(cafile=str(tls / "ca.crt"))
    context.load_cert_chain(str(tls / "tls.crt"), str(tls / "tls.key"))
    received: dict[str, bytes] = {}
    both = threading.Event()

    def on_message(_client: Any, _data: Any, message: mqtt.MQTTMessage) -> None:
        received.setdefault(message.topic.rsplit("/", 1)[-1], bytes(message.payload))
        if {"machines", "candidates"} <= received.keys():
            both.set()

    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"e2e-{deployment.project}")
    client.tls_set_context(context)
    client.on_message = on_message
    client.on_connect = lambda c, *_: c.subscribe("sluice/v1/#", qos=1)
    client.connect("127.0.0.1", int(deployment.settings["SLUICE_MQTT_PORT"]), keepalive=10)
    client.loop_start()
    try:
        assert both.wait(60), f"only {sorted(received)} received over MQTT"
    finally:
        client.loop_stop()
        client.disconnect()
    assert set(decode_machine_list(received["machines"]).names) == set(WORKERS)


def served_without_a_certificate(port: int, ca: Path) -> bool:
    """Whether the server on ``port`` answers a TLS client that shows no certificate."""
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    try:
        with (
            socket.create_connection(("127.0.0.1", port), 5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            # TLS 1.3 tells a client its certificate was refused only once it reads.
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            return bool(tls.recv(1))
    except (ssl.SSLError, OSError):
        return False


def test_a_client_without_a_certificate_is_served_nothing(deployment: Deployment) -> None:
    """Every published port demands a certificate of the cluster."""
    for port in ("SLUICE_RM_PORT", "SLUICE_AGGREGATOR_PORT", "SLUICE_MQTT_PORT"):
        number = int(deployment.settings[port])
        assert not served_without_a_certificate(number, deployment.person_tls / "ca.crt"), port


# ---------------------------------------------------------------------------- the designs


def test_a_short_job_preempts_a_long_one_gracefully(deployment: Deployment) -> None:
    """BIG-C: the long queue's tasks fill the workers; a short job's tasks get room by
    shrinking them (graceful), not by killing them."""
    long_id = deployment.submit(spec("long", 6, "sleep 600", 0.9, queue="long"))
    wait_until(lambda: running(deployment, long_id, 6), 120, "the long job's six tasks")
    short_id = deployment.submit(spec("short", 2, "sleep 2", 0.9, queue="short"))
    assert wait_until(lambda: final_state(deployment, short_id), 180, "the short job") == (
        "succeeded"
    )
    tasks = tasks_of(deployment, long_id)
    assert any(t["preemptions"] for t in tasks), "no long task was preempted"
    assert all(t["attempt"] == 1 for t in tasks), "a long task was killed and run again"
    kill(deployment, long_id)


def test_a_reservation_keeps_the_containers_across_the_barrier(deployment: Deployment) -> None:
    """Speculative slot reservation: the downstream phase runs in the upstream's containers."""
    document = {
        "name": "kept",
        "priority": 5,
        "max_retries": 0,
        "reservation": {"isolation": 0.9},
        "phases": [
            {**phase("up", 3, "sleep $(( ${SLUICE_TASK_ID#up-} + 1 ))"), "after": []},
            {**phase("down", 3, "true"), "after": ["up"]},
        ],
    }
    job_id = deployment.submit(yaml.safe_dump(document))
    assert wait_until(lambda: final_state(deployment, job_id), 180, "the kept job") == "succeeded"
    tasks = tasks_of(deployment, job_id)
    up = {t["allocation_id"] for t in tasks if t["phase"] == "up"}
    down = {t["allocation_id"] for t in tasks if t["phase"] == "down"}
    assert len(up) == 3 and down == up


def test_a_speculative_job_runs_without_containers_beside_a_service(
    deployment: Deployment,
) -> None:
    """ROSE: with every container held, a speculative job's tasks run in the agents' queues,
    on machines that also run a latency-sensitive service, which keeps running."""
    service = deployment.submit(
        yaml.safe_dump(
            {
                "name": "svc",
                "kind": "service",
                "priority": 5,
                "service": {"latency_sensitive": True},
                "phases": [phase("server", 1, "sleep 600")],
            }
        )
    )
    wait_until(lambda: running(deployment, service, 1), 120, "the service running")
    blocker = deployment.submit(spec("blocker", 12, "sleep 600", 0.5, priority=1))
    wait_until(
        lambda: all(n["capacity"]["cpu"] - n["allocated"]["cpu"] < 0.5 for n in deployment.nodes()),
        120,
        "the blocker holding every container",
    )
    job_id = deployment.submit(
        yaml.safe_dump(
            {
                "name": "spec",
                "priority": 10,
                "speculative": {"after_s": 0.5},
                "phases": [phase("map", 6, "sleep 2")],
            }
        )
    )
    assert wait_until(lambda: final_state(deployment, job_id), 240, "the speculative job") == (
        "succeeded"
    )
    detail = deployment.job(job_id)
    assert not detail["tasks"], "a task of the speculative job got a container"
    succeeded = [a for a in detail["speculative"] if a["outcome"] == "succeeded"]
    assert len(succeeded) == 6
    assert deployment.job(service)["summary"]["state"] == "running"
    kill(deployment, blocker)
    kill(deployment, service)


# ---------------------------------------------------------------------------- breaking it


def test_the_rm_killed_and_restarted_loses_no_job_and_reruns_no_task(
    deployment: Deployment,
) -> None:
    job_id = deployment.submit(spec("through-rm-kill", 3, "sleep 600", 0.5))
    before = wait_until(lambda: running(deployment, job_id, 3), 120, "three tasks running")
    deployment.docker("kill", deployment.container("rm"))
    deployment.compose("start", "rm")
    wait_until(lambda: deployment.ready_nodes() == set(WORKERS), 120, "the RM back, workers in")
    after = wait_until(lambda: running(deployment, job_id, 3), 60, "the tasks still running")
    assert {(t["task_id"], t["attempt"], t["node_id"]) for t in after} == {
        (t["task_id"], t["attempt"], t["node_id"]) for t in before
    }
    kill(deployment, job_id)


def test_a_killed_worker_is_declared_lost_and_its_tasks_run_elsewhere(
    deployment: Deployment,
) -> None:
    job_id = deployment.submit(spec("through-agent-kill", 3, "sleep 600", 0.5))
    tasks = wait_until(lambda: running(deployment, job_id, 3), 120, "three tasks running")
    victim = next(t for t in tasks if t["node_id"] != deployment.job(job_id)["summary"]
                  ["master_node"])  # fmt: skip
    node = victim["node_id"]
    deployment.docker("kill", deployment.container(f"agent-{node}"))
    wait_until(lambda: node not in deployment.ready_nodes(), 60, f"{node} declared lost")

    def rerun_elsewhere() -> dict[str, Any] | None:
        for task in tasks_of(deployment, job_id):
            if (
                task["task_id"] == victim["task_id"]
                and task["attempt"] > victim["attempt"]
                and task["state"] == "running"
            ):
                return task
        return None

    again = wait_until(rerun_elsewhere, 120, f"{victim['task_id']} running again elsewhere")
    assert again["node_id"] != node
    # The killed agent's task container runs on (the docker runtime's tasks are containers of
    # their own) until its agent is back: then it stops what the RM ran elsewhere, no ghost.
    orphan = attempt_containers(deployment, job_id, victim["task_id"], victim["attempt"])
    assert orphan, "the lost attempt's container is gone before its agent came back"
    deployment.compose("start", f"agent-{node}")
    wait_until(lambda: deployment.ready_nodes() == set(WORKERS), 120, f"{node} back")
    wait_until(
        lambda: (
            not attempt_containers(
                deployment, job_id, victim["task_id"], victim["attempt"], running_only=True
            )
        ),
        60,
        "the lost attempt's container stopped by its returning agent",
    )
    kill(deployment, job_id)


def test_a_rolling_restart_of_every_worker_restarts_no_task(deployment: Deployment) -> None:
    """Each agent's container is recreated in turn, as an upgrade does, while a long task runs
    on each worker: the new agent adopts its task, which keeps running."""
    job_id = deployment.submit(spec("through-rolling-restart", 3, "sleep 600", 1.5))
    before = wait_until(lambda: running(deployment, job_id, 3), 120, "a task on each worker")
    assert {t["node_id"] for t in before} == set(WORKERS)
    containers = set(task_containers(deployment, job_id))
    for worker in WORKERS:
        old = deployment.container(f"agent-{worker}")
        deployment.compose("up", "-d", "--no-deps", "--force-recreate", f"agent-{worker}")
        assert deployment.container(f"agent-{worker}") != old
        wait_until(lambda: deployment.ready_nodes() == set(WORKERS), 120, f"{worker} back")
    after = wait_until(lambda: running(deployment, job_id, 3), 60, "the tasks still running")
    assert {(t["task_id"], t["attempt"]) for t in after} == {
        (t["task_id"], t["attempt"]) for t in before
    }
    assert set(task_containers(deployment, job_id)) == containers  # the same containers
    kill(deployment, job_id)


def test_dias_drops_a_bounded_share_of_a_low_priority_job(deployment: Deployment) -> None:
    """DiAS, after the operator switches the RM's dispatch (SLUICE_RM_OPTIONS, then `up -d rm`:
    jobs are kept): priority 0 drops 20 % of its droppable phase."""
    (deployment.directory / "config" / "dias.yaml").write_text(yaml.safe_dump(DIAS))
    deployment.change_settings(
        SLUICE_RM_OPTIONS="--dispatch dias --max-running-jobs 1"
        " --dias-config /etc/sluice/config/dias.yaml"
    )
    old = deployment.container("rm")
    deployment.compose("up", "-d", "rm")
    assert deployment.container("rm") != old
    wait_until(lambda: deployment.ready_nodes() == set(WORKERS), 120, "the RM back")
    document = {
        "name": "approximate",
        "priority": 0,
        "max_retries": 0,
        "phases": [
            {**phase("map", 10, "true", cpu=0.2), "droppable": True},
            {**phase("sum", 1, "true"), "after": ["map"]},
        ],
    }
    job_id = deployment.submit(yaml.safe_dump(document))
    assert wait_until(lambda: final_state(deployment, job_id), 180, "the DiAS job") == "succeeded"
    detail = deployment.job(job_id)
    assert (
        len({t["task_id"] for t in detail["tasks"] if t["phase"] == "map"}) == 8
    )  # ceil(10 x 0.8)
    assert detail["summary"]["dias"]["dropped_tasks"] == 2


# ---------------------------------------------------------------------------- tear-down


def test_teardown_leaves_nothing_behind(deployment: Deployment) -> None:
    agents = [deployment.container(f"agent-{w}") for w in WORKERS]
    output = deployment.script("down.sh", "--volumes")
    assert "nothing of it is left" in output, output
    project = deployment.project
    assert not deployment.docker("ps", "-aq", "--filter", f"label=sluice.cluster={project}").split()
    assert not deployment.docker(
        "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"
    ).split()
    assert not deployment.docker(
        "volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={project}"
    ).split()
    networks = deployment.docker("network", "ls", "--format", "{{.Name}}").split()
    assert f"{project}_default" not in networks
    leftovers = [
        path for agent in agents for path in Path("/sys/fs/cgroup").glob(f"*/docker/{agent}")
    ]
    assert not leftovers, leftovers
    done = subprocess.run(["docker", "image", "rm", deployment.settings["SLUICE_IMAGE"]],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
