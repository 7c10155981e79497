"""Cluster certificates: the CA, issued certificates, TLS directories and mutual TLS on a real
gRPC server."""

from __future__ import annotations

import datetime
import stat
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from plumbing import tls
from plumbing.tls import Identity, Role, TlsError

NOW = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def ca_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("ca")
    tls.init_ca(directory, "lab")
    return directory


def issued(ca_dir: Path, out: Path, role: Role = Role.AGENT, name: str = "node-1") -> Path:
    tls.issue(tls.load_ca(ca_dir), Identity(role, name), out, hosts=["node-1.lab", "10.0.0.7"])
    return out


# ------------------------------------------------------------------------------ identities


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("sluice://agent/node-1", Identity(Role.AGENT, "node-1")),
        ("sluice://client/alice", Identity(Role.CLIENT, "alice")),
        ("sluice://admin/bob.smith", Identity(Role.ADMIN, "bob.smith")),
        ("sluice://root/alice", None),  # no such role
        ("sluice://client/", None),
        ("sluice://client/a/b", None),  # a name has no slash
        ("https://client/alice", None),
        ("sluice://client/../rm", None),
    ],
)
def test_identity_uris(uri: str, expected: Identity | None) -> None:
    assert tls.parse_identity_uri(uri) == expected
    if expected is not None:
        assert expected.uri == uri


def test_an_issued_certificate_names_its_role_identity_and_hosts(ca_dir: Path, tmp_path: Path):
    out = issued(ca_dir, tmp_path / "agent")
    loaded = tls.load_tls_dir(out)
    assert loaded.identity == Identity(Role.AGENT, "node-1")
    certificate = x509.load_pem_x509_certificate(loaded.cert_pem)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"node-1.lab", "localhost"}
    assert {str(a) for a in names.get_values_for_type(x509.IPAddress)} == {"10.0.0.7", "127.0.0.1"}
    assert tls.identity_of_pem(loaded.cert_pem) == loaded.identity
    # The key is the holder's alone, from the moment it exists.
    assert stat.S_IMODE((out / tls.KEY).stat().st_mode) == 0o600
    assert stat.S_IMODE((ca_dir / tls.CA_KEY).stat().st_mode) == 0o600


def test_a_certificate_ends_no_later_than_its_ca(ca_dir: Path, tmp_path: Path):
    result = tls.issue(
        tls.load_ca(ca_dir), Identity(Role.CLIENT, "alice"), tmp_path / "c", days=100 * 365
    )
    assert result.not_after <= tls.load_ca(ca_dir).certificate.not_valid_after_utc


# ------------------------------------------------------------------------------ refusals


def test_nothing_is_overwritten(ca_dir: Path, tmp_path: Path):
    with pytest.raises(TlsError, match="a CA exists already"):
        tls.init_ca(ca_dir, "lab")
    out = issued(ca_dir, tmp_path / "agent")
    with pytest.raises(TlsError, match="exists already"):
        issued(ca_dir, out)


@pytest.mark.parametrize(
    ("name", "field"),
    [("", "name"), ("a/b", "name"), ("-x", "name"), ("x" * 64, "name")],
)
def test_bad_names_are_refused_naming_the_field(
    ca_dir: Path, tmp_path: Path, name: str, field: str
):
    with pytest.raises(TlsError, match=f"^{field}: "):
        tls.issue(tls.load_ca(ca_dir), Identity(Role.CLIENT, name), tmp_path / "x")
    assert not (tmp_path / "x").exists()  # nothing half-created


def test_bad_hosts_and_days_are_refused(ca_dir: Path, tmp_path: Path):
    authority = tls.load_ca(ca_dir)
    with pytest.raises(TlsError, match=r"^host: 'no spaces allowed'"):
        tls.issue(authority, Identity(Role.RM, "rm"), tmp_path / "a", hosts=["no spaces allowed"])
    with pytest.raises(TlsError, match=r"^days: must be positive"):
        tls.issue(authority, Identity(Role.RM, "rm"), tmp_path / "b", days=0)


def _break_missing(directory: Path, other: Path) -> None:
    (directory / tls.KEY).unlink()


def _break_key(directory: Path, other: Path) -> None:
    (directory / tls.KEY).write_bytes((other / tls.KEY).read_bytes())


def _break_ca(directory: Path, other: Path) -> None:
    (directory / tls.CA_CERT).write_bytes((other / tls.CA_CERT).read_bytes())


def _break_garbage(directory: Path, other: Path) -> None:
    (directory / tls.CERT).write_text("not a certificate")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_break_missing, r"tls\.key: missing"),
        (_break_key, r"tls\.key: does not match .*tls\.crt"),
        (_break_ca, r"tls\.crt: not issued by .*ca\.crt"),
        (_break_garbage, r"tls\.crt: not a PEM certificate"),
    ],
    ids=["missing key", "another key", "another CA", "garbage"],
)
def test_a_broken_tls_dir_is_refused_in_one_line(
    ca_dir: Path, tmp_path: Path, damage: object, message: str
):
    other_ca = tmp_path / "other-ca"
    tls.init_ca(other_ca, "elsewhere")
    other = issued(other_ca, tmp_path / "other")
    directory = issued(ca_dir, tmp_path / "mine")
    damage(directory, other)  # type: ignore[operator]
    with pytest.raises(TlsError, match=message) as caught:
        tls.load_tls_dir(directory)
    assert "\n" not in str(caught.value)


def test_an_expired_or_not_yet_valid_certificate_is_refused(ca_dir: Path, tmp_path: Path):
    out = tmp_path / "c"
    tls.issue(tls.load_ca(ca_dir), Identity(Role.CLIENT, "alice"), out, days=1, now=NOW)
    assert tls.load_tls_dir(out, now=NOW).identity.name == "alice"
    with pytest.raises(TlsError, match="expired on 2026-11-24"):
        tls.load_tls_dir(out, now=NOW + datetime.timedelta(days=2))
    with pytest.raises(TlsError, match="not valid before"):
        tls.load_tls_dir(out, now=NOW - datetime.timedelta(days=1))


def test_a_directory_that_is_not_one_is_refused(tmp_path: Path):
    with pytest.raises(TlsError, match=r"^--tls-dir: .* is not a directory"):
        tls.load_tls_dir(tmp_path / "nowhere")


# ------------------------------------------------------------------------------ mutual TLS


_ECHO = "/sluice.test.Echo/Who"


def _who_handler() -> grpc.GenericRpcHandler:
    """A method that answers with the caller's identity, as the server sees it."""

    def who(request: bytes, context: grpc.ServicerContext) -> bytes:
        identity = tls.peer_identity(context.auth_context())
        return (identity.uri if identity else "anonymous").encode()

    return grpc.method_handlers_generic_handler(
        "sluice.test.Echo",
        {
            "Who": grpc.unary_unary_rpc_method_handler(
                who, request_deserializer=None, response_serializer=None
            )
        },
    )


@pytest.fixture
def tls_server(ca_dir: Path, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    rm = issued(ca_dir, tmp_path / "rm", Role.RM, "rm")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((_who_handler(),))
    credentials = tls.server_credentials(tls.load_tls_dir(rm), require_client_cert=True)
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    yield port, rm
    server.stop(grace=None)


def _call(port: int, credentials: grpc.ChannelCredentials | None) -> str:
    target = f"localhost:{port}"
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    with channel:
        answer = channel.unary_unary(_ECHO)(b"", timeout=10)
    return bytes(answer).decode()


def test_a_client_with_a_certificate_of_the_cluster_is_known_by_its_identity(
    ca_dir: Path, tmp_path: Path, tls_server: tuple[int, Path]
):
    port, _ = tls_server
    alice = tls.load_tls_dir(issued(ca_dir, tmp_path / "alice", Role.CLIENT, "alice"))
    assert _call(port, tls.channel_credentials(alice)) == "sluice://client/alice"


def test_callers_without_a_certificate_of_the_cluster_cannot_connect(
    ca_dir: Path, tmp_path: Path, tls_server: tuple[int, Path]
):
    port, rm = tls_server
    loaded = tls.load_tls_dir(rm)
    no_certificate = grpc.ssl_channel_credentials(root_certificates=loaded.ca_pem)
    other_ca = tmp_path / "other-ca"
    tls.init_ca(other_ca, "elsewhere")
    stranger = tls.load_tls_dir(issued(other_ca, tmp_path / "stranger", Role.ADMIN, "eve"))
    forged = grpc.ssl_channel_credentials(
        root_certificates=loaded.ca_pem,  # trusts our server, but its own certificate is foreign
        private_key=stranger.key_pem,
        certificate_chain=stranger.cert_pem,
    )
    for credentials in (None, no_certificate, forged):
        with pytest.raises(grpc.RpcError) as caught:
            _call(port, credentials)
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE  # the handshake fails


def test_a_missing_ca_is_named_once(tmp_path: Path):
    with pytest.raises(TlsError) as caught:
        tls.load_ca(tmp_path)
    assert str(caught.value) == f"{tmp_path / tls.CA_CERT}: missing"


# ------------------------------------------------------------------------------ job masters


def test_the_rm_issues_each_job_master_a_certificate_of_its_own(ca_dir: Path, tmp_path: Path):
    rm = tls.issue(tls.load_ca(ca_dir), Identity(Role.RM, "rm"), tmp_path / "rm").directory
    assert stat.S_IMODE((rm / tls.JOB_MASTER_CA_KEY).stat().st_mode) == 0o600
    chain, key = tls.issue_job_master(tls.load_job_master_ca(rm), "job-000007")
    out = tmp_path / "jm"
    tls.write_tls_dir(out, (ca_dir / tls.CA_CERT).read_bytes(), chain, key)
    loaded = tls.load_tls_dir(out)  # the chain verifies up to the cluster CA
    assert loaded.identity == Identity(Role.JOB_MASTER, "job-000007")
    assert loaded.cert_pem == chain
    assert stat.S_IMODE((out / tls.KEY).stat().st_mode) == 0o600


def test_sluice_ca_issues_no_job_master(ca_dir: Path, tmp_path: Path):
    with pytest.raises(TlsError, match=r"^role: job master certificates are issued by the RM"):
        tls.issue(tls.load_ca(ca_dir), Identity(Role.JOB_MASTER, "job-1"), tmp_path / "x")


def test_only_the_job_master_ca_issues_job_masters_and_nothing_else(ca_dir: Path, tmp_path: Path):
    """An RM cannot mint an admin, nor the cluster CA's holders a job master."""
    authority = tls.load_ca(ca_dir)
    rm = tls.issue(authority, Identity(Role.RM, "rm"), tmp_path / "rm").directory
    job_master_ca = tls.load_job_master_ca(rm)
    key = ec.generate_private_key(ec.SECP256R1())
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    now = datetime.datetime.now(datetime.UTC)
    admin_by_rm = tls.sign_leaf(
        job_master_ca, Identity(Role.ADMIN, "mallory"), key.public_key(), (), later, now
    )
    job_master_by_root = tls.sign_leaf(
        authority, Identity(Role.JOB_MASTER, "job-1"), key.public_key(), (), later, now
    )
    genuine = tls.sign_leaf(
        job_master_ca, Identity(Role.JOB_MASTER, "job-1"), key.public_key(), (), later, now
    )
    assert tls.identity_of(admin_by_rm) is None
    assert tls.identity_of(job_master_by_root) is None
    assert tls.identity_of(genuine) == Identity(Role.JOB_MASTER, "job-1")
