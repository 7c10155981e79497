"""deploy/docker-compose.yml and the worker files deploy/add-worker.sh writes, checked without
starting a container: Compose itself (v2 if installed, else Debian's v1.29) accepts them and
reads them as these tests do; they use nothing v1.29 rejects and nothing this kind of host
refuses (``privileged``); every long-running service restarts and is health-checked; every
``sluice ...`` command line parses with the real CLI; the RM hands the agents the services'
names on the compose network; every daemon mounts its own TLS directory read-only and only the
one-shot ``certs`` mounts the CA.  The worker files are written by the real add-worker.sh, run
in a copy of deploy/ with a stub compose.sh in place of Docker.  With ``CI=true`` a missing
Compose fails instead of skipping.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from aggregator.influx_store import parse_influx_url
from plumbing import data_plane
from sluice.cli import build_parser
from tests.unit.deploy.deployment import (
    CONTROL,
    DEPLOY,
    TLS_TARGET,
    DeployCopy,
    MissingVariableError,
    compose,
    example_env,
    host_port,
    interpolate,
    interpolate_all,
    mount_entries,
    mounts,
    published,
    raw,
    sluice_args,
    sluice_command,
    worker_service,
)

WORKER = "worker-7"
PROCESS_WORKER = "small-1"  # --runtime process --cpus 2 --memory-mb 4096


@pytest.fixture(scope="module")
def deploy_copy(tmp_path_factory: pytest.TempPathFactory) -> DeployCopy:
    """A copy of deploy/ with two workers added by the real add-worker.sh."""
    copy = DeployCopy(tmp_path_factory.mktemp("deploy"))
    for args in ([WORKER], [PROCESS_WORKER, "--runtime", "process", "--cpus", "2",
                            "--memory-mb", "4096"]):  # fmt: skip
        result = copy.add_worker(*args)
        assert result.returncode == 0, result.stderr
    return copy


def all_services(copy: DeployCopy) -> dict[str, dict[str, Any]]:
    """Every service of the control plane and of both workers, interpolated."""
    found: dict[str, dict[str, Any]] = dict(compose(CONTROL)["services"])
    for name in (WORKER, PROCESS_WORKER):
        found[f"agent-{name}"] = worker_service(copy, name)
    return found


# ---------------------------------------------------------------------------- interpolation

INTERPOLATION = [
    ("plain $$ stays", "$$SYS/#", {}, "$SYS/#"),
    ("braced", "${A}:1", {"A": "x"}, "x:1"),
    ("bare", "$A/b", {"A": "x"}, "x/b"),
    ("default when unset", "${A:-7}", {}, "7"),
    ("default when empty", "${A:-7}", {"A": ""}, "7"),
    ("dash default keeps empty", "${A-7}", {"A": ""}, ""),
    ("required set", "${A:?say}", {"A": "v"}, "v"),
    ("two in one string", "mqtt://${H}:${P:-1883}", {"H": "h"}, "mqtt://h:1883"),
]


@pytest.mark.parametrize(("_", "text", "env", "expected"), INTERPOLATION)
def test_interpolation_follows_compose(_: str, text: str, env: dict[str, str], expected: str):
    assert interpolate(text, env) == expected


@pytest.mark.parametrize(
    ("text", "env"), [("${A:?say}", {}), ("${A:?say}", {"A": ""}), ("${A}", {}), ("$A", {})]
)
def test_interpolation_refuses_a_missing_value(text: str, env: dict[str, str]):
    with pytest.raises(MissingVariableError):
        interpolate(text, env)


def test_every_variable_has_a_default_and_the_defaults_are_the_examples():
    """Compose is run with .env, which compose.sh makes from .env.example: every default in
    the files is the example's value, so a missing .env changes nothing."""
    assert compose(CONTROL) == interpolate_all(raw(CONTROL), {})


# ---------------------------------------------------------------------------- add-worker.sh

# (case, arguments, exit status, what it says on failure)
ADD_WORKER = [
    ("a worker", ["worker-9"], 0, ""),
    ("with capacity and the process runtime",
     ["worker-9", "--cpus", "1.5", "--memory-mb", "512", "--runtime", "process"], 0, ""),
    ("no name", [], 1, "usage: add-worker.sh NAME"),
    ("not a DNS label", ["Worker_1"], 1, "is a DNS label"),
    ("a control-plane service's name", ["kafka"], 1, "the name of a control-plane service"),
    ("a bad --cpus", ["worker-9", "--cpus", "many"], 1, "--cpus: many: expected a number"),
    ("a bad --runtime", ["worker-9", "--runtime", "vm"], 1, "expected docker or process"),
    ("an unknown option", ["worker-9", "--gpus", "1"], 1, "--gpus: unknown option"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "status", "says"), [c[1:] for c in ADD_WORKER], ids=[c[0] for c in ADD_WORKER]
)
def test_add_worker_writes_a_worker_file_and_starts_it(
    tmp_path: Path, args: list[str], status: int, says: str
):
    copy = DeployCopy(tmp_path)
    result = copy.add_worker(*args)
    assert result.returncode == status, result.stderr
    if status:
        assert says in result.stderr
        assert not (copy.path / "workers").exists() or not any((copy.path / "workers").iterdir())
        return
    name = args[0]
    assert copy.calls[:2] == [
        f"run --rm -T certs agent {name}",
        f"up -d --no-deps agent-{name}",
    ]
    agent = sluice_args(worker_service(copy, name))
    options = dict(zip(args[1::2], args[2::2], strict=True))
    assert agent.runtime == options.get("--runtime", "docker")
    assert agent.cpus == (float(options["--cpus"]) if "--cpus" in options else None)
    assert agent.memory_mb == (int(options["--memory-mb"]) if "--memory-mb" in options else None)
    again = copy.add_worker(name)
    assert again.returncode == 1
    assert "a worker of that name exists" in again.stderr


def test_add_worker_keeps_the_certificate_a_worker_has(tmp_path: Path):
    """A worker added again (after removing it) keeps its certificate: none is issued."""
    copy = DeployCopy(tmp_path)
    kept = copy.path / "tls" / "agents" / WORKER
    kept.mkdir(parents=True)
    (kept / "tls.crt").write_text("kept")
    result = copy.add_worker(WORKER)
    assert result.returncode == 0, result.stderr
    assert not [call for call in copy.calls if "certs" in call]
    assert (kept / "tls.crt").read_text() == "kept"


# ---------------------------------------------------------------------------- the services

CONTROL_SERVICES = ["kafka", "mosquitto", "influxdb", "aggregator", "rm"]
LONG_RUNNING = [*CONTROL_SERVICES, f"agent-{WORKER}", f"agent-{PROCESS_WORKER}"]
ONE_SHOT = ["certs", "cli"]  # run to completion, never restarted


def test_the_files_define_exactly_these_services(deploy_copy: DeployCopy):
    assert set(all_services(deploy_copy)) == set(LONG_RUNNING + ONE_SHOT)


@pytest.mark.parametrize("path", [CONTROL, None], ids=["docker-compose.yml", "a worker file"])
def test_nothing_compose_v1_or_this_host_refuses(deploy_copy: DeployCopy, path: Path | None):
    """Compose v1.29 rejects a top-level ``name:`` and ``cgroup:``; ``privileged`` does not
    start where capabilities cannot all be applied (issue 30)."""
    document = raw(path or deploy_copy.worker(WORKER))
    assert {k for k in document if not k.startswith("x-")} <= {"services", "volumes", "networks"}
    assert "version" not in document  # v2 warns it is obsolete; v1.29 does without
    for name, svc in document["services"].items():
        assert not {"cgroup", "privileged", "pid"} & set(svc), name
        assert svc.get("network_mode") in (None, "none"), name  # the bridge network
        assert set(svc.get("cap_add", [])) <= {"SYS_ADMIN"}, name


@pytest.mark.parametrize("name", ONE_SHOT)
def test_one_shot_services_are_never_restarted_and_publish_nothing(name: str):
    svc = compose(CONTROL)["services"][name]
    assert svc["restart"] == "no"
    assert "ports" not in svc and "healthcheck" not in svc


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_every_service_restarts_and_is_health_checked(deploy_copy: DeployCopy, name: str):
    svc = all_services(deploy_copy)[name]
    assert svc["restart"] == "unless-stopped"
    test = svc["healthcheck"]["test"]
    assert test[:2] == ["CMD", "sluice-health"], test
    checks = test[2:]
    assert len(checks) % 2 == 0 and set(checks[::2]) <= {"listening", "http", "grpc"}, test
    assert svc["healthcheck"]["retries"] >= 1


def checks_of(svc: dict[str, Any]) -> dict[str, str]:
    test = svc["healthcheck"]["test"][2:]
    return dict(zip(test[::2], test[1::2], strict=True))


# (service, the ports its health check wants listened on, where the service says it listens)
LISTENING = [
    ("kafka", "9092,9093", "Tansu on 127.0.0.1:9092 (sluice-kafka), the front on FRONT_PORT"),
    ("mosquitto", "8883", "mosquitto.conf's listener"),
    ("influxdb", "8086", "the front on the entrypoint's PORT"),
]


@pytest.mark.parametrize(("name", "ports", "_"), LISTENING, ids=[c[0] for c in LISTENING])
def test_health_checks_wait_for_the_ports_the_service_serves(name: str, ports: str, _: str):
    svc = compose(CONTROL)["services"][name]
    assert checks_of(svc)["listening"] == ports
    entrypoint = svc["entrypoint"]
    served = {
        "kafka": lambda: f"9092,{entrypoint[2]}",
        "mosquitto": lambda: mosquitto_settings()["listener"][0],
        "influxdb": lambda: entrypoint[1],
    }[name]()
    assert served == ports


def test_influxdbs_health_check_asks_the_server_behind_its_front():
    script = (DEPLOY / "entrypoints" / "sluice-influxdb").read_text()
    assert 'bind-address = "127.0.0.1:18086"' in script
    assert checks_of(compose(CONTROL)["services"]["influxdb"])["http"] == (
        "http://127.0.0.1:18086/ping"
    )


@pytest.mark.parametrize("name", ["rm", "aggregator", f"agent-{WORKER}"])
def test_sluice_daemons_health_check_their_own_grpc_port_by_their_certificates_name(
    deploy_copy: DeployCopy, name: str
):
    """sluice-health dials 127.0.0.1 and checks the server's certificate against the
    container's hostname, which is the name the certificate gives (certs.sh)."""
    svc = all_services(deploy_copy)[name]
    args = sluice_args(svc)
    assert checks_of(svc)["grpc"] == f"127.0.0.1:{host_port(args.listen)[1]}"
    assert svc["hostname"] == host_port(args.advertise)[0]


def test_named_volumes_are_declared_and_state_is_kept(deploy_copy: DeployCopy):
    for path in (CONTROL, deploy_copy.worker(WORKER)):
        document = compose(path)
        used = {
            source
            for svc in document["services"].values()
            for source, _, _ in mount_entries(svc)
            if not source.startswith(("./", "/"))
        }
        assert used == set(document.get("volumes") or {}), path.name
    services = all_services(deploy_copy)
    assert mounts(services["rm"])[sluice_args(services["rm"]).state_dir.as_posix()] == "rm-state"
    agent = services[f"agent-{WORKER}"]
    assert mounts(agent)[sluice_args(agent).state_dir.as_posix()] == f"agent-{WORKER}"
    assert mounts(services["influxdb"])["/var/lib/influxdb"] == "influxdb-data"
    assert mounts(services["mosquitto"])["/var/lib/mosquitto"] == "mosquitto-data"


def test_every_container_runs_the_one_image(deploy_copy: DeployCopy):
    image = example_env()["SLUICE_IMAGE"]
    assert {svc["image"] for svc in all_services(deploy_copy).values()} == {image}


def test_only_the_rm_the_aggregator_and_mosquitto_are_published_on_sluice_bind(
    deploy_copy: DeployCopy,
):
    env = example_env()
    found = {n: published(s) for n, s in all_services(deploy_copy).items() if "ports" in s}
    bind = env["SLUICE_BIND"]
    assert found == {
        "rm": {7070: f"{bind}:{env['SLUICE_RM_PORT']}"},
        "aggregator": {7071: f"{bind}:{env['SLUICE_AGGREGATOR_PORT']}"},
        "mosquitto": {8883: f"{bind}:{env['SLUICE_MQTT_PORT']}"},
    }


# ---------------------------------------------------------------------------- command lines

SLUICE_DAEMONS = [
    ("rm", "rm"),
    ("aggregator", "aggregator"),
    (f"agent-{WORKER}", "agent"),
    (f"agent-{PROCESS_WORKER}", "agent"),
]


def option_strings(command: str) -> set[str]:
    """The exact flags of ``sluice COMMAND`` (argparse would also take abbreviations)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag for action in sub.choices[command]._actions for flag in action.option_strings}


@pytest.mark.parametrize(("name", "command"), SLUICE_DAEMONS, ids=[n for n, _ in SLUICE_DAEMONS])
def test_sluice_command_parses_with_the_real_cli(deploy_copy: DeployCopy, name: str, command: str):
    svc = all_services(deploy_copy)[name]
    args = sluice_args(svc)
    assert args.command == command
    flags = {token for token in sluice_command(svc)[2:] if token.startswith("--")}
    assert flags <= option_strings(command), "spelled out, not abbreviated"
    assert args.log_level == example_env()["SLUICE_LOG_LEVEL"]
    data_plane.check_host_port("--listen", args.listen)
    data_plane.check_host_port("--advertise", args.advertise)
    assert host_port(args.listen)[0] == "0.0.0.0"  # reachable from outside its container
    assert not args.insecure
    assert args.tls_dir.as_posix() == TLS_TARGET


def test_rm_hands_agents_and_job_masters_the_services_names():
    services = compose(CONTROL)["services"]
    rm = sluice_args(services["rm"])
    assert rm.advertise == "rm:7070"
    assert (rm.kafka, rm.kafka_tls) == ("kafka:9093", True)
    # What Tansu advertises, and its front's port in the container.
    assert services["kafka"]["entrypoint"] == ["sluice-kafka", rm.kafka, "9093"]
    assert rm.mqtt == "mqtts://mosquitto:8883"
    assert mosquitto_settings()["listener"] == ["8883"]
    assert rm.aggregator == sluice_args(services["aggregator"]).advertise == "aggregator:7071"
    assert rm.cluster_id == example_env()["COMPOSE_PROJECT_NAME"]
    data_plane.from_arguments(rm)  # checks the addresses as the RM does


def test_the_aggregator_reaches_its_neighbours_by_service_name_over_tls():
    services = compose(CONTROL)["services"]
    aggregator = sluice_args(services["aggregator"])
    plane = data_plane.from_arguments(aggregator)
    assert (aggregator.kafka, plane.kafka_tls) == ("kafka:9093", True)
    assert plane.mqtt_url == "mqtts://mosquitto:8883"
    target = parse_influx_url(aggregator.influx_url)
    assert (target.host, target.port, target.ssl) == ("influxdb", 8086, True)
    assert services["influxdb"]["entrypoint"] == ["sluice-influxdb", str(target.port)]
    depends = services["aggregator"]["depends_on"]
    assert {n: d["condition"] for n, d in depends.items()} == dict.fromkeys(
        ("kafka", "mosquitto", "influxdb"), "service_healthy"
    )


@pytest.mark.parametrize("name", [WORKER, PROCESS_WORKER])
def test_a_worker_is_a_machine_of_its_own_named_by_its_service_name(
    deploy_copy: DeployCopy, name: str
):
    svc = worker_service(deploy_copy, name)
    agent = sluice_args(svc)
    rm = sluice_args(compose(CONTROL)["services"]["rm"])
    assert agent.rm == rm.advertise
    assert agent.cluster_id == rm.cluster_id
    assert agent.node_id == svc["hostname"] == name
    assert agent.advertise == f"{name}:{host_port(agent.listen)[1]}"
    assert svc["networks"]["default"]["aliases"] == [name]
    socket = "/var/run/docker.sock"
    assert (mounts(svc).get(socket) == socket) is (agent.runtime == "docker")


# ---------------------------------------------------------------------------- certificates

# Each service's TLS directory (under deploy/tls), mounted read-only at /etc/sluice/tls.
OWN_TLS = {
    "kafka": "./tls/kafka",
    "mosquitto": "./tls/mosquitto",
    "influxdb": "./tls/influxdb",
    "aggregator": "./tls/aggregator",
    "rm": "./tls/rm",
    "cli": "./tls/admin",
    f"agent-{WORKER}": f"./tls/agents/{WORKER}",
    f"agent-{PROCESS_WORKER}": f"./tls/agents/{PROCESS_WORKER}",
}


@pytest.mark.parametrize("name", list(OWN_TLS))
def test_every_service_mounts_only_its_own_tls_dir_read_only(deploy_copy: DeployCopy, name: str):
    svc = all_services(deploy_copy)[name]
    tls_mounts = [
        (source, target, mode)
        for source, target, mode in mount_entries(svc)
        if source.startswith("./tls") or target.startswith("/etc/sluice/tls")
    ]
    assert tls_mounts == [(OWN_TLS[name], TLS_TARGET, "ro")]


def test_only_the_certs_service_mounts_the_ca(deploy_copy: DeployCopy):
    certs = compose(CONTROL)["services"]["certs"]
    assert mounts(certs)[certs["working_dir"]] == "./tls"
    assert certs["entrypoint"] == ["bash", "/usr/local/bin/sluice-certs"]
    assert mounts(certs)["/usr/local/bin/sluice-certs"] == "./certs.sh"
    assert certs["network_mode"] == "none"
    for name, svc in all_services(deploy_copy).items():
        if name != "certs":
            for source, _, _ in mount_entries(svc):
                assert source.rstrip("/") not in ("./tls", ".", ".."), name
                assert not source.startswith("./tls/ca"), f"{name} mounts the CA"


def test_control_plane_services_that_mount_certificates_wait_for_them():
    for name, svc in compose(CONTROL)["services"].items():
        if name in ("certs", "cli", "aggregator"):  # the aggregator waits for healthy brokers
            continue
        assert svc["depends_on"]["certs"] == {"condition": "service_completed_successfully"}


def test_the_cli_service_is_an_administrator_dialling_the_rm_by_name():
    cli = compose(CONTROL)["services"]["cli"]
    env = cli["environment"]
    assert env["SLUICE_TLS_DIR"] == TLS_TARGET
    assert env["SLUICE_RM"] == sluice_args(compose(CONTROL)["services"]["rm"]).advertise
    assert cli["profiles"] == ["tools"]  # `up` leaves it alone


def mosquitto_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in (DEPLOY / "mosquitto.conf").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, *values = line.split()
            settings.setdefault(key, []).extend(values)
    return settings


def test_mosquitto_reads_what_its_service_mounts_and_demands_a_certificate():
    settings = mosquitto_settings()
    assert settings["listener"] == ["8883"]  # one listener, every address, TLS
    assert settings["require_certificate"] == ["true"]
    assert settings["allow_anonymous"] == ["false"]
    svc = compose(CONTROL)["services"]["mosquitto"]
    found = mounts(svc)
    assert svc["entrypoint"][-1] in found
    assert found[svc["entrypoint"][-1]] == "./mosquitto.conf"
    assert found[settings["acl_file"][0]] == "./mosquitto.acl"
    for key, file in (("cafile", "ca.crt"), ("certfile", "tls.crt"), ("keyfile", "tls.key")):
        assert settings[key] == [f"{TLS_TARGET}/{file}"]
    assert found[settings["persistence_location"][0].rstrip("/")] == "mosquitto-data"


# ---------------------------------------------------------------------------- docker compose


def compose_config(copy: DeployCopy) -> dict[str, Any]:
    """``compose.sh config``: the files as Compose reads them (the worker files included, and
    the ``cli`` service of the ``tools`` profile, which v2 leaves out otherwise)."""
    result = copy.compose("--profile", "tools", "config")
    if "neither `docker compose` (v2) nor docker-compose (v1)" in result.stderr:
        reason = "Docker Compose is not installed (`docker compose` or `docker-compose`)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), result.stderr  # the model, not the exit status alone
    # Compose prints a valid compose file, so every "$" of a value comes out as "$$".
    model = interpolate_all(yaml.safe_load(result.stdout), {})
    assert isinstance(model, dict)
    return model


@pytest.mark.parametrize("with_workers", [False, True], ids=["control plane", "with workers"])
def test_docker_compose_accepts_the_files_as_these_tests_read_them(
    deploy_copy: DeployCopy, tmp_path: Path, with_workers: bool
):
    copy = deploy_copy if with_workers else DeployCopy(tmp_path)
    model = compose_config(copy)
    ours = all_services(deploy_copy)
    if not with_workers:
        ours = {n: s for n, s in ours.items() if not n.startswith("agent-")}
    assert set(model["services"]) == set(ours)
    for name, svc in ours.items():
        theirs = model["services"][name]
        for key in ("command", "entrypoint", "hostname", "restart", "cap_add"):
            assert theirs.get(key) == svc.get(key), (name, key)
        assert theirs.get("healthcheck", {}).get("test") == svc.get("healthcheck", {}).get(
            "test"
        ), name
    assert (copy.path / ".env").read_text() == (copy.path / ".env.example").read_text()
