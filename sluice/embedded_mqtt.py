"""``python -m sluice.embedded_mqtt --listen HOST:PORT [--tls-dir DIR]``: the amqtt MQTT broker,
for ``sluice local up`` when no ``--mqtt`` address is given.  In memory, until SIGTERM.

Without ``--tls-dir`` it is plaintext and anonymous (``mqtt://``).  With it (``mqtts://``) it
presents the TLS directory's certificate (a ``broker`` one of the cluster's CA) and admits only
clients presenting a certificate that CA signed, as Mosquitto with ``require_certificate true``
does: amqtt itself would ask for a client certificate but admit a client without one
(``CERT_OPTIONAL``), so :class:`_Broker` requires it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
from pathlib import Path
from typing import Any

from amqtt.broker import Broker

from plumbing.tls import CA_CERT, CERT, KEY


class _Broker(Broker):  # type: ignore[misc]
    """amqtt's broker, requiring a client certificate on its TLS listeners."""

    @staticmethod
    def _create_ssl_context(listener: Any) -> ssl.SSLContext:
        context: ssl.SSLContext = Broker._create_ssl_context(listener)
        context.verify_mode = ssl.CERT_REQUIRED  # no certificate, or another CA's: no session
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def config(listen: str, tls_dir: Path | None) -> dict[str, Any]:
    """amqtt's configuration: one TCP listener, TLS with ``tls_dir``'s files."""
    listener: dict[str, Any] = {"type": "tcp", "bind": listen}
    if tls_dir is not None:
        listener.update(
            ssl=True,
            cafile=str(tls_dir / CA_CERT),
            certfile=str(tls_dir / CERT),
            keyfile=str(tls_dir / KEY),
        )
    return {
        "listeners": {"default": listener},
        # Anonymous at the MQTT level: over TLS the handshake has authenticated the client.
        "auth": {"allow-anonymous": True, "plugins": ["auth_anonymous"]},
        "topic-check": {"enabled": False},
    }


async def serve(listen: str, tls_dir: Path | None = None) -> None:
    broker = _Broker(config(listen, tls_dir))
    await broker.start()
    logging.getLogger("sluice.mqtt").info(
        "embedded MQTT broker (amqtt) listening on %s%s",
        listen,
        " over TLS, client certificates required" if tls_dir is not None else "",
    )
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    await stopped.wait()
    await broker.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m sluice.embedded_mqtt")
    parser.add_argument("--listen", default="127.0.0.1:1883", help="host:port")
    parser.add_argument(
        "--tls-dir",
        type=Path,
        help="TLS on, with this directory's ca.crt, tls.crt, tls.key (a broker certificate)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("sluice").setLevel(logging.INFO)
    asyncio.run(serve(args.listen, args.tls_dir))


if __name__ == "__main__":
    main()
