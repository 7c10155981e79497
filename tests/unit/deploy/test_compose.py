"""deploy/: what can be checked without pulling a single image.

The compose files cannot be run here (no registry), so these tests hold them to what the rest of
the repository says: every ``sluice ...`` command line parses with the real CLI parser and passes
the daemons' own address checks once the variables take the values of ``.env.example``; the
addresses the RM hands to workers lead to services of the same file, through ports it publishes;
every service restarts and is health-checked; the agent sees the host; the gRPC health check
command works against a real Sluice gRPC server over mutual TLS; the image installs every package
pyproject.toml names.  Certificates (issue 10): every Sluice daemon runs with a TLS directory
mounted read-only, only the one-shot ``certs`` service mounts the CA, the brokers' client
listeners require certificates of the cluster, and ``deploy/certs.sh``, run for real, makes what
the services mount.  Docker Compose itself must accept both files and interpolate them as these tests do:
Compose v2 (``docker compose config``) when installed, else Debian bookworm's Compose v1
(``docker-compose`` 1.29, which ``scripts/lib.sh`` installs) on the files less the two keys v1
does not know.  With ``CI=true`` a missing Compose fails that test instead of skipping it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from cryptography import x509
from grpc_health.v1 import health_pb2

from aggregator.influx_store import parse_influx_url
from plumbing import data_plane, tls
from plumbing.rpc import start_server
from plumbing.tls import Identity, Role
from sluice.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
CONTROL = DEPLOY / "docker-compose.yml"
AGENT = DEPLOY / "agent-compose.yml"
ENV_EXAMPLE = DEPLOY / ".env.example"
CERTS_SCRIPT = DEPLOY / "certs.sh"
# What a worker's shell provides (`export HOSTNAME`) rather than the .env file.
SHELL_ENV = {"HOSTNAME": "worker-1"}

# ---------------------------------------------------------------------------- helpers


class MissingVariableError(KeyError):
    """A ``${VAR}`` or ``${VAR:?msg}`` whose variable has no value."""


_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation: ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-d}``, ``${VAR-d}``,
    ``${VAR:?msg}``, ``${VAR?msg}``.  Stricter than Compose in one way: a variable without a
    default must have a value (Compose would warn and use ""), so a missing example fails."""

    def replace(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["bare"]
        op, arg = match["op"], match["arg"]
        value = env.get(name)
        unset_or_empty = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in (":-", "-") and unset_or_empty:
            return str(arg)
        if value is None or (op == ":?" and value == ""):
            raise MissingVariableError(f"{name}: {arg or 'no value'}")
        return value

    return _VARIABLE.sub(replace, text)


def interpolate_all(node: Any, env: Mapping[str, str]) -> Any:
    """``interpolate`` applied to every string value (never to keys), as Compose does."""
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_all(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate_all(value, env) for key, value in node.items()}
    return node


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines; blank lines and ``#`` comments ignored."""
    env = {}
    for text in path.read_text().splitlines():
        line = text.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: not KEY=VALUE: {line!r}"
            env[key.strip()] = value.strip()
    return env


def example_env() -> dict[str, str]:
    return read_env_file(ENV_EXAMPLE) | SHELL_ENV


def raw(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text())
    assert isinstance(document, dict)
    return document


def compose(path: Path) -> dict[str, Any]:
    """The compose file with the example values substituted."""
    document = interpolate_all(raw(path), example_env())
    assert isinstance(document, dict)
    return document


def service(path: Path, name: str) -> dict[str, Any]:
    found = compose(path)["services"][name]
    assert isinstance(found, dict)
    return found


def published(svc: Mapping[str, Any]) -> dict[int, int]:
    """Container port -> host port, from the short ``[IP:]HOST:CONTAINER`` syntax."""
    ports = {}
    for entry in svc.get("ports", []):
        *_, host, container = str(entry).split(":")
        ports[int(container)] = int(host)
    return ports


def mounts(svc: Mapping[str, Any]) -> dict[str, str]:
    """Mount target -> source, from the short ``SOURCE:TARGET[:MODE]`` syntax."""
    return {target: source for source, target, _ in mount_entries(svc)}


def mount_entries(svc: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(source, target, mode)`` of each short-syntax mount; mode "rw" when not given."""
    found = []
    for entry in svc.get("volumes", []):
        source, target, *mode = str(entry).split(":")
        found.append((source, target, mode[0] if mode else "rw"))
    return found


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def sluice_args(svc: Mapping[str, Any]) -> Any:
    """The service's command parsed by the real CLI parser (argparse exits on an error)."""
    command = svc["command"]
    assert command[0] == "sluice", command
    return build_parser().parse_args(command[1:])


def option_strings(command: str) -> set[str]:
    """The exact flags of ``sluice COMMAND`` (argparse would also take abbreviations)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag for action in sub.choices[command]._actions for flag in action.option_strings}


def listeners(setting: str) -> dict[str, tuple[str, int]]:
    """Kafka's ``NAME://host:port,...`` -> ``{NAME: (host, port)}``."""
    parsed = {}
    for item in setting.split(","):
        name, _, address = item.partition("://")
        parsed[name] = host_port(address)
    return parsed


def mosquitto_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in (DEPLOY / "mosquitto.conf").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, *values = line.split()
            settings.setdefault(key, []).extend(values)
    return settings


def health_code(svc: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(python code, address, TLS directory)`` of a ``python -c CODE ADDRESS TLS_DIR`` health
    check."""
    test = svc["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"], test
    assert len(test) == 6, test
    return test[3], test[4], test[5]


def mqtt_broker(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an ``mqtt[s]://HOST:PORT`` URL."""
    parts = urlsplit(url)
    assert parts.hostname and parts.port, url
    return parts.scheme, parts.hostname, parts.port


# ---------------------------------------------------------------------------- the helpers' rules

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


# ---------------------------------------------------------------------------- both files


@pytest.mark.parametrize("path", [CONTROL, AGENT], ids=lambda p: p.name)
def test_parses_as_yaml_with_services(path: Path):
    document = raw(path)
    assert isinstance(document["services"], dict)
    assert document["services"]


@pytest.mark.parametrize("path", [CONTROL, AGENT], ids=lambda p: p.name)
def test_every_variable_has_a_default_or_an_example(path: Path):
    compose(path)  # raises MissingVariableError naming the variable


REQUIRED = [
    (CONTROL, "SLUICE_HOST"),
    (AGENT, "SLUICE_RM"),
    (AGENT, "SLUICE_NODE_HOST"),
    (AGENT, "HOSTNAME"),
]


@pytest.mark.parametrize(("path", "name"), REQUIRED, ids=[n for _, n in REQUIRED])
def test_refuses_to_start_without_a_required_variable(path: Path, name: str):
    env = {k: v for k, v in example_env().items() if k != name}
    with pytest.raises(MissingVariableError, match=name):
        interpolate_all(raw(path), env)
    with pytest.raises(MissingVariableError, match=name):
        interpolate_all(raw(path), env | {name: ""})


SERVICES = [(CONTROL, name) for name in ("kafka", "mosquitto", "influxdb", "aggregator", "rm")] + [
    (AGENT, "agent")
]
# Run to completion, never restarted: the certificates (before every start), and the CLI.
ONE_SHOT = [(CONTROL, "certs"), (CONTROL, "cli")]


def test_the_files_define_exactly_these_services():
    defined = {(path, name) for path in (CONTROL, AGENT) for name in compose(path)["services"]}
    assert defined == set(SERVICES + ONE_SHOT)


@pytest.mark.parametrize(("path", "name"), ONE_SHOT, ids=[n for _, n in ONE_SHOT])
def test_one_shot_services_are_never_restarted_and_publish_nothing(path: Path, name: str):
    svc = service(path, name)
    assert svc["restart"] == "no"
    assert "ports" not in svc and "healthcheck" not in svc


@pytest.mark.parametrize(("path", "name"), SERVICES, ids=[n for _, n in SERVICES])
def test_every_service_restarts_and_is_health_checked(path: Path, name: str):
    svc = service(path, name)
    assert svc["restart"] in ("always", "unless-stopped", "on-failure")
    check = svc["healthcheck"]
    assert check["test"][0] in ("CMD", "CMD-SHELL")
    assert check["retries"] >= 1


def test_named_volumes_are_declared_and_state_is_kept():
    document = compose(CONTROL)
    declared = set(document["volumes"])
    by_service = {name: mounts(svc) for name, svc in document["services"].items()}
    used = {source for found in by_service.values() for source in found.values()}
    assert {s for s in used if not s.startswith(("./", "/"))} == declared
    assert sluice_args(service(CONTROL, "rm")).state_dir.as_posix() in by_service["rm"]
    assert by_service["influxdb"]["/var/lib/influxdb"] == "influxdb-data"
    kafka = service(CONTROL, "kafka")["environment"]
    assert kafka["KAFKA_LOG_DIRS"] in by_service["kafka"]


def test_sluice_services_build_the_one_image_from_this_repository():
    for path, name in [*ONE_SHOT, (CONTROL, "rm"), (CONTROL, "aggregator"), (AGENT, "agent")]:
        svc = service(path, name)
        assert svc["image"] == example_env()["SLUICE_IMAGE"]
        context = (DEPLOY / svc["build"]["context"]).resolve()
        assert context == ROOT
        assert (context / svc["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"


# ---------------------------------------------------------------------------- command lines

SLUICE_SERVICES = [
    (CONTROL, "rm", "rm"),
    (CONTROL, "aggregator", "aggregator"),
    (AGENT, "agent", "agent"),
]


@pytest.mark.parametrize(
    ("path", "name", "command"), SLUICE_SERVICES, ids=[n for _, n, _ in SLUICE_SERVICES]
)
def test_sluice_command_parses_with_the_real_cli(path: Path, name: str, command: str):
    svc = service(path, name)
    args = sluice_args(svc)
    assert args.command == command
    flags = {token for token in svc["command"][2:] if token.startswith("--")}
    assert flags <= option_strings(command), "spelled out, not abbreviated"
    assert args.log_level == example_env()["SLUICE_LOG_LEVEL"]
    data_plane.check_host_port("--listen", args.listen)
    data_plane.check_host_port("--advertise", args.advertise)
    assert host_port(args.listen)[0] == "0.0.0.0"  # reachable from outside its container


def test_the_daemons_accept_their_data_plane_flags():
    rm = sluice_args(service(CONTROL, "rm"))
    aggregator = sluice_args(service(CONTROL, "aggregator"))
    for args in (rm, aggregator):
        plane = data_plane.from_arguments(args)  # checks the MQTT URL as the daemons do
        assert plane.has_kafka and plane.kafka_tls
        assert mqtt_broker(plane.mqtt_url)[0] == "mqtts"
    parse_influx_url(aggregator.influx_url)


def test_the_agent_finds_its_rm():
    agent = sluice_args(service(AGENT, "agent"))
    data_plane.check_host_port("--rm", agent.rm)
    assert agent.runtime == example_env()["SLUICE_RUNTIME"]


def test_rm_hands_out_the_published_addresses_of_this_files_services():
    # The RM only passes these on, to agents and job masters on the workers: they must be the
    # control-plane host's address and a port this file publishes for the right service.
    host = example_env()["SLUICE_HOST"]
    rm = sluice_args(service(CONTROL, "rm"))
    kafka, mosquitto = service(CONTROL, "kafka"), service(CONTROL, "mosquitto")
    aggregator = service(CONTROL, "aggregator")

    kafka_host, kafka_port = host_port(rm.kafka)
    external = listeners(kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"])["EXTERNAL"]
    assert (kafka_host, kafka_port) == external == (host, kafka_port)
    bound = listeners(kafka["environment"]["KAFKA_LISTENERS"])["EXTERNAL"][1]
    assert published(kafka)[bound] == kafka_port

    assert mqtt_broker(rm.mqtt) == ("mqtts", host, published(mosquitto)[8883])

    agg_args = sluice_args(aggregator)
    agg_port = host_port(agg_args.listen)[1]
    assert rm.aggregator == agg_args.advertise == f"{host}:{published(aggregator)[agg_port]}"

    rm_port = host_port(rm.listen)[1]
    assert rm.advertise == f"{host}:{published(service(CONTROL, 'rm'))[rm_port]}"


def test_aggregator_reaches_its_neighbours_by_service_name():
    aggregator = sluice_args(service(CONTROL, "aggregator"))
    kafka = service(CONTROL, "kafka")["environment"]
    internal = listeners(kafka["KAFKA_ADVERTISED_LISTENERS"])["INTERNAL"]
    assert host_port(aggregator.kafka) == internal
    assert internal[0] == "kafka"
    assert listeners(kafka["KAFKA_LISTENERS"])["INTERNAL"][1] == internal[1]

    assert mqtt_broker(aggregator.mqtt) == ("mqtts", "mosquitto", 8883)
    target = parse_influx_url(aggregator.influx_url)
    assert (target.host, target.port) == ("influxdb", 8086)
    assert 8086 in published(service(CONTROL, "influxdb"))
    depends = service(CONTROL, "aggregator")["depends_on"]
    assert {n: d["condition"] for n, d in depends.items()} == dict.fromkeys(
        ("kafka", "mosquitto", "influxdb"), "service_healthy"
    ) | {"certs": "service_completed_successfully"}


def test_kafka_is_a_consistent_single_kraft_node():
    env = service(CONTROL, "kafka")["environment"]
    bound = listeners(env["KAFKA_LISTENERS"])
    protocols = dict(
        item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    assert set(bound) == set(protocols)
    assert set(listeners(env["KAFKA_ADVERTISED_LISTENERS"])) < set(bound)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    node, _, voter = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].partition("@")
    assert node == env["KAFKA_NODE_ID"]
    assert host_port(voter) == bound[controller]
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in bound
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"


# ---------------------------------------------------------------------------- certificates

TLS_TARGET = "/etc/sluice/tls"
# Where each Sluice daemon's TLS directory comes from: made by deploy/certs.sh on the control
# plane, copied to /etc/sluice/tls on a worker.
TLS_SOURCES = {"rm": "./tls/rm", "aggregator": "./tls/aggregator", "agent": TLS_TARGET}


@pytest.mark.parametrize(
    ("path", "name", "command"), SLUICE_SERVICES, ids=[n for _, n, _ in SLUICE_SERVICES]
)
def test_every_sluice_daemon_runs_with_its_tls_dir_mounted_read_only(
    path: Path, name: str, command: str
):
    svc = service(path, name)
    assert "--insecure" not in svc["command"]
    args = sluice_args(svc)
    assert args.tls_dir is not None and not args.insecure
    entries = {target: (source, mode) for source, target, mode in mount_entries(svc)}
    assert entries[args.tls_dir.as_posix()] == (TLS_SOURCES[name], "ro")
    assert health_code(svc)[2] == args.tls_dir.as_posix()  # the check presents it too


def test_the_cli_service_is_an_administrator_dialling_the_published_rm():
    cli = service(CONTROL, "cli")
    env = cli["environment"]
    assert mounts(cli)[env["SLUICE_TLS_DIR"]] == "./tls/admin"
    rm = service(CONTROL, "rm")
    assert env["SLUICE_RM"] == sluice_args(rm).advertise
    assert cli["network_mode"] == "host"  # dials SLUICE_HOST, the address the RM's cert names


def test_only_the_certs_service_mounts_the_ca_and_others_mount_their_own_read_only():
    certs = service(CONTROL, "certs")
    assert mounts(certs)[certs["working_dir"]] == "./tls"
    assert certs["entrypoint"][:2] == ["sh", certs["entrypoint"][1]]
    assert mounts(certs)[certs["entrypoint"][1]] == "./certs.sh"
    assert certs["network_mode"] == "none"
    for path in (CONTROL, AGENT):
        for name, svc in compose(path)["services"].items():
            if name == "certs":
                continue
            for source, _, mode in mount_entries(svc):
                inside_tls = source.startswith("./tls/") or source == TLS_TARGET
                assert source.rstrip("/") not in ("./tls", ".", "..", "/etc/sluice"), name
                assert not source.startswith("./tls/ca"), f"{name} mounts the CA"
                if inside_tls:
                    assert mode == "ro", f"{name}: {source} is mounted {mode}"


def test_services_that_mount_certificates_wait_for_them():
    for name, svc in compose(CONTROL)["services"].items():
        if any(s.startswith("./tls/") for s, _, _ in mount_entries(svc)) and name != "cli":
            assert svc["depends_on"]["certs"] == {"condition": "service_completed_successfully"}


def test_kafka_clients_reach_only_tls_listeners_that_require_a_certificate():
    kafka = service(CONTROL, "kafka")
    env = kafka["environment"]
    protocols = dict(
        item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    bound = listeners(env["KAFKA_LISTENERS"])
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    assert protocols["EXTERNAL"] == protocols["INTERNAL"] == "SSL"
    for name, protocol in protocols.items():
        if protocol != "SSL":  # plaintext only on the container's loopback
            assert bound[name][0] == "127.0.0.1", name
            assert advertised.get(name, bound[name])[0] == "127.0.0.1", name
    assert env["KAFKA_SSL_CLIENT_AUTH"] == "required"
    assert env["KAFKA_SSL_KEYSTORE_TYPE"] == env["KAFKA_SSL_TRUSTSTORE_TYPE"] == "PEM"
    tls_dir = next(t for s, t, m in mount_entries(kafka) if s == "./tls/kafka" and m == "ro")
    assert env["KAFKA_SSL_KEYSTORE_LOCATION"] == f"{tls_dir}/keystore.pem"
    assert env["KAFKA_SSL_TRUSTSTORE_LOCATION"] == f"{tls_dir}/{tls.CA_CERT}"
    # The image's own SSL set-up (JKS files and password files) runs for an "SSL://" listener.
    assert "SSL://" not in env["KAFKA_ADVERTISED_LISTENERS"]
    # Its health check stays on the loopback listener.
    check = kafka["healthcheck"]["test"]
    assert host_port(check[check.index("--bootstrap-server") + 1])[0] == "127.0.0.1"


def test_both_sluice_daemons_speak_tls_to_the_brokers():
    for name in ("rm", "aggregator"):
        command = service(CONTROL, name)["command"]
        assert "--kafka-tls" in command
        assert mqtt_broker(command[command.index("--mqtt") + 1])[0] == "mqtts"


def test_mosquitto_listens_only_with_tls_and_requires_a_certificate():
    settings = mosquitto_settings()
    assert settings["listener"] == ["8883"]  # one listener, every address
    assert settings["require_certificate"] == ["true"]
    assert settings["allow_anonymous"] == ["false"]
    mosquitto = service(CONTROL, "mosquitto")
    assert published(mosquitto) == {8883: 8883}
    assert "./mosquitto.conf:/mosquitto/config/mosquitto.conf:ro" in mosquitto["volumes"]
    tls_dir = next(t for s, t, m in mount_entries(mosquitto) if s == "./tls/mosquitto")
    files = {key: settings[key] for key in ("cafile", "certfile", "keyfile")}
    assert files == {
        "cafile": [f"{tls_dir}/{tls.CA_CERT}"],
        "certfile": [f"{tls_dir}/{tls.CERT}"],
        "keyfile": [f"{tls_dir}/{tls.KEY}"],
    }
    check = mosquitto["healthcheck"]["test"]
    assert check[check.index("-p") + 1] == "8883"
    for flag, key in (("--cafile", "cafile"), ("--cert", "certfile"), ("--key", "keyfile")):
        assert [check[check.index(flag) + 1]] == settings[key]


# ---------------------------------------------------------------------------- certs.sh, run

# What each control-plane directory must hold: (role, hosts its certificate must name).
ISSUED = {
    "rm": ("rm", ["SLUICE_HOST"]),
    "aggregator": ("aggregator", ["SLUICE_HOST", "aggregator"]),
    "kafka": ("broker", ["SLUICE_HOST", "kafka"]),
    "mosquitto": ("broker", ["SLUICE_HOST", "mosquitto"]),
    "admin": ("admin", []),
}


class CertsScript:
    """deploy/certs.sh run as the ``certs`` service runs it (in the TLS root, with SLUICE_HOST),
    with this checkout's ``sluice`` and ``python``, and a ``chown`` that only records.  Made
    from ``issued`` (a copy of its TLS root), it starts where that one is."""

    def __init__(self, root: Path, issued: CertsScript | None = None) -> None:
        self.tls = root / "tls"
        if issued is None:
            self.tls.mkdir()
        else:
            shutil.copytree(issued.tls, self.tls)  # modes too
        self.chowns = root / "chown.log"
        bin_dir = root / "bin"
        bin_dir.mkdir()
        stubs = {
            "sluice": f'exec {sys.executable} -m sluice "$@"',
            "python": f'exec {sys.executable} "$@"',
            "chown": f'echo "$*" >>{self.chowns}',
        }
        for name, body in stubs.items():
            (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
            (bin_dir / name).chmod(0o755)
        self.env = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT),
            "SLUICE_HOST": example_env()["SLUICE_HOST"],
        }

    def __call__(self, *args: str, host: str | None = None) -> subprocess.CompletedProcess[str]:
        env = self.env | ({"SLUICE_HOST": host} if host else {})
        return subprocess.run(
            ["sh", str(CERTS_SCRIPT), *args],
            cwd=self.tls,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture(scope="module")
def issued(tmp_path_factory: pytest.TempPathFactory) -> CertsScript:
    """certs.sh run once, as by the first `docker compose up`."""
    script = CertsScript(tmp_path_factory.mktemp("certs"))
    result = script()
    assert result.returncode == 0, result.stderr
    return script


@pytest.fixture
def certs(tmp_path: Path, issued: CertsScript) -> CertsScript:
    """A copy of ``issued``, for a test to change."""
    return CertsScript(tmp_path, issued)


def names(directory: Path) -> set[str]:
    """The DNS names and IP addresses a TLS directory's certificate names."""
    certificate = x509.load_pem_x509_certificate((directory / tls.CERT).read_bytes())
    san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(san.get_values_for_type(x509.DNSName)) | {
        str(address) for address in san.get_values_for_type(x509.IPAddress)
    }


def walk(root: Path) -> Iterator[Path]:
    yield root
    yield from root.rglob("*")


def test_certs_makes_what_every_service_mounts_and_nothing_is_readable_by_others(
    issued: CertsScript,
):
    certs = issued
    host = example_env()["SLUICE_HOST"]
    for directory, (role, hosts) in ISSUED.items():
        loaded = tls.load_tls_dir(certs.tls / directory)
        assert loaded.identity == Identity(Role(role), directory)
        wanted = {host if h == "SLUICE_HOST" else h for h in hosts}
        assert wanted <= names(certs.tls / directory), directory
    tls.load_job_master_ca(certs.tls / "rm")  # the RM issues job masters' certificates with it
    for path in (CONTROL, AGENT):
        for svc in compose(path)["services"].values():
            for source, _, _ in mount_entries(svc):
                if source.startswith("./tls/"):
                    assert (certs.tls / source.removeprefix("./tls/")).is_dir(), source
    kafka = certs.tls / "kafka"
    keystore = (kafka / "keystore.pem").read_bytes()
    assert keystore == (kafka / tls.KEY).read_bytes() + (kafka / tls.CERT).read_bytes()
    for found in walk(certs.tls):
        mode = stat.S_IMODE(found.stat().st_mode)
        assert mode & 0o077 == 0, f"{found}: mode {mode:o}"
    # The brokers read their keys as their images' users (Mosquitto 2 after dropping root).
    assert certs.chowns.read_text().splitlines() == ["-R 1000:1000 kafka", "-R 1883:1883 mosquitto"]


def test_certs_is_idempotent_and_checks_what_it_finds(certs: CertsScript):
    before = {p: p.read_bytes() for p in certs.tls.rglob("tls.crt")}
    again = certs()
    assert again.returncode == 0, again.stderr
    assert {p: p.read_bytes() for p in certs.tls.rglob("tls.crt")} == before
    moved = certs(host="10.9.9.9")
    assert moved.returncode == 1
    assert "rm/tls.crt: does not name SLUICE_HOST 10.9.9.9" in moved.stderr
    shutil.rmtree(certs.tls / "ca")
    lost = certs()
    assert lost.returncode == 1
    assert "ca/ca.crt: missing, but rm/ holds certificates of a CA" in lost.stderr


def test_a_rotated_certificate_is_issued_anew_and_the_others_kept(certs: CertsScript):
    kept = (certs.tls / "aggregator" / tls.CERT).read_bytes()
    (certs.tls / "rm").rename(certs.tls / "rm.old")
    result = certs()
    assert result.returncode == 0, result.stderr
    new = tls.load_tls_dir(certs.tls / "rm")
    assert new.cert_pem != tls.load_tls_dir(certs.tls / "rm.old").cert_pem
    assert (certs.tls / "aggregator" / tls.CERT).read_bytes() == kept


# (case, arguments, exit status, what it says or the directory it issues)
CERTS_COMMANDS = [
    ("an agent", ["agent", "worker-1", "10.0.0.21"], 0, "agents/worker-1"),
    ("an agent without a host", ["agent", "worker-1"], 1, "usage: agent NODE_ID HOST"),
    ("a client", ["client", "alice"], 0, "people/alice"),
    ("an admin", ["admin", "carol"], 0, "people/carol"),
    ("a bad name", ["client", "a/b"], 2, "must be 1-63 letters"),
    ("something else", ["rm"], 1, "rm: unknown"),
]


@pytest.mark.parametrize(
    ("args", "status", "outcome"),
    [c[1:] for c in CERTS_COMMANDS],
    ids=[c[0] for c in CERTS_COMMANDS],
)
def test_certs_issues_a_workers_or_a_persons_certificate(
    certs: CertsScript, args: list[str], status: int, outcome: str
):
    result = certs(*args)
    assert result.returncode == status, result.stderr
    if status != 0:
        assert outcome in result.stderr
        return
    loaded = tls.load_tls_dir(certs.tls / outcome)
    assert loaded.identity == Identity(Role(args[0]), args[1])
    assert set(args[2:]) <= names(certs.tls / outcome)
    twice = certs(*args)
    assert twice.returncode == 1
    assert f"{outcome}: exists already" in twice.stderr


# ---------------------------------------------------------------------------- the agent


def test_agent_runs_on_the_host():
    agent = service(AGENT, "agent")
    assert agent["network_mode"] == "host"
    assert agent["pid"] == "host"
    assert agent["cgroup"] == "host"
    assert agent["privileged"] is True
    found = mounts(agent)
    assert found["/sys/fs/cgroup"] == "/sys/fs/cgroup"
    assert found["/var/run/docker.sock"] == "/var/run/docker.sock"
    state_dir = sluice_args(agent).state_dir.as_posix()
    assert found[state_dir] == state_dir


def test_agent_is_named_by_the_environment_and_finds_the_published_rm():
    command = raw(AGENT)["services"]["agent"]["command"]
    assert command[command.index("--rm") + 1].startswith("${SLUICE_RM")
    assert command[command.index("--node-id") + 1].startswith("${HOSTNAME")
    args = sluice_args(service(AGENT, "agent"))
    assert args.node_id == SHELL_ENV["HOSTNAME"]
    rm = service(CONTROL, "rm")
    rm_port = host_port(sluice_args(rm).listen)[1]
    assert args.rm == f"{example_env()['SLUICE_HOST']}:{published(rm)[rm_port]}"
    assert host_port(args.advertise) == (
        example_env()["SLUICE_NODE_HOST"],
        host_port(args.listen)[1],
    )


# ---------------------------------------------------------------------------- health checks


def run_health_check(code: str, address: str, tls_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, address, str(tls_dir)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sluice_services_share_one_health_check_aimed_at_their_own_port():
    codes = set()
    for path, name, _ in SLUICE_SERVICES:
        svc = service(path, name)
        code, address, _ = health_code(svc)
        codes.add(code)
        assert address == f"127.0.0.1:{host_port(sluice_args(svc).listen)[1]}"
    assert len(codes) == 1
    assert "insecure_channel" not in codes.pop()


@pytest.fixture(scope="module")
def health_pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cluster CA with an RM's TLS directory (``rm``), the same RM certificate expired
    (``expired``), and an RM of another CA (``stranger``)."""
    root = tmp_path_factory.mktemp("health-pki")
    tls.init_ca(root / "ca", "lab")
    authority = tls.load_ca(root / "ca")
    rm = Identity(Role.RM, "rm")
    tls.issue(authority, rm, root / "rm")
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    tls.issue(authority, rm, root / "expired", days=1, now=past)
    tls.init_ca(root / "other-ca", "other")
    tls.issue(tls.load_ca(root / "other-ca"), rm, root / "stranger")
    return root


SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# (case, the server's TLS directory or None for plaintext or "gone", its status, the check's
# TLS directory, what the check says: "" for success)
HEALTH = [
    ("serving", "rm", SERVING, "rm", ""),
    ("not serving", "rm", NOT_SERVING, "rm", "NOT_SERVING"),
    ("nothing listens", "gone", SERVING, "rm", "UNAVAILABLE"),
    ("a plaintext server", None, SERVING, "rm", "UNAVAILABLE"),
    ("a server of another CA", "stranger", SERVING, "rm", "UNAVAILABLE"),
    ("an expired certificate", "rm", SERVING, "expired", "expired on"),
    ("no TLS directory", "rm", SERVING, "nowhere", "is not a directory"),
]


@pytest.mark.parametrize(
    ("server_tls", "status", "check_tls", "says"),
    [case[1:] for case in HEALTH],
    ids=[case[0] for case in HEALTH],
)
def test_health_check_reads_a_sluice_servers_status_over_mutual_tls(
    health_pki: Path, server_tls: str | None, status: int, check_tls: str, says: str
):
    code, _, _ = health_code(service(CONTROL, "rm"))
    loaded = None if server_tls in (None, "gone") else tls.load_tls_dir(health_pki / server_tls)
    server, port, health = start_server([], "127.0.0.1:0", tls=loaded, access={})
    try:
        if server_tls == "gone":
            server.stop(grace=None).wait()
        health.set("", status)
        result = run_health_check(code, f"127.0.0.1:{port}", health_pki / check_tls)
    finally:
        server.stop(grace=None)
    assert (result.returncode == 0) is (says == ""), result.stderr
    assert says in result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------- image and docs


def test_dockerfile_installs_every_package_pyproject_names():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", dockerfile, re.MULTILINE)
    assert "busybox-static" in dockerfile
    assert re.search(r"pip install .* \.\s", dockerfile)
    copied = {
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY ")
        for source in line.split()[1:-1]
    }
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert packages | {"pyproject.toml", pyproject["project"]["readme"]} <= copied
    assert all((ROOT / source).exists() for source in copied)


def test_readme_explains_every_variable_and_owns_up_to_being_unrun():
    readme = (DEPLOY / "README.md").read_text()
    for name in read_env_file(ENV_EXAMPLE).keys() | SHELL_ENV.keys():
        assert f"`{name}`" in readme, name
    assert "not run" in readme


# ---------------------------------------------------------------------------- docker compose


# What Compose v1 (Debian bookworm's ``docker-compose`` 1.29) refuses and v2 needs: the project
# name at the top and the agent's ``cgroup: host`` (deploy/README.md, "Before you start").
V1_UNKNOWN_TOP_LEVEL = ("name",)
V1_UNKNOWN_SERVICE_KEYS = ("cgroup",)


def find_compose() -> tuple[list[str], int] | None:
    """The newest Docker Compose installed, as ``(command, major version)``: ``docker compose``
    (the v2 plugin), ``docker-compose`` on the PATH or next to this Python."""
    candidates: list[list[str]] = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    for found in (shutil.which("docker-compose"), Path(sys.executable).parent / "docker-compose"):
        if found and Path(found).exists():
            candidates.append([str(found)])
    best: tuple[list[str], int] | None = None
    for command in candidates:
        try:
            version = subprocess.run(
                [*command, "version", "--short"],
                check=False,
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        match = re.match(r"v?(\d+)\.\d+", version)
        if match and (best is None or int(match[1]) > best[1]):
            best = (command, int(match[1]))
    return best


def without_v2_keys(path: Path) -> str:
    """The file as YAML without what v1 does not know (and not interpolated: Compose does)."""
    document = raw(path)
    for key in V1_UNKNOWN_TOP_LEVEL:
        document.pop(key, None)
    for svc in document["services"].values():
        for key in V1_UNKNOWN_SERVICE_KEYS:
            svc.pop(key, None)
    return yaml.safe_dump(document, sort_keys=False)


def compose_env() -> dict[str, str]:
    """This process's environment without the variables the files use, plus the worker's
    shell's: an exported SLUICE_RM would otherwise override the example's."""
    used = read_env_file(ENV_EXAMPLE).keys() | SHELL_ENV.keys()
    return {k: v for k, v in os.environ.items() if k not in used} | SHELL_ENV


ComposeConfig = Callable[[Path], dict[str, Any]]


@pytest.fixture(scope="module")
def compose_config(tmp_path_factory: pytest.TempPathFactory) -> ComposeConfig:
    found = find_compose()
    if found is None:
        reason = "Docker Compose is not installed (`docker compose` or `docker-compose`)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    command, major = found
    copies = tmp_path_factory.mktemp("compose-v1")

    def run(arguments: list[str]) -> str:
        result = subprocess.run(
            [*command, "--env-file", str(ENV_EXAMPLE), *arguments],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            env=compose_env(),
            cwd=DEPLOY,
        )
        assert result.returncode == 0, result.stderr
        # The normalised model on stdout, not the exit status alone: some wrappers lose it.
        assert result.stdout.strip(), result.stderr
        return result.stdout

    def config(path: Path) -> dict[str, Any]:
        if major >= 2:
            printed = json.loads(run(["-f", str(path), "config", "--format", "json"]))
        else:
            # v1 reads a copy without the v2-only keys, with this directory as the project's
            # (relative paths resolve as for the file itself), and prints YAML.
            copy = copies / path.name
            copy.write_text(without_v2_keys(path))
            printed = yaml.safe_load(
                run(["--project-directory", str(DEPLOY), "-f", str(copy), "config"])
            )
        # Compose prints a valid compose file, so every "$" of a value comes out as "$$".
        model = interpolate_all(printed, {})
        assert isinstance(model, dict)
        return model

    return config


@pytest.mark.parametrize("path", [CONTROL, AGENT], ids=lambda p: p.name)
def test_docker_compose_accepts_the_file_as_these_tests_read_it(
    compose_config: ComposeConfig, path: Path
):
    model = compose_config(path)
    ours = compose(path)["services"]
    assert set(model["services"]) == set(ours)
    for name, svc in ours.items():
        theirs = model["services"][name]
        assert theirs.get("command") == svc.get("command"), name
        assert theirs.get("entrypoint") == svc.get("entrypoint"), name
        assert theirs.get("healthcheck", {}).get("test") == svc.get("healthcheck", {}).get(
            "test"
        ), name
