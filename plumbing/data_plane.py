"""Where the data plane lives: the Kafka brokers and topics, the MQTT broker and topic prefix,
and the cluster aggregator, and whether the brokers' links are TLS.

The resource manager is configured with it (``sluice rm --kafka ... --mqtt ... --aggregator
...``) and hands it to every agent and job master that registers, so a deployment names its
brokers in one place.  ``DataPlane()`` (all empty) means no metrics pipeline: agents and job
masters then run without publishing anything.

TLS (docs/security.md): the MQTT URL's scheme says it (``mqtts://`` is TLS, ``mqtt://``
plaintext); ``kafka_tls`` (``--kafka-tls``) says it for every Kafka client.  Each client then
uses its own TLS directory's CA, certificate and key (:mod:`plumbing.broker_tls`), so a holder
without one cannot join a TLS link: a daemon given such a data plane on its command line refuses
to start (:func:`require_tls_dir`); one handed it by the RM runs without that link, and says so.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from plumbing.mqtt import parse_mqtt_broker
from sluice_pb import common_pb2 as pb

DEFAULT_METRICS_TOPIC = "sluice.metrics"
DEFAULT_OUTCOMES_TOPIC = "sluice.task-outcomes"
DEFAULT_MQTT_TOPIC_PREFIX = "sluice/v1"


@dataclass(frozen=True)
class DataPlane:
    kafka_bootstrap: str = ""
    metrics_topic: str = DEFAULT_METRICS_TOPIC
    outcomes_topic: str = DEFAULT_OUTCOMES_TOPIC
    mqtt_url: str = ""
    mqtt_topic_prefix: str = DEFAULT_MQTT_TOPIC_PREFIX
    aggregator_address: str = ""
    kafka_tls: bool = False  # every Kafka client speaks TLS (security_protocol SSL)

    def __post_init__(self) -> None:
        if self.kafka_tls and not self.kafka_bootstrap:
            raise ValueError("--kafka-tls: needs --kafka (the brokers to speak TLS to)")
        if self.kafka_bootstrap:
            for address in self.kafka_bootstrap.split(","):
                check_host_port("--kafka", address)
        if self.aggregator_address:
            check_host_port("--aggregator", self.aggregator_address)
        if self.mqtt_url:
            # The same parse the job masters and the aggregator apply when they connect, so a
            # URL the RM accepts and hands out cannot fail later in every job master.
            parse_mqtt_broker(self.mqtt_url)
        for flag, topic in (
            ("--metrics-topic", self.metrics_topic),
            ("--outcomes-topic", self.outcomes_topic),
            ("--mqtt-topic-prefix", self.mqtt_topic_prefix),
        ):
            if not topic or any(c in topic for c in " #+"):
                raise ValueError(f"{flag}: must be a non-empty name without spaces, '#' or '+'")

    @property
    def has_kafka(self) -> bool:
        return bool(self.kafka_bootstrap)

    @property
    def mqtt_tls(self) -> bool:
        """Whether the MQTT link is TLS (an ``mqtts://`` URL)."""
        return bool(self.mqtt_url) and parse_mqtt_broker(self.mqtt_url).tls

    def to_pb(self) -> pb.DataPlane:
        return pb.DataPlane(
            kafka_bootstrap=self.kafka_bootstrap,
            metrics_topic=self.metrics_topic,
            outcomes_topic=self.outcomes_topic,
            mqtt_url=self.mqtt_url,
            mqtt_topic_prefix=self.mqtt_topic_prefix,
            aggregator_address=self.aggregator_address,
            kafka_tls=self.kafka_tls,
        )

    @staticmethod
    def from_pb(message: pb.DataPlane) -> DataPlane:
        """The RM's data plane as received; missing topic names take the defaults."""
        return DataPlane(
            kafka_bootstrap=message.kafka_bootstrap,
            metrics_topic=message.metrics_topic or DEFAULT_METRICS_TOPIC,
            outcomes_topic=message.outcomes_topic or DEFAULT_OUTCOMES_TOPIC,
            mqtt_url=message.mqtt_url,
            mqtt_topic_prefix=message.mqtt_topic_prefix or DEFAULT_MQTT_TOPIC_PREFIX,
            aggregator_address=message.aggregator_address,
            kafka_tls=message.kafka_tls,
        )


def check_host_port(flag: str, address: str) -> None:
    """Raise ``ValueError("flag: problem")`` unless ``address`` is ``host:port``."""
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{flag}: expected host:port, got {address!r}")


def add_arguments(parser: argparse.ArgumentParser, *, with_aggregator: bool = True) -> None:
    """The data-plane flags shared by ``sluice rm`` and ``sluice aggregator``."""
    parser.add_argument("--kafka", default="", help="Kafka bootstrap servers host:port[,...]")
    parser.add_argument(
        "--kafka-tls",
        action="store_true",
        help="every Kafka client speaks TLS with its own --tls-dir (security_protocol SSL)",
    )
    parser.add_argument("--metrics-topic", default=DEFAULT_METRICS_TOPIC)
    parser.add_argument("--outcomes-topic", default=DEFAULT_OUTCOMES_TOPIC)
    parser.add_argument(
        "--mqtt",
        default="",
        help="MQTT broker mqtt://host:port, or mqtts://host:port for TLS (default port 8883)",
    )
    parser.add_argument("--mqtt-topic-prefix", default=DEFAULT_MQTT_TOPIC_PREFIX)
    if with_aggregator:
        parser.add_argument("--aggregator", default="", help="aggregator address host:port")


def from_arguments(args: argparse.Namespace) -> DataPlane:
    """The flags of ``add_arguments`` as a ``DataPlane`` (``ValueError`` names a bad flag)."""
    return DataPlane(
        kafka_bootstrap=args.kafka,
        metrics_topic=args.metrics_topic,
        outcomes_topic=args.outcomes_topic,
        mqtt_url=args.mqtt,
        mqtt_topic_prefix=args.mqtt_topic_prefix,
        aggregator_address=getattr(args, "aggregator", ""),
        kafka_tls=args.kafka_tls,
    )


def require_tls_dir(plane: DataPlane, has_tls_dir: bool) -> None:
    """Raise ``ValueError`` (one line naming the flag) if ``plane`` has a TLS link but the
    daemon that was given it has no TLS directory of its own (it runs ``--insecure``): it could
    join that link neither with a certificate nor in plaintext."""
    if has_tls_dir:
        return
    if plane.kafka_tls:
        raise ValueError(
            "--kafka-tls: Kafka over TLS needs this daemon's certificate; give --tls-dir "
            "(it runs without TLS)"
        )
    if plane.mqtt_tls:
        raise ValueError(
            f"--mqtt: {plane.mqtt_url} is MQTT over TLS and needs this daemon's certificate; "
            "give --tls-dir (it runs without TLS)"
        )
