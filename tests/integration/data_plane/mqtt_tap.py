"""A plain MQTT subscriber for tests (paho-mqtt, threaded): every message on a topic filter,
in arrival order; over TLS with a certificate of the cluster, as the daemons connect."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from paho.mqtt import client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from plumbing.broker_tls import BrokerTls


@dataclass(frozen=True)
class Message:
    topic: str
    payload: bytes
    retain: bool


class MqttTap:
    def __init__(self, address: str, topic_filter: str, tls: BrokerTls | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self._queue: queue.Queue[Message] = queue.Queue()
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2)
        if tls is not None:
            self._client.tls_set_context(tls.ssl_context())
        self._client.on_message = self._on_message
        self._client.on_connect = lambda client, *_: client.subscribe(topic_filter, qos=1)
        self._client.connect(host, int(port))
        self._client.loop_start()

    def _on_message(self, _client: Any, _userdata: Any, message: Any) -> None:
        self._queue.put(Message(message.topic, bytes(message.payload), bool(message.retain)))

    def wait_for(self, predicate: Callable[[Message], bool], timeout: float) -> Message:
        """The next message satisfying ``predicate`` (earlier ones are consumed)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching MQTT message within {timeout} s")
            try:
                message = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if predicate(message):
                return message

    def __enter__(self) -> MqttTap:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._client.loop_stop()
        self._client.disconnect()
