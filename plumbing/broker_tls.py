"""TLS for the data plane's brokers: the Kafka and MQTT links (issue 10).

Every gRPC link is mutual TLS with the cluster's CA (:mod:`plumbing.tls`); the brokers' links
take the same certificates.  A client of a broker trusts only the cluster CA (``ca.crt`` of its
TLS directory), checks that the broker's certificate names the host it dialled, and presents
its own certificate (``tls.crt``, the chain for a job master, and ``tls.key``), so a broker
configured to require client certificates signed by the cluster CA admits the cluster's daemons
and nobody else.  The broker's own certificate is a ``broker`` one (``sluice ca issue --role
broker --name NAME --host HOST``), which holds no right on any gRPC service.

A :class:`BrokerTls` names the files rather than holding PEM bytes, because both clients load
them from files: kafka-python's ``ssl_cafile``/``ssl_certfile``/``ssl_keyfile`` and
``ssl.SSLContext.load_cert_chain`` (for aiomqtt) take paths only.

A TLS failure (a broker whose certificate another CA signed, or names another host; a broker
that refuses our certificate) must be told apart from a broker that is simply down, or an
operator looks for a dead process that is alive: :func:`tls_problem` finds the TLS error in a
client's exception, and :func:`probe` asks the broker itself when a client (kafka-python) keeps
the reason to its own log.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plumbing.tls import CA_CERT, CERT, KEY, TlsError, TlsFiles

PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class BrokerTls:
    """A broker client's TLS: the CA its broker's certificate must chain to, and the client's
    own certificate and key (``None``: present none; only tests of refusal do that)."""

    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("BrokerTls: cert_file and key_file go together")

    @classmethod
    def of_dir(cls, directory: Path) -> BrokerTls:
        """The files of a TLS directory (``ca.crt``, ``tls.crt``, ``tls.key``).  Raises
        :class:`~plumbing.tls.TlsError` naming a file that is missing."""
        for name in (CA_CERT, CERT, KEY):
            if not (directory / name).is_file():
                raise TlsError(f"--tls-dir: {directory / name} is missing")
        return cls(directory / CA_CERT, directory / CERT, directory / KEY)

    @classmethod
    def of(cls, tls: TlsFiles) -> BrokerTls:
        """The broker TLS of a daemon's loaded (and so checked) TLS directory."""
        return cls.of_dir(tls.directory)

    def ssl_context(self) -> ssl.SSLContext:
        """A client context: TLS 1.2 or newer, only the cluster CA trusted, the broker's
        certificate checked against the host dialled, our certificate presented.  Raises
        :class:`~plumbing.tls.TlsError` (one line, naming the file) if a file cannot be used."""
        try:
            # Given a cafile, create_default_context trusts that alone (no system CAs) and
            # requires a valid certificate naming the host.
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca_file))
        except (OSError, ssl.SSLError) as error:
            raise TlsError(f"{self.ca_file}: cannot be used as a CA ({_reason(error)})") from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file is not None and self.key_file is not None:
            try:
                context.load_cert_chain(str(self.cert_file), str(self.key_file))
            except (OSError, ssl.SSLError) as error:
                raise TlsError(
                    f"{self.cert_file}: cannot be used with {self.key_file} ({_reason(error)})"
                ) from None
        return context

    def kafka_options(self) -> dict[str, Any]:
        """kafka-python's options for this TLS (``security_protocol`` SSL, hostname checked)."""
        options: dict[str, Any] = {
            "security_protocol": "SSL",
            "ssl_cafile": str(self.ca_file),
            "ssl_check_hostname": True,
        }
        if self.cert_file is not None:
            options["ssl_certfile"] = str(self.cert_file)
            options["ssl_keyfile"] = str(self.key_file)
        return options


def tls_problem(error: BaseException, *, peer: str = "broker") -> str | None:
    """``"TLS: <reason>"`` if ``error`` (or what caused it) is a TLS failure, else None;
    ``peer`` names the server in the reason (``the broker's certificate is not trusted``).

    Clients wrap the ``ssl`` error, some keeping only its text (aiomqtt raises
    ``MqttError(str(ssl_error))``), some as an argument (urllib3's ``SSLError(ssl_error)``,
    under requests'), so those are followed and the text is recognised too: the ``ssl``
    module's messages start with ``[SSL: REASON]``, and one explained already with ``TLS: ``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError | ssl.CertificateError):
            return _explain(_reason(current), peer)
        text = str(current)
        if text.startswith("TLS: "):
            return text  # explained already
        if "[SSL" in text:
            return _explain(_without_location(text[text.index("[SSL") :]), peer)
        wrapped = (arg for arg in current.args if isinstance(arg, BaseException))
        current = current.__cause__ or current.__context__ or next(wrapped, None)
    return None


def probe(
    address: str,
    context: ssl.SSLContext,
    timeout: float = PROBE_TIMEOUT_S,
    *,
    peer: str = "broker",
) -> str | None:
    """Why a TLS session with the broker at ``host:port`` fails (``"TLS: <reason>"``), or None
    when it does not, or when the broker cannot be reached at all (then it is not TLS).

    After the handshake it waits briefly for the broker's first word: with TLS 1.3 a broker
    that refuses our certificate says so only after the client's side of the handshake is
    done.  A broker that says nothing (it waits for a request, as a healthy one does) passes."""
    host, _, port = address.strip().rpartition(":")
    host = host.strip("[]")
    try:
        with (
            socket.create_connection((host, int(port)), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.settimeout(min(timeout, 0.5))
            with contextlib.suppress(TimeoutError, BlockingIOError):
                if tls.recv(1) == b"":
                    # A broker does not end a session it has not heard a word on; one that ends
                    # it at once turned down what the handshake showed it.
                    return (
                        f"TLS: the {peer} closed the session right after the handshake "
                        "(it does not accept this client's certificate?)"
                    )
    except (ssl.SSLError, ssl.CertificateError) as error:
        return _explain(_reason(error), peer)
    except OSError as error:
        if error.errno == errno.ECONNRESET:
            # Reset during or right after the handshake: a broker that refuses our
            # certificate may close without an alert.
            return f"TLS: the {peer} closed the connection during the handshake"
        return None
    except ValueError:
        return None  # not host:port; the caller's own validation says so
    return None


# OpenSSL's alerts from a server that does not accept the client's certificate.
_REFUSED_ALERTS = ("certificate required", "unknown ca", "bad certificate", "certificate unknown")


def _explain(reason: str, peer: str = "broker") -> str:
    """One line for a TLS failure, saying which side's certificate is the trouble."""
    if reason.startswith("certificate verify failed"):
        return f"TLS: the {peer}'s certificate is not trusted here ({reason})"
    if any(alert in reason for alert in _REFUSED_ALERTS):
        return f"TLS: the {peer} refused this client's certificate ({reason})"
    if reason.startswith("EOF occurred in violation of protocol"):
        # A server that turns a client's certificate (or its lack) down may hang up without
        # an alert, as stunnel does.
        return (
            f"TLS: the {peer} closed the connection during the handshake (it does not "
            f"accept this client's certificate?) ({reason})"
        )
    return f"TLS: {reason}"


def _reason(error: BaseException) -> str:
    """The ``ssl`` error's reason without the ``(_ssl.c:NNN)`` suffix."""
    if isinstance(error, ssl.SSLCertVerificationError) and error.verify_message:
        return f"certificate verify failed: {error.verify_message}"
    text = str(error.args[1]) if isinstance(error, OSError) and len(error.args) > 1 else str(error)
    return _without_location(text) or type(error).__name__


def _without_location(text: str) -> str:
    """``text`` without OpenSSL's ``[SSL: CODE]`` tag and the ``(_ssl.c:NNN)`` suffix."""
    text = text.split(" (_ssl.c:", maxsplit=1)[0]
    if text.startswith("[SSL") and "] " in text:
        text = text.split("] ", 1)[1]
    return text
