"""A TLS front for a plaintext broker, for tests: it accepts TLS on a port of its own, requires
a client certificate signed by the CA it is given (as a Kafka listener with ``ssl.client.auth=
required`` does), and pipes each session's bytes to the backend.

Tansu, the tests' Kafka-protocol broker, speaks plaintext only; behind this front (and
advertising the front's address) it lets the tests drive kafka-python's real TLS handshakes,
certificate checks and refusals.  Each session's outcome is recorded (``accepted``,
``refused``) so a test can wait on it instead of sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from pathlib import Path
from types import TracebackType


class TlsFront:
    def __init__(self, backend: str, ca_file: Path, cert_file: Path, key_file: Path) -> None:
        self._backend_host, backend_port = backend.rsplit(":", 1)
        self._backend_port = int(backend_port)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca_file))
        context.verify_mode = ssl.CERT_REQUIRED  # no certificate, or another CA's: no session
        context.load_cert_chain(str(cert_file), str(key_file))
        self._context = context
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._lock = threading.Lock()
        self.accepted = 0  # sessions whose handshake succeeded
        self.refused = 0  # connections whose handshake failed
        self.port = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, port: int = 0) -> TlsFront:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(port), self._loop).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.accepted, self.refused

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            sessions = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in sessions:
                task.cancel()
            await asyncio.gather(*sessions, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> TlsFront:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def _listen(self, port: int) -> asyncio.Server:
        # The handshake is ours (not start_server's) so that a refused one is counted.
        return await asyncio.start_server(self._session, "127.0.0.1", port)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await writer.start_tls(self._context)
        except (ssl.SSLError, OSError):
            with self._lock:
                self.refused += 1
            writer.close()
            return
        with self._lock:
            self.accepted += 1
        try:
            backend_reader, backend_writer = await asyncio.open_connection(
                self._backend_host, self._backend_port
            )
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            _pipe(reader, backend_writer), _pipe(backend_reader, writer), return_exceptions=True
        )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
