"""The cluster aggregator process: ``sluice aggregator``.

Threads: *ingest* reads the metrics and outcomes topics from Kafka into the windows (and hands
new samples to InfluxDB when configured); *period* ranks the machines every ``--period`` seconds
and publishes the machine list and the candidate list over MQTT; gRPC handlers answer queries.

Start-up, so that a restart does not blind placement for a whole window: the windows are first
refilled from InfluxDB, then the Kafka topics are replayed from the newest sample InfluxDB had
(or from ``--replay`` seconds ago without InfluxDB), and a first round is computed at once.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from pathlib import Path

from aggregator import flags
from aggregator.access import ACCESS
from aggregator.flags import load_thresholds_of
from aggregator.influx_store import InfluxSampleStore, InfluxTarget, parse_influx_url
from aggregator.kafka_reader import TopicReader
from aggregator.mqtt_publisher import CandidatePublisher
from aggregator.service import AggregatorServicer, excluded_by, exclusion_summary
from aggregator.state import AggregatorState, Settings
from plumbing import data_plane, transport
from plumbing.broker_tls import BrokerTls
from plumbing.daemon import publish_address, serve_until_signalled
from plumbing.errors import UserError
from plumbing.rpc import AGGREGATOR_MAX_RECEIVE, start_server
from plumbing.tls import Role
from policies.oversubscription.candidate_sync import MachineList
from policies.oversubscription.candidates import compute_candidates
from policies.oversubscription.config import (
    OversubscriptionConfig,
    OversubscriptionMode,
)
from policies.oversubscription.least_loaded import least_loaded_candidates
from policies.oversubscription.rounds import Ranking, Round
from sluice_pb import aggregator_pb2 as apb
from sluice_pb import aggregator_pb2_grpc as agrpc

log = logging.getLogger("sluice.aggregator")

RANKINGS: dict[str, Ranking] = {
    "rose": compute_candidates,  # multi-phase filtering, ROSE Alg. 4
    "least-loaded": least_loaded_candidates,
}
assert tuple(sorted(RANKINGS)) == flags.RANKING_NAMES
__all__ = ["RANKINGS", "add_arguments", "load_thresholds_of", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        default="127.0.0.1:7071",
        help="gRPC host:port (port 0: any free one, another at every start; the RM hands out the "
        "address it is given, so give a fixed one, as `sluice local` records the first it bound)",
    )
    parser.add_argument("--advertise", help="address others use to reach the aggregator")
    parser.add_argument("--address-file", type=Path, help="write the bound address here once up")
    data_plane.add_arguments(parser, with_aggregator=False)
    transport.add_arguments(parser)
    parser.add_argument(
        "--influx-url",
        default="",
        help="InfluxDB http(s)://[user:pass@]host:port[/database] (default: windows in memory "
        "only); https: the server's certificate must chain to the cluster CA and name the host, "
        "and this daemon presents its own (--tls-dir; refused with --insecure); http with "
        "--tls-dir works but is logged as plaintext",
    )
    parser.add_argument("--period", type=float, default=10.0, help="seconds between rankings")
    parser.add_argument(
        "--mode",
        choices=[m.value for m in OversubscriptionMode],
        default=OversubscriptionMode.UTILIZATION.value,
        help="up: batch-only co-location; rp: with latency-sensitive services (counters on)",
    )
    flags.add_arguments(parser)  # --window ... --load-threshold: `sluice local up` takes them too


def _settings(args: argparse.Namespace) -> tuple[Settings, data_plane.DataPlane]:
    try:
        plane = data_plane.from_arguments(args)
        if not plane.has_kafka:
            raise ValueError("--kafka: required (the broker agents publish metrics to)")
        if args.influx_url:
            parse_influx_url(args.influx_url)
        for flag, value in (("--period", args.period), ("--stale-after", args.stale_after)):
            if not value > 0:
                raise ValueError(f"{flag}: must be positive")
        flags.check(args)
        config = OversubscriptionConfig(
            mode=OversubscriptionMode(args.mode),
            candidate_limit=args.candidate_limit,
            load_thresholds=load_thresholds_of(args.load_threshold),
        )
    except ValueError as error:
        raise UserError(str(error)) from None
    settings = Settings(
        metrics_topic=plane.metrics_topic,
        outcomes_topic=plane.outcomes_topic,
        window=args.window,
        stale_after=args.stale_after,
        forget_after=args.forget_after,
        config=config,
        ranking=RANKINGS[args.ranking],
        ranking_name=args.ranking,
    )
    return settings, plane


def run(args: argparse.Namespace) -> int:
    settings, plane = _settings(args)
    influx = parse_influx_url(args.influx_url) if args.influx_url else None
    try:
        tls = transport.from_arguments(args, Role.AGGREGATOR)
        data_plane.require_tls_dir(plane, tls is not None)
        _check_influx_tls(influx, tls is not None)
        # The brokers' links (--kafka-tls, mqtts://) and InfluxDB's (https://) take the
        # daemon's own certificate.
        broker_tls = BrokerTls.of(tls) if tls is not None else None
        influx_tls = influx is not None and influx.ssl
        if broker_tls is not None and (plane.kafka_tls or plane.mqtt_tls or influx_tls):
            broker_tls.ssl_context()  # a file that cannot be used fails now, in one line
    except ValueError as error:  # (TlsError is one)
        raise UserError(str(error)) from None
    started = time.time()
    state = AggregatorState(settings, start_time=started)

    store: InfluxSampleStore | None = None
    replay_from = started - args.replay
    if influx is not None:
        store = InfluxSampleStore(influx, tls=broker_tls if influx.ssl else None)
        store.start()
        replay_from = _refill(state, store, settings.window, default=replay_from)
    else:
        log.warning(
            "no --influx-url: windows are kept in memory only; a restart refills them from the "
            "last %g s of Kafka",
            args.replay,
        )
    publisher = (
        CandidatePublisher(args.mqtt, plane.mqtt_topic_prefix, tls=broker_tls)
        if args.mqtt
        else None
    )
    if publisher is not None:
        publisher.start()
    else:
        log.warning("no --mqtt: candidate lists are only served over gRPC")

    state.run_round(time.time())  # answer queries at once, from the refilled windows
    servicer = AggregatorServicer(state, period_s=args.period, influxdb=store is not None)
    server, port, health = start_server(
        [
            (
                agrpc.add_AggregatorServiceServicer_to_server,
                servicer,
                apb.DESCRIPTOR.services_by_name["AggregatorService"].full_name,
            )
        ],
        args.listen,
        tls=tls,
        access=ACCESS,
        max_receive_bytes=AGGREGATOR_MAX_RECEIVE,
    )
    address = args.advertise or f"{args.listen.rsplit(':', 1)[0]}:{port}"
    log.info(
        "aggregator listening on %s: kafka %s%s (%s, %s), ranking %s every %g s, window %d samples",
        address,
        plane.kafka_bootstrap,
        " over TLS" if plane.kafka_tls else "",
        plane.metrics_topic,
        plane.outcomes_topic,
        args.ranking,
        args.period,
        args.window,
    )
    publish_address(args.address_file, address)

    stop = threading.Event()
    reader = TopicReader(
        plane.kafka_bootstrap,
        [plane.metrics_topic, plane.outcomes_topic],
        replay_from=replay_from,
        tls=broker_tls if plane.kafka_tls else None,
    )
    threads = [
        threading.Thread(
            target=_ingest_loop, args=(state, reader, store, stop), name="ingest", daemon=True
        ),
        threading.Thread(
            target=_period_loop,
            args=(state, publisher, args.period, stop),
            name="period",
            daemon=True,
        ),
    ]
    serve_until_signalled(stop, threads, server, health, log, "shutting down")
    reader.close()
    if publisher is not None:
        publisher.close()
    if store is not None:
        store.close()
    log.info("aggregator stopped")
    return 0


def _check_influx_tls(influx: InfluxTarget | None, has_tls_dir: bool) -> None:
    """Refuse (``ValueError``, one line naming the flag) an https URL without a TLS directory:
    the link would have no client certificate, and ``--insecure`` means no TLS.  Warn, once,
    of an http URL with one: every other link of the daemon is TLS, this one is plaintext."""
    if influx is None:
        return
    if influx.ssl and not has_tls_dir:
        raise ValueError(
            f"--influx-url: {influx.url} is InfluxDB over TLS and needs this daemon's "
            "certificate; give --tls-dir (it runs without TLS)"
        )
    if not influx.ssl and has_tls_dir:
        log.warning(
            "--influx-url: %s is plaintext: samples reach InfluxDB unencrypted and "
            "unauthenticated; give https:// with a TLS front requiring client certificates "
            "(docs/security.md)",
            influx.url,
        )


def _refill(
    state: AggregatorState, store: InfluxSampleStore, window: int, *, default: float
) -> float:
    """Refill the windows from InfluxDB; where Kafka replay should start."""
    try:
        samples = store.load_recent(window, since_s=3600.0)
    except Exception as error:  # the server may be down: Kafka replay still covers the gap
        log.warning("could not refill the windows from InfluxDB (%s); replaying Kafka only", error)
        return default
    added = state.refill(samples)
    machines = len({s.node_id for s in samples})
    log.info("refilled %d samples of %d machines from InfluxDB", added, machines)
    if not samples:
        return default
    return max(s.timestamp for s in samples)


def _ingest_loop(
    state: AggregatorState,
    reader: TopicReader,
    store: InfluxSampleStore | None,
    stop: threading.Event,
) -> None:
    while not stop.is_set():
        try:
            records = reader.poll(0.5)
            if not records:
                continue
            accepted = state.ingest(records, time.time())
            if store is not None:
                for sample in accepted:
                    store.write(sample)
        except Exception:  # keep consuming: a bug on one batch must not stop the pipeline
            log.exception("ingesting a batch failed")
            stop.wait(1.0)


def _period_loop(
    state: AggregatorState,
    publisher: CandidatePublisher | None,
    period: float,
    stop: threading.Event,
) -> None:
    """Publish the start-up round at once, then rank and publish every ``period`` seconds."""
    previous: Round | None = None
    published_list: MachineList | None = None
    current = state.latest
    next_due = time.monotonic() + period
    while True:
        if current is not None:
            _log_changes(previous, current, state.settings.config)
            if publisher is not None:
                if current.machines is not published_list:
                    publisher.publish_machine_list(current.machine_list_message)
                    published_list = current.machines
                publisher.publish_candidates(current.candidate_message)
            previous = current
        if stop.wait(max(0.0, next_due - time.monotonic())):
            return
        next_due += period
        try:
            current = state.run_round(time.time())
        except Exception:
            log.exception("ranking round failed")
            current = None


def _log_changes(previous: Round | None, current: Round, config: OversubscriptionConfig) -> None:
    before = set(previous.ranked) if previous is not None else set()
    after = set(current.ranked)
    if previous is not None and before == after:
        return
    joined = sorted(after - before)
    left = sorted(before - after)
    names = current.machines.names
    why = exclusion_summary(excluded_by(current, i, config) for i in range(len(names)))
    log.info(
        "round %d: %d candidates of %d machines%s%s%s",
        current.candidate_version,
        len(after),
        len(names),
        f"; in: {', '.join(joined[:10])}" if joined else "",
        f"; out: {', '.join(left[:10])}" if left else "",
        f"; not candidates: {why}" if why else "",
    )
