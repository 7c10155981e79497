"""Raw machine samples in InfluxDB 1.x, through the ``influxdb`` (influxdb-python) v1 client.

The same code works against InfluxDB 2.x's v1-compatibility endpoints (``/write``, ``/query``)
once a DBRP mapping exists for the database (2.x refuses ``CREATE DATABASE``; that is logged and
writing goes on).

Point schema (one point per ``MachineSample``):

* measurement ``node_metrics`` (configurable);
* tag ``node``: the node id;
* time: the sample's timestamp, millisecond precision;
* float fields: the load metrics by name (``cpu_ut``, ``mem_ut``, ``load_avg_1``,
  ``disk_s_ut``, ``disk_ut``, ``disk_usage``, ``net_rec_ut``, ``net_tra_ut``), the queue metrics
  by name (``rc_am``, ``oc_w_am``, ``oc_r_am``), ``interval_s``, each load capacity as
  ``<metric>_capacity`` (e.g. ``load_avg_1_capacity`` = cores), and ``cpi`` / ``mpki`` only when
  the machine reported them. A non-finite figure (NaN: not measured) is left out of the point,
  since line protocol cannot carry it.

Writing never blocks the caller: ``write`` appends to a bounded in-memory queue and a writer
thread sends batches. While the server is unreachable the writer keeps the samples (dropping the
oldest past ``max_pending``, counted in ``dropped``), retries with exponential backoff up to
``max_backoff`` (10 s by default), and logs once when the outage starts and once when it ends.

Over ``https://`` with a :class:`~plumbing.broker_tls.BrokerTls` (the aggregator's TLS
directory), the client trusts only the cluster CA, checks that the server's certificate names
the host of the URL, and presents the aggregator's certificate, as the Kafka and MQTT clients
do; InfluxDB 1.x cannot require it, so a TLS front that does sits before it (docs/security.md).
Without one (``--insecure`` is refused an https URL by the daemon) it trusts the system's CAs.
A TLS failure is logged as one, once per outage (``InfluxDB at URL (TLS): TLS: the server's
certificate is not trusted here ...``), and the writer retries as for a server that is down.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import requests
from influxdb import InfluxDBClient
from influxdb.exceptions import InfluxDBClientError, InfluxDBServerError
from influxdb.line_protocol import quote_ident

from aggregator.samples import MachineSample
from plumbing.broker_tls import BrokerTls, tls_problem
from policies.oversubscription.config import LOAD_METRICS, QUEUE_METRICS

DEFAULT_DATABASE = "sluice"
MAX_BACKOFF_S = 10.0
FIRST_BACKOFF_S = 0.25
REQUEST_TIMEOUT_S = 5.0

_UNREACHABLE = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    InfluxDBServerError,
)
_CAPACITY_FIELDS = tuple(f"{metric}_capacity" for metric in LOAD_METRICS)


class InfluxUnavailableError(ConnectionError):
    """The InfluxDB server could not be reached or refused the request."""


@dataclass(frozen=True)
class InfluxTarget:
    """Where the samples go: ``http(s)://[user:pass@]host:port[/db]``."""

    host: str
    port: int
    database: str = DEFAULT_DATABASE
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl: bool = False

    @property
    def url(self) -> str:
        """The server's address without credentials, for messages."""
        scheme = "https" if self.ssl else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/{self.database}"


def parse_influx_url(url: str) -> InfluxTarget:
    """Parse ``http(s)://[user:pass@]host:port[/db]`` (database ``sluice`` when absent).

    Raises ``ValueError("--influx-url: problem")`` for another scheme, a missing host or port, a
    path of more than one segment, or a query or fragment.
    """
    expected = "expected http(s)://[user:pass@]host:port[/database]"
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"--influx-url: {url!r}: {expected}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"--influx-url: {url!r}: the port must be a number in 1-65535") from None
    if not parts.hostname:
        raise ValueError(f"--influx-url: {url!r}: missing host; {expected}")
    if port is None or port == 0:
        raise ValueError(f"--influx-url: {url!r}: missing port; {expected}")
    if parts.query or parts.fragment:
        raise ValueError(f"--influx-url: {url!r}: no query or fragment allowed; {expected}")
    path = parts.path.strip("/")
    if "/" in path:
        raise ValueError(f"--influx-url: {url!r}: the path names one database; {expected}")
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    if password is not None and not username:
        raise ValueError(f"--influx-url: {url!r}: a password needs a user name")
    return InfluxTarget(
        host=parts.hostname,
        port=port,
        database=unquote(path) or DEFAULT_DATABASE,
        username=username,
        password=password if username is None else (password or ""),
        ssl=parts.scheme == "https",
    )


def sample_point(sample: MachineSample, measurement: str) -> dict[str, Any]:
    """The InfluxDB point of one sample (see the module docstring for the schema)."""
    fields: dict[str, float] = {}
    named = (
        *zip(LOAD_METRICS, sample.load, strict=True),
        *zip(QUEUE_METRICS, sample.queue, strict=True),
        *zip(_CAPACITY_FIELDS, sample.load_capacity, strict=True),
        ("interval_s", sample.interval_s),
        ("cpi", sample.cpi),
        ("mpki", sample.mpki),
    )
    for name, value in named:
        if value is not None and math.isfinite(value):
            fields[name] = float(value)  # never an int: the field's type is fixed by its first
    return {
        "measurement": measurement,
        "tags": {"node": sample.node_id},
        "time": round(sample.timestamp * 1000),
        "fields": fields,
    }


def point_sample(node_id: str, row: dict[str, Any]) -> MachineSample:
    """The ``MachineSample`` of one queried row (``time`` in epoch milliseconds). A field the
    point lacks reads as NaN (a capacity as 1.0, a counter as None)."""

    def number(name: str) -> float:
        value = row.get(name)
        return math.nan if value is None else float(value)

    def capacity(name: str) -> float:
        value = number(name)
        return value if math.isfinite(value) and value > 0 else 1.0

    def counter(name: str) -> float | None:
        value = row.get(name)
        return None if value is None else float(value)

    return MachineSample(
        node_id=node_id,
        timestamp=float(row["time"]) / 1000.0,
        load=tuple(number(metric) for metric in LOAD_METRICS),
        load_capacity=tuple(capacity(name) for name in _CAPACITY_FIELDS),
        queue=tuple(number(metric) for metric in QUEUE_METRICS),
        cpi=counter("cpi"),
        mpki=counter("mpki"),
        interval_s=number("interval_s"),
    )


class InfluxSampleStore:
    """Batched, non-blocking writes of machine samples to InfluxDB, and the read-back on restart.

    ``write`` is thread-safe and O(1); one writer thread (started by ``start``) owns the write
    connection. ``load_recent`` uses a connection of its own and may run on any thread.
    """

    def __init__(
        self,
        target: InfluxTarget,
        *,
        measurement: str = "node_metrics",
        batch_size: int = 5000,
        flush_interval: float = 1.0,
        max_pending: int = 200_000,
        max_backoff: float = MAX_BACKOFF_S,
        tls: BrokerTls | None = None,
        log: logging.Logger = logging.getLogger("sluice.aggregator.influx"),  # noqa: B008
    ) -> None:
        if not measurement:
            raise ValueError("measurement: must not be empty")
        if batch_size < 1:
            raise ValueError("batch_size: must be a positive integer")
        if not (math.isfinite(flush_interval) and flush_interval > 0):
            raise ValueError("flush_interval: must be a positive number of seconds")
        if max_pending < batch_size:
            raise ValueError("max_pending: must be at least batch_size")
        if not (math.isfinite(max_backoff) and max_backoff >= FIRST_BACKOFF_S):
            raise ValueError(f"max_backoff: must be at least {FIRST_BACKOFF_S} seconds")
        if tls is not None and not target.ssl:
            raise ValueError(f"tls: {target.url} is plaintext http; TLS needs https://")
        self.target = target
        self._tls = tls
        self._measurement = measurement
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._max_pending = max_pending
        self._max_backoff = max_backoff
        self._log = log
        self._lock = threading.Lock()
        self._queue: deque[MachineSample] = deque()
        self._in_flight = 0
        self._written = 0
        self._dropped = 0
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._close_deadline = math.inf
        self._outage_since: float | None = None  # monotonic; None while the server answers
        self._database_ready = False
        self._thread: threading.Thread | None = None

    # -- counters -----------------------------------------------------------------------------

    @property
    def written(self) -> int:
        """Samples the server has accepted."""
        with self._lock:
            return self._written

    @property
    def dropped(self) -> int:
        """Samples given up: the oldest when the queue was full, samples the server rejected as
        malformed, and samples written after ``close``."""
        with self._lock:
            return self._dropped

    @property
    def pending(self) -> int:
        """Samples waiting to be written, including the batch being sent (so up to
        ``max_pending + batch_size`` while a batch is in flight)."""
        with self._lock:
            return len(self._queue) + self._in_flight

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Create the database if it is missing and start the writer thread. A server that is
        down does not fail start-up (this waits at most ``REQUEST_TIMEOUT_S`` for it): the
        writer creates the database once it answers."""
        if self._thread is not None:
            raise RuntimeError("InfluxSampleStore.start: already started")
        client = self._client()
        try:
            self._ensure_database(client)
        except _UNREACHABLE as error:
            self._outage_started(error)
        finally:
            client.close()
        self._thread = threading.Thread(target=self._run, name="influx-writer", daemon=True)
        self._thread.start()

    def write(self, sample: MachineSample) -> None:
        """Queue one sample; never blocks on the server. When ``max_pending`` samples already
        wait (besides a batch in flight), the oldest is dropped and counted."""
        with self._lock:
            if self._closing.is_set():
                self._dropped += 1
                return
            self._queue.append(sample)
            # The batch in flight is older than anything queued: if it fails, _requeue trims
            # it first, so what is dropped is always the oldest.
            if len(self._queue) > self._max_pending:
                self._queue.popleft()
                self._dropped += 1
            # During an outage the writer's backoff decides when to try again.
            full = len(self._queue) >= self._batch_size and self._outage_since is None
        if full:
            self._wake.set()

    def close(self, timeout: float = 5.0) -> int:
        """Stop accepting samples, flush what the server takes within ``timeout`` seconds and
        stop the writer. Returns how many samples were left unwritten."""
        with self._lock:
            self._close_deadline = time.monotonic() + timeout
            self._closing.set()
        self._wake.set()
        if self._thread is not None:
            # The writer gives up at the deadline; the margin covers one request in flight.
            self._thread.join(timeout + REQUEST_TIMEOUT_S + 1.0)
        return self.pending

    # -- reading back -------------------------------------------------------------------------

    def load_recent(
        self, window: int, since_s: float, *, now: float | None = None
    ) -> list[MachineSample]:
        """The newest ``window`` samples of each machine from the last ``since_s`` seconds
        before ``now`` (default: this machine's clock), oldest first per machine, machines in
        the server's series order. A database that does not exist yet holds no samples.

        Raises ``InfluxUnavailableError`` when the server cannot be reached or refuses the query.
        """
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError("window: must be a positive integer")
        if not (math.isfinite(since_s) and since_s > 0):
            raise ValueError("since_s: must be a positive number of seconds")
        cutoff_ms = round(((time.time() if now is None else now) - since_s) * 1000)
        # LIMIT applies per series (per node) when grouped by the tag.
        query = (
            f"SELECT * FROM {quote_ident(self._measurement)} WHERE time > {cutoff_ms}ms "
            f'GROUP BY "node" ORDER BY time DESC LIMIT {window}'
        )
        client = self._client()
        try:
            result = client.query(query, epoch="ms")
        except InfluxDBClientError as error:
            if "database not found" in str(error.content):
                return []
            raise InfluxUnavailableError(
                f"InfluxDB at {self.target.url} refused the query: {error}"
            ) from error
        except _UNREACHABLE as error:
            raise InfluxUnavailableError(_unreachable(self.target.url, error)) from error
        finally:
            client.close()
        samples: list[MachineSample] = []
        for (_, tags), rows in result.items():
            newest_first = [point_sample(tags["node"], row) for row in rows]
            samples.extend(reversed(newest_first))
        return samples

    # -- the writer ---------------------------------------------------------------------------

    def _client(self) -> InfluxDBClient:
        target = self.target
        tls = self._tls
        # requests' ``verify``: a CA file is then the only one trusted (hostname checked);
        # True: the system's CAs.  Its ``cert`` takes file paths only.
        verify: bool | str = str(tls.ca_file) if tls is not None else target.ssl
        cert = (
            (str(tls.cert_file), str(tls.key_file))
            if tls is not None and tls.cert_file is not None
            else None
        )
        return InfluxDBClient(
            host=target.host,
            port=target.port,
            username=target.username,
            password=target.password,
            database=target.database,
            ssl=target.ssl,
            verify_ssl=verify,
            cert=cert,
            timeout=REQUEST_TIMEOUT_S,
            # One attempt per call: the writer's backoff does the retrying (0 means forever).
            retries=1,
        )

    def _run(self) -> None:
        client = self._client()
        backoff = 0.0
        try:
            while True:
                if not self._closing.is_set():
                    self._wake.wait(backoff or self._flush_interval)
                    self._wake.clear()
                delivered = self._drain(client)
                backoff = (
                    0.0 if delivered else min(max(2 * backoff, FIRST_BACKOFF_S), self._max_backoff)
                )
                if self._closing.is_set():
                    remaining = self._close_deadline - time.monotonic()
                    if delivered or remaining <= 0:
                        return
                    time.sleep(min(backoff, remaining))
        except Exception:  # a bug must not silently stop the writer
            self._log.exception("InfluxDB writer stopped by an unexpected error")
        finally:
            client.close()

    def _drain(self, client: InfluxDBClient) -> bool:
        """Send every queued sample in batches. Returns False at the first batch the server
        could not take (the batch is back at the head of the queue)."""
        if not self._database_ready:
            try:
                self._ensure_database(client)
            except _UNREACHABLE as error:
                self._outage_started(error)
                return False
            self._outage_ended()
        while True:
            with self._lock:
                count = min(self._batch_size, len(self._queue))
                batch = [self._queue.popleft() for _ in range(count)]
                self._in_flight = count
            if not batch:
                return True
            points = [sample_point(sample, self._measurement) for sample in batch]
            try:
                client.write_points(points, time_precision="ms")
            except _UNREACHABLE as error:
                self._requeue(batch)
                self._outage_started(error)
                return False
            except InfluxDBClientError as error:
                if not self._client_error(error, batch):
                    return False
                continue
            with self._lock:
                self._written += count
                self._in_flight = 0
            self._outage_ended()

    def _client_error(self, error: InfluxDBClientError, batch: list[MachineSample]) -> bool:
        """Handle a 4xx answer to a write; True when the writer may go on with the next batch."""
        if "database not found" in str(error.content):
            # Dropped behind our back (or never created): create it again before retrying.
            self._database_ready = False
            self._requeue(batch)
            return False
        if error.code in (401, 403):
            # Credentials may be fixed on the server side: keep the samples and retry.
            self._requeue(batch)
            self._outage_started(error)
            return False
        # Malformed points would be refused forever: give the batch up rather than block.
        with self._lock:
            self._dropped += len(batch)
            self._in_flight = 0
        self._log.error(
            "InfluxDB at %s rejected %d samples, dropped: %s", self.target.url, len(batch), error
        )
        return True

    def _ensure_database(self, client: InfluxDBClient) -> None:
        try:
            client.create_database(self.target.database)  # a no-op when it exists
        except InfluxDBClientError as error:
            # InfluxDB 2.x (v1 API) or a user without admin rights: the database must already
            # exist (or be mapped); writes will tell.
            self._log.warning(
                "could not create InfluxDB database %r at %s (%s); assuming it exists",
                self.target.database,
                self.target.url,
                error,
            )
        self._database_ready = True

    def _requeue(self, batch: list[MachineSample]) -> None:
        """Put an unsent batch back at the head, then trim to ``max_pending`` from the oldest."""
        with self._lock:
            self._queue.extendleft(reversed(batch))
            self._in_flight = 0
            while len(self._queue) > self._max_pending:
                self._queue.popleft()
                self._dropped += 1

    def _outage_started(self, error: BaseException) -> None:
        with self._lock:
            if self._outage_since is not None:
                return
            self._outage_since = time.monotonic()
        self._log.warning(
            "%s; keeping up to %d samples and retrying",
            _unreachable(self.target.url, error),
            self._max_pending,
        )

    def _outage_ended(self) -> None:
        with self._lock:
            if self._outage_since is None:
                return
            lasted = time.monotonic() - self._outage_since
            self._outage_since = None
            dropped = self._dropped
        self._log.warning(
            "InfluxDB at %s is reachable again after %.1f s (%d samples dropped so far)",
            self.target.url,
            lasted,
            dropped,
        )


def _unreachable(url: str, error: BaseException) -> str:
    """Why the server at ``url`` did not answer, in one line: a TLS failure as such (which
    side's certificate is the trouble), else the client's error."""
    problem = tls_problem(error, peer="server")
    if problem is not None:
        return f"InfluxDB at {url} (TLS): {problem}"
    return f"InfluxDB at {url} is unreachable ({error})"
