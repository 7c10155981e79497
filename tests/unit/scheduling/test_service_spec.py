"""A job spec's ``kind: service`` and its ``service`` block (ROSE's latency-sensitive
long-running applications): defaults, round trips and one-line refusals."""

from __future__ import annotations

import pytest

from policies.scheduling.jobspec import SpecError, job_spec_to_document, parse_job_spec
from policies.scheduling.service_spec import ProbeSpec, ServiceSpec
from tests.builders import job_doc, phase_doc


def service_doc(block: object = None, **extra: object) -> dict[str, object]:
    fields: dict[str, object] = {"kind": "service", **extra}
    if block is not None:
        fields["service"] = block
    return job_doc(phase_doc("server", 2), **fields)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (job_doc(), None),  # a batch job
        (job_doc(kind="batch"), None),
        (service_doc(), ServiceSpec()),
        (service_doc({"latency_sensitive": True}), ServiceSpec(latency_sensitive=True)),
        (
            service_doc({"probe": {"http": "/healthz", "port": 8080}}),
            ServiceSpec(probe=ProbeSpec(port=8080, http="/healthz")),
        ),
        (
            service_doc({"probe": {"tcp": True, "port": 6379, "period_s": 0.5}}),
            ServiceSpec(probe=ProbeSpec(port=6379, period_s=0.5, timeout_s=0.5)),
        ),
        (
            service_doc({"probe": {"http": "/", "port": 1, "period_s": 2, "timeout_s": 0.25}}),
            ServiceSpec(probe=ProbeSpec(port=1, http="/", period_s=2.0, timeout_s=0.25)),
        ),
    ],
)
def test_a_service_block_and_its_defaults(document: dict[str, object], expected: object):
    spec = parse_job_spec(document)
    assert spec.service == expected
    assert spec.kind == ("batch" if expected is None else "service")
    assert parse_job_spec(job_spec_to_document(spec)) == spec


def probe(**fields: object) -> dict[str, object]:
    return service_doc({"probe": fields})


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (job_doc(kind="daemon"), "kind: must be batch or service, got 'daemon'"),
        (job_doc(kind=True), "kind: must be batch or service, got a boolean"),
        (job_doc(service={}), "service: only a job of kind: service has a service block"),
        (
            job_doc(phase_doc("a"), phase_doc("b", after=["a"]), kind="service"),
            "phases[1].after: a service's phases run side by side: none waits for another",
        ),
        (
            service_doc(reservation={"isolation": 0.5}),
            "reservation: a service has no barriers to keep slots across",
        ),
        (service_doc([]), "service: must be a mapping, not a list"),
        (
            service_doc({"latency": True}),
            "service.latency: unknown field (allowed: latency_sensitive, probe)",
        ),
        (
            service_doc({"latency_sensitive": "yes"}),
            "service.latency_sensitive: must be true or false, not a string",
        ),
        (probe(port=80), "service.probe: give either http (a path, e.g. /healthz) or tcp: true"),
        (
            probe(http="/", tcp=True, port=80),
            "service.probe: give either http (a path, e.g. /healthz) or tcp: true",
        ),
        (probe(http="/"), "service.probe.port: is required"),
        (probe(http="healthz", port=80), "service.probe.http: must be a path starting with '/'"),
        (probe(http="/a b", port=80), "service.probe.http: must be printable ASCII without spaces"),
        (probe(tcp=False, port=80), "service.probe.tcp: must be true, not a boolean"),
        (probe(tcp=True, port=0), "service.probe.port: must be positive, got 0"),
        (probe(tcp=True, port=70000), "service.probe.port: must be at most 65535, got 70000"),
        (probe(tcp=True, port=80, period_s=0), "service.probe.period_s: must be positive, got 0"),
        (
            probe(tcp=True, port=80, period_s=1, timeout_s=2),
            "service.probe.timeout_s: must be at most period_s (1), got 2",
        ),
    ],
)
def test_a_bad_service_is_refused_in_one_line_naming_the_field(
    document: dict[str, object], message: str
):
    with pytest.raises(SpecError) as caught:
        parse_job_spec(document)
    assert message in str(caught.value) and "\n" not in str(caught.value)
