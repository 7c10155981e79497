"""Lab mode, read statically (issue 30): with SLUICE_HOST a routable address, deploy/lib.sh
makes every address the cluster hands out SLUICE_HOST and a published port, the workers
add-worker.sh writes publish their agents, and add-worker.sh --remote writes a self-contained
bundle for a worker on another machine.  The real scripts run in a copy of deploy/ with a stub
compose.sh (tests/unit/deploy/deployment.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.deploy.deployment import (
    DEPLOY,
    DeployCopy,
    clean_env,
    example_env,
    interpolate_all,
    mount_entries,
    published,
    raw,
    read_env_file,
    sluice_args,
)

HOST = "192.0.2.7"
DERIVED = ("SLUICE_LAB", "SLUICE_RM_ADDRESS", "SLUICE_KAFKA_ADDRESS", "SLUICE_MQTT_URL",
           "SLUICE_AGGREGATOR_ADDRESS")  # fmt: skip


def lab_env(host: str = HOST) -> dict[str, str]:
    return example_env() | {"SLUICE_HOST": host, "SLUICE_BIND": host}


def lab_copy(root: Path, host: str = HOST) -> DeployCopy:
    copy = DeployCopy(root)
    text = "".join(f"{key}={value}\n" for key, value in lab_env(host).items())
    (copy.path / ".env").write_text(text)
    return copy


def derived(copy: DeployCopy) -> dict[str, str]:
    """What lib.sh exports, sourced in the copy with its .env."""
    printed = "; ".join(f'echo "{name}=${{{name}}}"' for name in DERIVED)
    done = subprocess.run(
        ["bash", "-c", f"source {copy.path}/lib.sh; {printed}"],
        env=clean_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


# (SLUICE_HOST, what lib.sh derives)
MODES = [
    ("127.0.0.1", {"SLUICE_LAB": "", "SLUICE_RM_ADDRESS": "rm:7070",
                   "SLUICE_KAFKA_ADDRESS": "kafka:9093", "SLUICE_MQTT_URL": "mqtts://mosquitto:8883",
                   "SLUICE_AGGREGATOR_ADDRESS": "aggregator:7071"}),
    ("localhost", {"SLUICE_LAB": "", "SLUICE_RM_ADDRESS": "rm:7070",
                   "SLUICE_KAFKA_ADDRESS": "kafka:9093", "SLUICE_MQTT_URL": "mqtts://mosquitto:8883",
                   "SLUICE_AGGREGATOR_ADDRESS": "aggregator:7071"}),
    (HOST, {"SLUICE_LAB": "1", "SLUICE_RM_ADDRESS": f"{HOST}:7070",
            "SLUICE_KAFKA_ADDRESS": f"{HOST}:9093", "SLUICE_MQTT_URL": f"mqtts://{HOST}:8883",
            "SLUICE_AGGREGATOR_ADDRESS": f"{HOST}:7071"}),
]  # fmt: skip


@pytest.mark.parametrize(("host", "expected"), MODES, ids=[m[0] for m in MODES])
def test_lib_derives_the_addresses_handed_out(tmp_path: Path, host: str, expected: dict[str, str]):
    assert derived(lab_copy(tmp_path, host)) == expected


def test_in_lab_mode_the_rm_hands_out_sluice_host_and_published_ports(tmp_path: Path):
    env = lab_env() | derived(lab_copy(tmp_path))
    services = interpolate_all(raw(DEPLOY / "docker-compose.yml"), env)["services"]
    rm = sluice_args(services["rm"])
    assert rm.advertise == f"{HOST}:{env['SLUICE_RM_PORT']}"
    assert rm.kafka == f"{HOST}:{env['SLUICE_KAFKA_PORT']}"
    assert rm.mqtt == f"mqtts://{HOST}:{env['SLUICE_MQTT_PORT']}"
    assert rm.aggregator == f"{HOST}:{env['SLUICE_AGGREGATOR_PORT']}"
    assert sluice_args(services["aggregator"]).advertise == rm.aggregator
    assert services["kafka"]["entrypoint"] == ["sluice-kafka", rm.kafka, "9093"]
    lab = interpolate_all(raw(DEPLOY / "docker-compose.lab.yml"), env)["services"]
    assert set(lab) == {"kafka"}
    assert published(lab["kafka"]) == {9093: f"{HOST}:{env['SLUICE_KAFKA_PORT']}"}
    for name in ("rm", "aggregator", "mosquitto"):
        assert {a.split(":")[0] for a in published(services[name]).values()} == {HOST}


def worker(copy: DeployCopy, name: str) -> dict[str, Any]:
    env = lab_env() | derived(copy)
    found: dict[str, Any] = interpolate_all(raw(copy.worker(name)), env)["services"][
        f"agent-{name}"
    ]
    return found


def test_in_lab_mode_each_worker_here_publishes_its_agent_on_a_port_of_its_own(tmp_path: Path):
    copy = lab_copy(tmp_path)
    for name in ("w1", "w2"):
        result = copy.add_worker(name)
        assert result.returncode == 0, result.stderr
    first = int(example_env()["SLUICE_AGENT_PORT"])
    for offset, name in enumerate(("w1", "w2")):
        svc = worker(copy, name)
        agent = sluice_args(svc)
        assert published(svc) == {7072: f"{HOST}:{first + offset}"}
        assert agent.advertise == f"{HOST}:{first + offset}"
        assert agent.rm == f"{HOST}:{example_env()['SLUICE_RM_PORT']}"
        assert f"run --rm -T certs agent {name} {HOST}" in copy.calls  # names SLUICE_HOST


def test_remote_needs_lab_mode(tmp_path: Path):
    result = DeployCopy(tmp_path).add_worker("far", "--remote", "10.0.0.9")
    assert result.returncode == 1
    assert "--remote: needs lab mode" in result.stderr


def test_remote_writes_a_self_contained_bundle(tmp_path: Path):
    copy = lab_copy(tmp_path)
    tls = copy.path / "tls" / "agents" / "far"
    tls.mkdir(parents=True)
    for file in ("ca.crt", "tls.crt", "tls.key"):
        (tls / file).write_text(file)
    result = copy.add_worker("far", "--remote", "10.0.0.9", "--port", "7100", "--cpus", "2")
    assert result.returncode == 0, result.stderr
    assert "docker save" in result.stderr and "docker load" in result.stderr
    assert not copy.worker("far").exists()  # not part of this host's project
    bundle = copy.path / "remote" / "far"
    assert sorted(p.name for p in (bundle / "tls").iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    env = read_env_file(bundle / ".env")
    document = raw(bundle / "docker-compose.yml")
    assert set(document) == {"services", "volumes"}
    svc = interpolate_all(document, env)["services"]["agent"]
    agent = sluice_args(svc)
    assert agent.rm == f"{HOST}:{example_env()['SLUICE_RM_PORT']}"
    assert agent.advertise == "10.0.0.9:7100" and agent.node_id == svc["hostname"] == "far"
    assert agent.cluster_id == example_env()["COMPOSE_PROJECT_NAME"] != env["COMPOSE_PROJECT_NAME"]
    assert (agent.cpus, agent.runtime) == (2.0, "docker")
    assert published(svc) == {7072: "0.0.0.0:7100"}
    assert svc["cap_add"] == ["SYS_ADMIN"] and "privileged" not in svc
    assert svc["entrypoint"] == ["sluice-agent-entrypoint"]
    assert ("./tls", "/etc/sluice/tls", "ro") in mount_entries(svc)
    again = copy.add_worker("far", "--remote", "10.0.0.9")
    assert again.returncode == 1 and "a remote worker of that name exists" in again.stderr
