"""deploy/certs.sh, run for real as the one-shot ``certs`` service runs it: in the TLS root
(deploy/tls), with this checkout's ``sluice`` and ``python`` first on the PATH.  It makes every
TLS directory the compose file mounts, each certificate naming what its clients dial, keys 0600
in directories 0700; it is idempotent, refuses a SLUICE_HOST its certificates do not name and
a lost CA; it issues agents', people's and administrators' certificates.  Mosquitto's directory
is handed to the ``mosquitto`` user (really where this runs as root and the user exists, else
a ``chown`` that records)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from plumbing import tls
from plumbing.tls import Identity, Role
from tests.unit.deploy.deployment import (
    CONTROL,
    DEPLOY,
    ROOT,
    clean_env,
    compose,
    mount_entries,
)


def _real_chown() -> bool:
    try:
        pwd.getpwnam("mosquitto")
    except KeyError:
        return False
    return os.geteuid() == 0


REAL_CHOWN = _real_chown()


class CertsScript:
    """deploy/certs.sh in ``root/tls``; made from ``start`` (a copy of its TLS root, modes and
    owners too), it starts where that one is."""

    def __init__(self, root: Path, host: str, start: CertsScript | None = None) -> None:
        self.tls = root / "tls"
        self.host = host
        if start is None:
            self.tls.mkdir()
        else:  # modes, and owners too (the mosquitto user's directory)
            shutil.copytree(start.tls, self.tls)
            for found in walk(start.tls):
                os.chown(self.tls / found.relative_to(start.tls), *_owner(found))
        self.chowns = root / "chown.log"
        bin_dir = root / "bin"
        bin_dir.mkdir()
        if not REAL_CHOWN:
            (bin_dir / "chown").write_text(f'#!/bin/sh\necho "$*" >>{self.chowns}\n')
            (bin_dir / "chown").chmod(0o755)
        self.path = f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"

    def __call__(self, *args: str, host: str | None = None) -> subprocess.CompletedProcess[str]:
        env = clean_env(PATH=self.path, PYTHONPATH=str(ROOT), SLUICE_HOST=host or self.host)
        return subprocess.run(
            ["bash", str(DEPLOY / "certs.sh"), *args],
            cwd=self.tls,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


def _owner(path: Path) -> tuple[int, int]:
    status = path.stat()
    return status.st_uid, status.st_gid


# SLUICE_HOST as .env.example has it, and a host serving other machines by name.
HOSTS = ["127.0.0.1", "ctl.lab.example"]


@pytest.fixture(scope="module", params=HOSTS)
def issued(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> CertsScript:
    """certs.sh run once, as by the first `compose.sh up`."""
    script = CertsScript(tmp_path_factory.mktemp("certs"), request.param)
    result = script()
    assert result.returncode == 0, result.stderr
    return script


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> CertsScript:
    script = CertsScript(tmp_path_factory.mktemp("template"), HOSTS[0])
    result = script()
    assert result.returncode == 0, result.stderr
    return script


@pytest.fixture
def certs(tmp_path: Path, template: CertsScript) -> CertsScript:
    """A copy of a control plane's TLS root, for a test to change."""
    return CertsScript(tmp_path, HOSTS[0], template)


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


# Each control-plane directory: (role, name, what its certificate must name besides localhost
# and 127.0.0.1; "HOST" is SLUICE_HOST, for the published ports).
CONTROL_PLANE = {
    "rm": ("rm", "rm", {"rm", "HOST"}),
    "aggregator": ("aggregator", "aggregator", {"aggregator", "HOST"}),
    "mosquitto": ("broker", "mosquitto", {"mosquitto", "HOST"}),
    "kafka": ("broker", "kafka", {"kafka", "HOST"}),  # lab mode: Tansu advertises SLUICE_HOST
    "influxdb": ("broker", "influxdb", {"influxdb"}),
    "admin": ("admin", "admin", set()),
}


@pytest.mark.parametrize("directory", list(CONTROL_PLANE))
def test_each_certificate_names_what_its_clients_dial(issued: CertsScript, directory: str):
    role, name, wanted = CONTROL_PLANE[directory]
    loaded = tls.load_tls_dir(issued.tls / directory)
    assert loaded.identity == Identity(Role(role), name)
    expected = {issued.host if h == "HOST" else h for h in wanted} | {"localhost", "127.0.0.1"}
    assert names(issued.tls / directory) == expected


def test_certs_makes_every_directory_the_compose_file_mounts(issued: CertsScript):
    for svc in compose(CONTROL)["services"].values():
        for source, _, _ in mount_entries(svc):
            if source.startswith("./tls/"):
                assert (issued.tls / source.removeprefix("./tls/") / tls.CERT).is_file(), source
    tls.load_job_master_ca(issued.tls / "rm")  # the RM issues job masters' certificates with it


def test_keys_are_0600_in_directories_0700_and_mosquitto_owns_its_own(issued: CertsScript):
    for found in walk(issued.tls):
        mode = stat.S_IMODE(found.stat().st_mode)
        if found.is_dir():
            assert mode == 0o700, f"{found}: mode {mode:o}"
        elif found.name.endswith(".key"):
            assert mode == 0o600, f"{found}: mode {mode:o}"
        assert mode & 0o077 == 0, f"{found}: mode {mode:o}"
    # Mosquitto reads its key as the user it drops to.
    if REAL_CHOWN:
        user = pwd.getpwnam("mosquitto")
        for found in walk(issued.tls / "mosquitto"):
            assert _owner(found) == (user.pw_uid, user.pw_gid), found
    else:
        assert issued.chowns.read_text().splitlines() == ["-R mosquitto:mosquitto mosquitto"]


def test_certs_is_idempotent(certs: CertsScript):
    before = {p: p.read_bytes() for p in certs.tls.rglob("*") if p.is_file()}
    again = certs()
    assert again.returncode == 0, again.stderr
    assert {p: p.read_bytes() for p in certs.tls.rglob("*") if p.is_file()} == before
    assert "a new cluster CA" not in again.stderr


def test_certs_refuses_a_sluice_host_its_certificates_do_not_name(certs: CertsScript):
    moved = certs(host="10.9.9.9")
    assert moved.returncode == 1
    assert "rm/tls.crt: does not name SLUICE_HOST 10.9.9.9" in moved.stderr
    assert certs(host="localhost").returncode == 0  # named: published ports on this host


def test_certs_refuses_to_start_a_new_ca_beside_certificates_of_another(certs: CertsScript):
    shutil.rmtree(certs.tls / "ca")
    lost = certs()
    assert lost.returncode == 1
    assert "ca/ca.crt: missing, but rm/ holds certificates of a CA" in lost.stderr
    assert not (certs.tls / "ca").exists()


def test_a_rotated_certificate_is_issued_anew_and_the_others_kept(certs: CertsScript):
    kept = (certs.tls / "aggregator" / tls.CERT).read_bytes()
    (certs.tls / "rm").rename(certs.tls / "rm.old")
    result = certs()
    assert result.returncode == 0, result.stderr
    new = tls.load_tls_dir(certs.tls / "rm")
    assert new.cert_pem != tls.load_tls_dir(certs.tls / "rm.old").cert_pem
    assert (certs.tls / "aggregator" / tls.CERT).read_bytes() == kept


# (case, arguments, exit status, the directory it issues or what it says)
CERTS_COMMANDS = [
    ("an agent", ["agent", "worker-1"], 0, "agents/worker-1"),
    ("an agent with a host", ["agent", "worker-2", "10.0.0.22"], 0, "agents/worker-2"),
    ("a client", ["client", "alice"], 0, "people/alice"),
    ("an admin", ["admin", "carol"], 0, "people/carol"),
    ("an agent without a node", ["agent"], 1, "usage: agent NODE_ID"),
    ("a node id that is no DNS label", ["agent", "Worker_1"], 1, "a node id here is a DNS label"),
    ("a client without a name", ["client"], 1, "usage: client NAME"),
    ("a bad client name", ["client", "a/b"], 2, "must be 1-63 letters"),  # sluice ca
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
    if status != 0:
        assert result.returncode == status, result.stderr
        assert outcome in result.stderr
        assert not (certs.tls / "people").exists() and not (certs.tls / "agents").exists()
        return
    assert result.returncode == 0, result.stderr
    loaded = tls.load_tls_dir(certs.tls / outcome)
    assert loaded.identity == Identity(Role(args[0]), args[1])
    if args[0] == "agent":  # its name on the compose network, and any host it is given
        assert {args[1], *args[2:]} <= names(certs.tls / outcome)
    for found in walk(certs.tls / outcome):
        assert stat.S_IMODE(found.stat().st_mode) & 0o077 == 0, found
    twice = certs(*args)
    assert twice.returncode == 1
    assert f"{outcome}: exists already" in twice.stderr
