"""deploy/ as the deploy tests read it: its compose files interpolated as Compose does, worker
files written by the real deploy/add-worker.sh (in a copy of deploy/, with a stub compose.sh,
so that no Docker is needed), and small readers of services' ports, mounts and commands."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sluice.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
CONTROL = DEPLOY / "docker-compose.yml"
ENV_EXAMPLE = DEPLOY / ".env.example"
ENTRYPOINTS = DEPLOY / "entrypoints"
TLS_TARGET = "/etc/sluice/tls"


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
    return read_env_file(ENV_EXAMPLE)


def raw(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text())
    assert isinstance(document, dict), path
    return document


def compose(path: Path) -> dict[str, Any]:
    """The compose file with the example's values substituted."""
    document = interpolate_all(raw(path), example_env())
    assert isinstance(document, dict)
    return document


def published(svc: Mapping[str, Any]) -> dict[int, str]:
    """Container port -> ``HOST_IP:HOST_PORT``, from the short ``IP:HOST:CONTAINER`` syntax."""
    ports = {}
    for entry in svc.get("ports", []):
        address, _, container = str(entry).rpartition(":")
        ports[int(container)] = address
    return ports


def mount_entries(svc: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(source, target, mode)`` of each short-syntax mount; mode "rw" when not given."""
    found = []
    for entry in svc.get("volumes", []):
        source, target, *mode = str(entry).split(":")
        found.append((source, target, mode[0] if mode else "rw"))
    return found


def mounts(svc: Mapping[str, Any]) -> dict[str, str]:
    """Mount target -> source."""
    return {target: source for source, target, _ in mount_entries(svc)}


def sluice_command(svc: Mapping[str, Any]) -> list[str]:
    """The ``sluice ...`` a service runs: its command, or, for a worker, its entrypoint
    (sluice-agent-entrypoint runs ``sluice agent ARGS``) with its command."""
    if svc.get("entrypoint") == ["sluice-agent-entrypoint"]:
        return ["sluice", "agent", *svc["command"]]
    command = list(svc["command"])
    assert command[0] == "sluice", command
    return command


def sluice_args(svc: Mapping[str, Any]) -> Any:
    """The service's ``sluice`` command line parsed by the real CLI parser (argparse exits on
    an error, which fails the test)."""
    return build_parser().parse_args(sluice_command(svc)[1:])


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would change what deploy/ does: Compose's and
    the deployment's variables (an exported one would override .env)."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("COMPOSE_", "SLUICE_"))
    }
    return kept | extra


# What the stub compose.sh answers `run --rm -T cli sluice nodes --json` with: every worker
# file's and remote bundle's name, READY, so add-worker.sh's wait ends at once.
_STUB_COMPOSE = """#!/bin/bash
here=$(cd "$(dirname "$0")" && pwd)
echo "$*" >>"$here/compose.calls"
case "$*" in
*"sluice nodes --json"*)
    nodes=""
    for file in "$here"/workers/*.yml "$here"/remote/*/.env; do
        [ -e "$file" ] || continue
        name=$(basename "$file" .yml)
        [ "$name" != .env ] || name=$(basename "$(dirname "$file")")
        nodes="$nodes{\\"node_id\\": \\"$name\\", \\"state\\": \\"READY\\"},"
    done
    echo "[${nodes%,}]"
    ;;
esac
"""


class DeployCopy:
    """A copy of deploy/ (without tls/, .env, workers/ and the image's build context) in
    ``root``, to run its scripts in: ``add_worker`` runs the real add-worker.sh with a stub
    compose.sh that records its calls (``calls``), ``compose`` the real compose.sh."""

    def __init__(self, root: Path) -> None:
        self.path = root / "deploy"
        shutil.copytree(
            DEPLOY,
            self.path,
            ignore=shutil.ignore_patterns("tls", ".env", ".build", "workers"),
        )
        self.real_compose = (self.path / "compose.sh").read_text()

    def add_worker(self, *args: str) -> subprocess.CompletedProcess[str]:
        script = self.path / "compose.sh"
        script.write_text(_STUB_COMPOSE)
        try:
            return subprocess.run(
                [str(self.path / "add-worker.sh"), *args],
                env=clean_env(),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            script.write_text(self.real_compose)

    @property
    def calls(self) -> list[str]:
        log = self.path / "compose.calls"
        return log.read_text().splitlines() if log.exists() else []

    def worker(self, name: str) -> Path:
        return self.path / "workers" / f"{name}.yml"

    def compose(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The real compose.sh (Compose v2 or v1, whichever is installed)."""
        return subprocess.run(
            [str(self.path / "compose.sh"), *args],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def worker_service(copy: DeployCopy, name: str) -> dict[str, Any]:
    """Worker NAME's agent service, interpolated with the example's values."""
    found = compose(copy.worker(name))["services"][f"agent-{name}"]
    assert isinstance(found, dict)
    return found
