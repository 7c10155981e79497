"""The structured path into the system (a protobuf JobSpec, ``spec_document_from_pb``) is held to
the same rules as YAML: it ends in ``parse_job_spec``.  The wire's own ranges are wider than the
spec's (int32, int64, any double), so every edge of them is refused with the field named."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from plumbing.wire import spec_document_from_pb, spec_to_pb
from policies.scheduling.jobspec import (
    INT32_MAX,
    INT32_MIN,
    MAX_PHASES,
    SpecError,
    parse_job_spec,
)
from sluice_pb import common_pb2 as pb
from tests.builders import job_doc, job_spec, phase_doc

INT64_MAX = 2**63 - 1


def message() -> pb.JobSpec:
    return spec_to_pb(
        job_spec(phase_doc("map", 2, cpu=0.5, memory_mb=64, command=("sh", "-c", "true")))
    )


def parsed(spec: pb.JobSpec) -> object:
    return parse_job_spec(spec_document_from_pb(spec))


Edit = Callable[[pb.JobSpec], None]


def _set(path: str, value: object) -> Edit:
    """An edit setting ``path`` (e.g. ``phases.0.resources.cpu``) of the message to ``value``."""

    def edit(spec: pb.JobSpec) -> None:
        *parents, last = path.split(".")
        target: object = spec
        for part in parents:
            target = target[int(part)] if part.isdigit() else getattr(target, part)  # type: ignore[index]
        setattr(target, last, value)

    return edit


def _add_phases(count: int) -> Edit:
    def edit(spec: pb.JobSpec) -> None:
        for index in range(count):
            spec.phases.add().CopyFrom(spec.phases[0])
            spec.phases[-1].name = f"p{index}"

    return edit


def _command(*args: str) -> Edit:
    def edit(spec: pb.JobSpec) -> None:
        del spec.phases[0].command[:]
        spec.phases[0].command.extend(args)

    return edit


# (edit of a valid message, the exact message)
REFUSALS: list[tuple[Edit, str]] = [
    (_set("max_retries", INT32_MAX), f"max_retries: must be at most 100, got {INT32_MAX}"),
    (_set("max_retries", -1), "max_retries: must be at least 0, got -1"),
    (
        _set("phases.0.tasks", INT32_MAX),
        f"phases[0].tasks: must be at most 100000, got {INT32_MAX}",
    ),
    (_set("phases.0.tasks", 0), "phases[0].tasks: must be positive, got 0"),  # unset
    (_set("phases.0.tasks", INT32_MIN), f"phases[0].tasks: must be positive, got {INT32_MIN}"),
    (
        _set("phases.0.resources.memory_mb", INT64_MAX),
        f"phases[0].resources.memory_mb: must be at most 67108864, got {INT64_MAX}",
    ),
    (
        _set("phases.0.resources.memory_mb", -1),
        "phases[0].resources.memory_mb: must be positive, got -1",
    ),
    (
        _set("phases.0.resources.memory_mb", 0),
        "phases[0].resources.memory_mb: must be positive, got 0",
    ),
    (
        _set("phases.0.resources.cpu", math.nan),
        "phases[0].resources.cpu: must be a finite number, got nan",
    ),
    (
        _set("phases.0.resources.cpu", math.inf),
        "phases[0].resources.cpu: must be a finite number, got inf",
    ),
    (
        _set("phases.0.resources.cpu", -math.inf),
        "phases[0].resources.cpu: must be a finite number, got -inf",
    ),
    (_set("phases.0.resources.cpu", 0.0), "phases[0].resources.cpu: must be positive, got 0.0"),
    (_set("phases.0.resources.cpu", -0.0), "phases[0].resources.cpu: must be positive, got -0.0"),
    (
        _set("phases.0.resources.cpu", 5e-324),
        "phases[0].resources.cpu: must be at least 0.001, got 5e-324",
    ),
    (
        _set("phases.0.resources.cpu", 1e308),
        "phases[0].resources.cpu: must be at most 4096, got 1e+308",
    ),
    (
        _set("phases.0.name", "__master__"),
        "phases[0].name: must be at most 63 letters, digits, '-', '_' or '.', starting with a "
        "letter or digit",
    ),
    (_set("name", ""), "name: must be a non-empty string"),
    (_command(), "phases[0].command: must not be empty"),
    (
        _command("echo", "a\0b"),
        "phases[0].command[1]: contains a NUL character, which no argument can",
    ),
    (_command("echo", "x" * 200 * 1024), "phases[0].command[1]: is 204800 bytes; at most 131071"),
    (_set("phases.0.image", " "), "phases[0].image: must be a non-empty image reference"),
    (_add_phases(MAX_PHASES), f"phases: has {MAX_PHASES + 1} phases; at most {MAX_PHASES}"),
    # a reservation block set on the wire is validated like one written in YAML
    (_set("reservation.isolation", 1.0), "reservation.isolation: must be below 1, got 1"),
    (
        _set("reservation.isolation", math.nan),
        "reservation.isolation: must be in [0, 1], got nan",
    ),
    (
        _set("reservation.prereserve_at", -0.5),
        "reservation.prereserve_at: must be in [0, 1], got -0.5",
    ),
    (
        lambda spec: spec.reservation.MergeFrom(
            pb.ReservationSpec(straggler_copies=True, max_copies=-2)
        ),
        "reservation.straggler_copies: must be at least 0, got -2",
    ),
    (
        _set("reservation.prior.alpha", 0.5),
        "reservation.prior.alpha: must be above 1, got 0.5",
    ),
]


@pytest.mark.parametrize(("edit", "expected"), REFUSALS, ids=range(len(REFUSALS)))
def test_structured_specs_are_held_to_the_same_rules(edit: Edit, expected: str) -> None:
    spec = message()
    edit(spec)
    with pytest.raises(SpecError) as caught:
        parsed(spec)
    assert str(caught.value) == expected


def test_the_wire_cannot_carry_a_priority_beyond_int32() -> None:
    spec = message()
    for priority in (INT32_MAX, INT32_MIN):
        spec.priority = priority
        assert parse_job_spec(spec_document_from_pb(spec)).priority == priority
    with pytest.raises(ValueError):
        spec.priority = INT32_MAX + 1


def test_a_valid_spec_round_trips() -> None:
    original = job_spec(
        phase_doc("extract", 4, cpu=0.25, memory_mb=128, image="busybox:1.36"),
        phase_doc("load", 1, after=["extract"], command=("sh", "-c", "echo ✓")),
        priority=INT32_MIN,
        max_retries=0,
    )
    assert parse_job_spec(spec_document_from_pb(spec_to_pb(original))) == original


@pytest.mark.parametrize(
    "reservation",
    [
        None,
        {},
        {"isolation": 0.0, "prereserve_at": 1.0, "straggler_copies": True},
        {"isolation": 0.4, "straggler_copies": 8, "prior": {"alpha": 1.6, "t_min": 10}},
    ],
)
def test_a_reservation_block_crosses_the_wire(reservation: dict[str, object] | None) -> None:
    extra = {} if reservation is None else {"reservation": reservation}
    spec = parse_job_spec(job_doc(phase_doc("map"), **extra))
    message = spec_to_pb(spec)
    assert message.HasField("reservation") == (reservation is not None)
    assert parsed(message) == spec


@pytest.mark.parametrize(
    "service",
    [
        None,
        {},
        {"latency_sensitive": True, "probe": {"http": "/healthz", "port": 8080}},
        {"probe": {"tcp": True, "port": 6379, "period_s": 0.5, "timeout_s": 0.1}},
    ],
)
def test_a_service_crosses_the_wire(service: dict[str, object] | None) -> None:
    extra = {} if service is None else {"kind": "service", "service": service}
    spec = parse_job_spec(job_doc(phase_doc("server"), **extra))
    message = spec_to_pb(spec)
    assert message.kind == spec.kind and message.HasField("service") == (service is not None)
    assert parsed(message) == spec


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_set("kind", "cron"), "kind: must be batch or service, got 'cron'"),
        (
            lambda spec: spec.service.probe.MergeFrom(pb.ProbeSpec(http="/", port=0)),
            "service.probe.port: must be positive, got 0",
        ),
        (
            lambda spec: spec.service.probe.MergeFrom(pb.ProbeSpec(http="x", port=80)),
            "service.probe.http: must be a path starting with '/', e.g. /healthz",
        ),
    ],
)
def test_a_structured_service_is_held_to_the_same_rules(edit: Edit, expected: str) -> None:
    spec = message()
    spec.kind = "service"
    edit(spec)
    with pytest.raises(SpecError) as caught:
        parsed(spec)
    assert str(caught.value) == expected
