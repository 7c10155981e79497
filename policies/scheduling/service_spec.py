"""A job spec's ``service`` block: a long-running, possibly latency-sensitive service (ROSE's
long-running applications, LRAs, Sec. 2; docs/jobspec.md, "Services").

A job of ``kind: service`` runs until it is killed: its tasks are restarted when they end, and
its phases run side by side (no ``after``: a service has no barriers).  ``latency_sensitive``
asks the node agent to protect it from speculative work sharing its machine (ROSE's RP
oversubscription, Sec. 6.2): first-class cores, and the interference detector on its history.
An optional ``probe`` is how the agent measures its latency: an HTTP GET of a path, or a TCP
connect, to a port on the task's own host, every ``period_s``.

The block is checked here, with the same one-line errors as the rest of the spec::

    kind: service
    service:
      latency_sensitive: true
      probe: {http: /healthz, port: 8080, period_s: 1.0, timeout_s: 0.5}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policies.scheduling.spec_fields import (
    SpecError,
    check_keys,
    describe,
    integer_field,
    join_field,
    number_field,
)

SERVICE_FIELDS: Mapping[str, bool] = {"latency_sensitive": False, "probe": False}
PROBE_FIELDS: Mapping[str, bool] = {
    "http": False,
    "tcp": False,
    "port": True,
    "period_s": False,
    "timeout_s": False,
}
DEFAULT_PROBE_PERIOD_S = 1.0
DEFAULT_PROBE_TIMEOUT_S = 1.0
MIN_PROBE_PERIOD_S = 0.05
MAX_PROBE_PERIOD_S = 3600.0
MAX_PROBE_PATH = 1024


@dataclass(frozen=True)
class ProbeSpec:
    """Measure the service's latency: ``http`` GET of this path (``None``: a TCP connect) to
    ``port`` on the task's host, every ``period_s``, giving up after ``timeout_s``."""

    port: int
    http: str | None = None
    period_s: float = DEFAULT_PROBE_PERIOD_S
    timeout_s: float = DEFAULT_PROBE_TIMEOUT_S


@dataclass(frozen=True)
class ServiceSpec:
    """A long-running service (see the module docstring)."""

    latency_sensitive: bool = False
    probe: ProbeSpec | None = None


def parse_service(value: object, field: str) -> ServiceSpec:
    """A ``service`` block; raise SpecError."""
    doc = check_keys(value, field, SERVICE_FIELDS)
    sensitive = doc.get("latency_sensitive", False)
    if not isinstance(sensitive, bool):
        raise SpecError(
            join_field(field, "latency_sensitive"),
            f"must be true or false, not {describe(sensitive)}",
        )
    probe = _probe(doc["probe"], join_field(field, "probe")) if "probe" in doc else None
    return ServiceSpec(latency_sensitive=sensitive, probe=probe)


def _probe(value: object, field: str) -> ProbeSpec:
    doc = check_keys(value, field, PROBE_FIELDS)
    if ("http" in doc) == ("tcp" in doc):
        raise SpecError(field, "give either http (a path, e.g. /healthz) or tcp: true")
    http = None
    if "http" in doc:
        http = _path(doc["http"], join_field(field, "http"))
    elif doc["tcp"] is not True:
        raise SpecError(join_field(field, "tcp"), f"must be true, not {describe(doc['tcp'])}")
    port = integer_field(doc["port"], join_field(field, "port"), minimum=1, maximum=65535)
    period = number_field(
        doc.get("period_s", DEFAULT_PROBE_PERIOD_S),
        join_field(field, "period_s"),
        minimum=MIN_PROBE_PERIOD_S,
        maximum=MAX_PROBE_PERIOD_S,
    )
    timeout = number_field(
        doc.get("timeout_s", min(DEFAULT_PROBE_TIMEOUT_S, period)),
        join_field(field, "timeout_s"),
        minimum=0.001,
        maximum=MAX_PROBE_PERIOD_S,
    )
    if timeout > period:
        raise SpecError(
            join_field(field, "timeout_s"),
            f"must be at most period_s ({period:g}), got {timeout:g}",
        )
    return ProbeSpec(port=port, http=http, period_s=period, timeout_s=timeout)


def _path(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.startswith("/"):
        raise SpecError(field, "must be a path starting with '/', e.g. /healthz")
    if len(value) > MAX_PROBE_PATH:
        raise SpecError(field, f"is {len(value)} characters; at most {MAX_PROBE_PATH}")
    if not (value.isascii() and value.isprintable()) or " " in value:
        raise SpecError(field, "must be printable ASCII without spaces")
    return value


def service_to_document(service: ServiceSpec) -> dict[str, object]:
    """The inverse of :func:`parse_service`."""
    document: dict[str, object] = {"latency_sensitive": service.latency_sensitive}
    probe = service.probe
    if probe is not None:
        probe_doc: dict[str, object] = {"http": probe.http} if probe.http else {"tcp": True}
        probe_doc.update(port=probe.port, period_s=probe.period_s, timeout_s=probe.timeout_s)
        document["probe"] = probe_doc
    return document
