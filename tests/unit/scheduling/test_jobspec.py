"""Job specifications: every refusal names the field and the problem on one line, every number
is held to its wire type or a saner bound, every string to what can be sent and executed;
documents round-trip."""

from __future__ import annotations

import dataclasses
import graphlib
import itertools
import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plumbing.wire import spec_document_from_pb, spec_to_pb
from policies.scheduling.jobspec import (
    DEFAULT_MAX_RETRIES,
    INT32_MAX,
    INT32_MIN,
    MAX_ARG_BYTES,
    MAX_COMMAND_ARGS,
    MAX_COMMAND_BYTES,
    MAX_CPU,
    MAX_IMAGE_LENGTH,
    MAX_MEMORY_MB,
    MAX_PHASES,
    MAX_RETRIES_LIMIT,
    MAX_SPEC_BYTES,
    MAX_TASKS_PER_JOB,
    MAX_TASKS_PER_PHASE,
    MIN_CPU,
    JobSpec,
    PhaseSpec,
    ReservationSpec,
    SpecError,
    TaskTimePrior,
    check_fits_cluster,
    job_spec_to_document,
    parse_job_spec,
)
from policies.scheduling.resources import Resources
from tests.builders import job_doc, job_spec, phase_doc, res


def test_minimal_document_gets_the_defaults():
    spec = parse_job_spec(job_doc(phase_doc("map", 3, cpu=0.5, memory_mb=128)))
    assert spec == JobSpec(
        name="job",
        priority=0,
        phases=(PhaseSpec("map", 3, ("true",), res(0.5, 128)),),
        max_retries=DEFAULT_MAX_RETRIES,
    )
    assert spec.total_tasks() == 3


def test_every_field_is_kept_in_the_order_written():
    spec = parse_job_spec(
        job_doc(
            phase_doc("b", 2, cpu=2, memory_mb=64, image="busybox:1.36"),
            phase_doc("a", 1, after=["b"], command=["sh", "-c", "exit 0"]),
            name="etl.v2",
            priority=-3,
            max_retries=0,
        )
    )
    assert [p.name for p in spec.phases] == ["b", "a"]
    assert spec.priority == -3
    assert spec.max_retries == 0
    assert spec.phase("b").image == "busybox:1.36"
    assert spec.phase("b").resources == res(2.0, 64)
    assert isinstance(spec.phase("b").resources.cpu, float)
    assert spec.phase("a").after == ("b",)
    assert spec.phase("a").command == ("sh", "-c", "exit 0")
    with pytest.raises(KeyError):
        spec.phase("c")


def _without(doc: dict[str, object], key: str) -> dict[str, object]:
    return {k: v for k, v in doc.items() if k != key}


NAME_RULE = "must be at most 63 letters, digits, '-', '_' or '.', starting with a letter or digit"
KIB = 1024


def _phases(count: int, **fields: object) -> list[dict[str, object]]:
    return [phase_doc(f"p{index}", **fields) for index in range(count)]  # type: ignore[arg-type]


# (document, the exact one-line message the user sees)
REFUSALS: list[tuple[object, str]] = [
    # the document and its keys
    ([1, 2], "job: must be a mapping, not a list"),
    (None, "job: must be a mapping, not null"),
    ({1: "x", "name": "j", "phases": []}, "job: keys must be strings, not an integer"),
    (
        job_doc(owner="me"),
        "owner: unknown field (allowed: name, priority, phases, max_retries, queue, reservation, kind, service, speculative, approximation, on_node_lost)",
    ),
    # a key is shown escaped and cut: the message stays one short line
    (
        job_doc(**{"a\nb": 1}),
        "'a\\nb': unknown field (allowed: name, priority, phases, max_retries, queue, reservation, kind, service, speculative, approximation, on_node_lost)",
    ),
    (
        job_doc(**{"k" * 100_000: 1}),
        f"'{'k' * 64}'...: unknown field (allowed: name, priority, phases, max_retries, queue, reservation, kind, service, speculative, approximation, on_node_lost)",
    ),
    (_without(job_doc(), "name"), "name: is required"),
    (_without(job_doc(), "phases"), "phases: is required"),
    # job fields
    (job_doc(name=""), "name: must be a non-empty string"),
    (job_doc(name=7), "name: must be a non-empty string"),
    (job_doc(name="a b"), f"name: {NAME_RULE}"),
    (job_doc(name="x" * 64), f"name: {NAME_RULE}"),
    (job_doc(name="_job"), f"name: {NAME_RULE}"),
    (job_doc(priority="high"), "priority: must be an integer, not a string"),
    (job_doc(priority=True), "priority: must be an integer, not a boolean"),
    (job_doc(priority=1.5), "priority: must be an integer, not a number"),
    # priority is int32 on the wire: one more broke ListJobs for everybody
    (job_doc(priority=2**31), "priority: must be at most 2147483647, got 2147483648"),
    (job_doc(priority=-(2**31) - 1), "priority: must be at least -2147483648, got -2147483649"),
    (job_doc(priority=10**5000), "priority: must be at most 2147483647, got a huge number"),
    (
        job_doc(priority=-(10**5000)),
        "priority: must be at least -2147483648, got a huge negative number",
    ),
    (job_doc(max_retries=-1), "max_retries: must be at least 0, got -1"),
    (job_doc(max_retries=None), "max_retries: must be an integer, not null"),
    (
        job_doc(max_retries=MAX_RETRIES_LIMIT + 1),
        f"max_retries: must be at most {MAX_RETRIES_LIMIT}, got {MAX_RETRIES_LIMIT + 1}",
    ),
    (job_doc(max_retries=2**31), f"max_retries: must be at most {MAX_RETRIES_LIMIT}, got {2**31}"),
    ({"name": "j", "phases": []}, "phases: must be a non-empty list of phases"),
    ({"name": "j", "phases": {"a": 1}}, "phases: must be a non-empty list of phases"),
    (
        job_doc(*_phases(MAX_PHASES + 1)),
        f"phases: has {MAX_PHASES + 1} phases; at most {MAX_PHASES}",
    ),
    (
        job_doc(*_phases(MAX_TASKS_PER_JOB // MAX_TASKS_PER_PHASE + 1, tasks=MAX_TASKS_PER_PHASE)),
        f"phases: have {MAX_TASKS_PER_JOB + MAX_TASKS_PER_PHASE} tasks in all; "
        f"at most {MAX_TASKS_PER_JOB}",
    ),
    (
        # five commands of 250,002 bytes, each phase's name ("p0\0") and the job's ("job\0")
        job_doc(*_phases(5, command=["a" * 125_000] * 2)),
        f"job: its names, commands, after lists and images take {5 * (250_002 + 3) + 4} bytes; "
        f"at most {MAX_SPEC_BYTES}",
    ),
    # phase fields
    (job_doc("map"), "phases[0]: must be a mapping, not a string"),
    (
        job_doc(phase_doc(retries=3)),
        "phases[0].retries: unknown field (allowed: name, tasks, command, resources, after, image, droppable)",
    ),
    (
        job_doc(phase_doc("a"), _without(phase_doc("b"), "command")),
        "phases[1].command: is required",
    ),
    (job_doc(_without(phase_doc(), "tasks")), "phases[0].tasks: is required"),
    (job_doc(_without(phase_doc(), "resources")), "phases[0].resources: is required"),
    (job_doc(phase_doc(tasks=0)), "phases[0].tasks: must be positive, got 0"),
    (job_doc(phase_doc(tasks=-2)), "phases[0].tasks: must be positive, got -2"),
    (job_doc(phase_doc(tasks="4")), "phases[0].tasks: must be an integer, not a string"),
    (
        job_doc(phase_doc(tasks=MAX_TASKS_PER_PHASE + 1)),
        f"phases[0].tasks: must be at most {MAX_TASKS_PER_PHASE}, got {MAX_TASKS_PER_PHASE + 1}",
    ),
    (
        job_doc(phase_doc(tasks=2**31)),
        f"phases[0].tasks: must be at most {MAX_TASKS_PER_PHASE}, got {2**31}",
    ),
    (job_doc(phase_doc(name="")), "phases[0].name: must be a non-empty string"),
    # a phase name cannot collide with a marker of the system's own, nor read as an option
    (job_doc(phase_doc(name="__master__")), f"phases[0].name: {NAME_RULE}"),
    (job_doc(phase_doc(name="__x")), f"phases[0].name: {NAME_RULE}"),
    (job_doc(phase_doc(name=".x")), f"phases[0].name: {NAME_RULE}"),
    (job_doc(phase_doc(name="-x")), f"phases[0].name: {NAME_RULE}"),
    (job_doc(phase_doc(name="map\n")), f"phases[0].name: {NAME_RULE}"),
    (job_doc(phase_doc(name="é")), f"phases[0].name: {NAME_RULE}"),
    (job_doc(phase_doc(command=[])), "phases[0].command: must not be empty"),
    (
        job_doc({**phase_doc(), "command": "echo hi"}),
        "phases[0].command: must be a list of strings, not a string",
    ),
    (
        job_doc(phase_doc(command=["echo", 1])),
        "phases[0].command[1]: must be a string, not an integer",
    ),
    # execve refuses an argument of 128 KiB or more (MAX_ARG_STRLEN counts the NUL)
    (
        job_doc(phase_doc(command=["echo", "x" * 200 * KIB])),
        f"phases[0].command[1]: is {200 * KIB} bytes; at most {MAX_ARG_BYTES}",
    ),
    (
        job_doc(phase_doc(command=["echo", "x" * (MAX_ARG_BYTES + 1)])),
        f"phases[0].command[1]: is {MAX_ARG_BYTES + 1} bytes; at most {MAX_ARG_BYTES}",
    ),
    (
        # 70,000 characters, 140,000 bytes: the kernel counts bytes
        job_doc(phase_doc(command=["echo", "é" * 70_000])),
        f"phases[0].command[1]: is 140000 bytes; at most {MAX_ARG_BYTES}",
    ),
    (
        job_doc(phase_doc(command=["x" * 100_000] * 3)),
        f"phases[0].command: is 300003 bytes (with a NUL after each argument); "
        f"at most {MAX_COMMAND_BYTES}",
    ),
    (
        job_doc(phase_doc(command=["a"] * (MAX_COMMAND_ARGS + 1))),
        f"phases[0].command: has {MAX_COMMAND_ARGS + 1} items; at most {MAX_COMMAND_ARGS}",
    ),
    (
        job_doc(phase_doc(command=["echo", "a\0b"])),
        "phases[0].command[1]: contains a NUL character, which no argument can",
    ),
    (
        job_doc(phase_doc(command=["echo", "a\ud800"])),
        "phases[0].command[1]: is not valid Unicode (a lone surrogate at character 1)",
    ),
    (
        job_doc({**phase_doc(), "after": "a"}),
        "phases[0].after: must be a list of strings, not a string",
    ),
    (job_doc(phase_doc(image="  ")), "phases[0].image: must be a non-empty image reference"),
    (job_doc(phase_doc(image=3)), "phases[0].image: must be a non-empty image reference"),
    (
        job_doc(phase_doc(image="busy box")),
        "phases[0].image: must be printable ASCII without spaces, e.g. busybox:1.36",
    ),
    (
        job_doc(phase_doc(image="busybox\n")),
        "phases[0].image: must be printable ASCII without spaces, e.g. busybox:1.36",
    ),
    (
        job_doc(phase_doc(image="x" * (MAX_IMAGE_LENGTH + 1))),
        f"phases[0].image: is {MAX_IMAGE_LENGTH + 1} characters; at most {MAX_IMAGE_LENGTH}",
    ),
    # resources
    (job_doc(phase_doc(resources=2)), "phases[0].resources: must be a mapping, not an integer"),
    (
        job_doc(phase_doc(resources={"cpu": 1, "memory_mb": 1, "gpu": 1})),
        "phases[0].resources.gpu: unknown field (allowed: cpu, memory_mb)",
    ),
    (job_doc(phase_doc(resources={"cpu": 1})), "phases[0].resources.memory_mb: is required"),
    (job_doc(phase_doc(cpu=0)), "phases[0].resources.cpu: must be positive, got 0"),
    (job_doc(phase_doc(cpu=-1)), "phases[0].resources.cpu: must be positive, got -1"),
    (job_doc(phase_doc(cpu=-0.5)), "phases[0].resources.cpu: must be positive, got -0.5"),
    (job_doc(phase_doc(cpu=-0.0)), "phases[0].resources.cpu: must be positive, got -0.0"),
    (job_doc(phase_doc(cpu=math.inf)), "phases[0].resources.cpu: must be a finite number, got inf"),
    (
        job_doc(phase_doc(cpu=-math.inf)),
        "phases[0].resources.cpu: must be a finite number, got -inf",
    ),
    (job_doc(phase_doc(cpu=math.nan)), "phases[0].resources.cpu: must be a finite number, got nan"),
    (job_doc(phase_doc(cpu="1")), "phases[0].resources.cpu: must be a number, not a string"),
    (
        job_doc(phase_doc(cpu=10**400)),
        "phases[0].resources.cpu: must be at most 4096, got a huge number",
    ),
    (job_doc(phase_doc(cpu=True)), "phases[0].resources.cpu: must be a number, not a boolean"),
    (job_doc(phase_doc(cpu=5e-324)), "phases[0].resources.cpu: must be at least 0.001, got 5e-324"),
    (job_doc(phase_doc(cpu=0.0009)), "phases[0].resources.cpu: must be at least 0.001, got 0.0009"),
    (
        job_doc(phase_doc(cpu=MAX_CPU + 1)),
        "phases[0].resources.cpu: must be at most 4096, got 4097.0",
    ),
    (job_doc(phase_doc(memory_mb=0)), "phases[0].resources.memory_mb: must be positive, got 0"),
    (job_doc(phase_doc(memory_mb=-1)), "phases[0].resources.memory_mb: must be positive, got -1"),
    (
        job_doc(phase_doc(memory_mb=0.5)),
        "phases[0].resources.memory_mb: must be an integer, not a number",
    ),
    (
        job_doc(phase_doc(memory_mb=2**63)),
        f"phases[0].resources.memory_mb: must be at most {MAX_MEMORY_MB}, got {2**63}",
    ),
    # the DAG
    (
        job_doc(phase_doc("a"), phase_doc("b"), phase_doc("a")),
        "phases[2].name: duplicate phase name 'a' (also phases[0])",
    ),
    (
        job_doc(phase_doc("map"), phase_doc("sum", after=["map", "reduce"])),
        "phases[1].after: unknown phase 'reduce'",
    ),
    (
        job_doc(phase_doc("map"), phase_doc("sum", after=["map", "x\ny"])),
        "phases[1].after: unknown phase 'x\\ny'",
    ),
    (
        job_doc(phase_doc("a"), phase_doc("b", after=["a", "a"])),
        "phases[1].after[1]: 'a' is listed twice",
    ),
    (
        job_doc(phase_doc("a", after=[f"p{i}" for i in range(MAX_PHASES + 1)])),
        f"phases[0].after: has {MAX_PHASES + 1} items; at most {MAX_PHASES}",
    ),
    (job_doc(phase_doc("a", after=["a"])), "phases: dependency cycle a -> a"),
    (
        job_doc(
            phase_doc("a", after=["c"]), phase_doc("b", after=["a"]), phase_doc("c", after=["b"])
        ),
        "phases: dependency cycle a -> c -> b -> a",
    ),
    (
        # the cycle is found behind an acyclic prefix and named without it
        job_doc(phase_doc("x"), phase_doc("y", after=["x", "z"]), phase_doc("z", after=["y"])),
        "phases: dependency cycle y -> z -> y",
    ),
]


RESERVATION_REFUSALS: list[tuple[object, str]] = [
    ([], "reservation: must be a mapping, not a list"),
    (
        {"deadline": 3},
        "reservation.deadline: unknown field (allowed: isolation, prereserve_at, "
        "straggler_copies, prior)",
    ),
    ({"isolation": 1}, "reservation.isolation: must be below 1, got 1"),
    ({"isolation": -0.1}, "reservation.isolation: must be in [0, 1], got -0.1"),
    ({"isolation": "high"}, "reservation.isolation: must be a number in [0, 1], not a string"),
    ({"isolation": True}, "reservation.isolation: must be a number in [0, 1], not a boolean"),
    ({"prereserve_at": 2}, "reservation.prereserve_at: must be in [0, 1], got 2"),
    ({"straggler_copies": -1}, "reservation.straggler_copies: must be at least 0, got -1"),
    (
        {"straggler_copies": "on"},
        "reservation.straggler_copies: must be true, false or a number of copies, not a string",
    ),
    (
        {"straggler_copies": 1.5},
        "reservation.straggler_copies: must be true, false or a number of copies, not a number",
    ),
    ({"prior": {"alpha": 1.6}}, "reservation.prior.t_min: is required"),
    ({"prior": {"alpha": 1, "t_min": 5}}, "reservation.prior.alpha: must be above 1, got 1"),
    ({"prior": {"alpha": 2, "t_min": 0}}, "reservation.prior.t_min: must be positive, got 0"),
    ({"prior": 3}, "reservation.prior: must be a mapping, not an integer"),
]
REFUSALS += [(job_doc(reservation=block), message) for block, message in RESERVATION_REFUSALS]


@pytest.mark.parametrize(("document", "message"), REFUSALS)
def test_refusal_names_field_and_problem(document: object, message: str):
    with pytest.raises(SpecError) as caught:
        parse_job_spec(document)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)
    field, problem = message.split(": ", 1)
    assert (caught.value.field, caught.value.problem) == (field, problem)


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({}, ReservationSpec(isolation=0.9, prereserve_at=0.8, max_copies=0, prior=None)),
        ({"straggler_copies": True}, ReservationSpec(max_copies=None)),
        ({"straggler_copies": False}, ReservationSpec(max_copies=0)),
        ({"straggler_copies": 4}, ReservationSpec(max_copies=4)),
        ({"isolation": 0, "prereserve_at": 1}, ReservationSpec(isolation=0.0, prereserve_at=1.0)),
        ({"prior": {"alpha": 1.6, "t_min": 10}}, ReservationSpec(prior=TaskTimePrior(1.6, 10.0))),
    ],
)
def test_a_reservation_block_and_its_defaults(block: dict[str, object], expected: object):
    assert parse_job_spec(job_doc(reservation=block)).reservation == expected
    assert parse_job_spec(job_doc()).reservation is None  # absent: the RM's default applies


def _first(spec: JobSpec) -> PhaseSpec:
    return spec.phases[0]


# Every bound is inclusive: (document, what to read from its spec, the value read)
BOUNDARIES: list[tuple[dict[str, object], Callable[[JobSpec], object], object]] = [
    (job_doc(priority=INT32_MAX), lambda s: s.priority, INT32_MAX),
    (job_doc(priority=INT32_MIN), lambda s: s.priority, INT32_MIN),
    (job_doc(max_retries=MAX_RETRIES_LIMIT), lambda s: s.max_retries, MAX_RETRIES_LIMIT),
    (job_doc(phase_doc(tasks=MAX_TASKS_PER_PHASE)), lambda s: _first(s).tasks, MAX_TASKS_PER_PHASE),
    (job_doc(phase_doc(cpu=MIN_CPU)), lambda s: _first(s).resources.cpu, MIN_CPU),
    (job_doc(phase_doc(cpu=int(MAX_CPU))), lambda s: _first(s).resources.cpu, MAX_CPU),
    (
        job_doc(phase_doc(memory_mb=MAX_MEMORY_MB)),
        lambda s: _first(s).resources.memory_mb,
        MAX_MEMORY_MB,
    ),
    (
        job_doc(phase_doc(command=["x" * MAX_ARG_BYTES])),
        lambda s: len(_first(s).command[0]),
        MAX_ARG_BYTES,
    ),
    (
        # two arguments of 131,071 bytes and their NULs: exactly MAX_COMMAND_BYTES
        job_doc(phase_doc(command=["x" * (MAX_COMMAND_BYTES // 2 - 1)] * 2)),
        lambda s: sum(len(arg) + 1 for arg in _first(s).command),
        MAX_COMMAND_BYTES,
    ),
    (
        job_doc(phase_doc(command=["a"] * MAX_COMMAND_ARGS)),
        lambda s: len(_first(s).command),
        MAX_COMMAND_ARGS,
    ),
    (
        job_doc(phase_doc(image="x" * MAX_IMAGE_LENGTH)),
        lambda s: len(_first(s).image or ""),
        MAX_IMAGE_LENGTH,
    ),
    (job_doc(*_phases(MAX_PHASES)), lambda s: len(s.phases), MAX_PHASES),
    (
        job_doc(*_phases(MAX_TASKS_PER_JOB // MAX_TASKS_PER_PHASE, tasks=MAX_TASKS_PER_PHASE)),
        lambda s: s.total_tasks(),
        MAX_TASKS_PER_JOB,
    ),
    # names may start with a digit, and hold '_' or '.' after their first character
    (
        job_doc(phase_doc("0ad"), phase_doc("a__master__"), phase_doc("v1.2-rc_3")),
        lambda s: [p.name for p in s.phases],
        ["0ad", "a__master__", "v1.2-rc_3"],
    ),
    (job_doc(name="9-lives"), lambda s: s.name, "9-lives"),
]


@pytest.mark.parametrize(("document", "read", "value"), BOUNDARIES)
def test_values_at_the_bounds_are_accepted(
    document: dict[str, object], read: Callable[[JobSpec], object], value: object
):
    assert read(parse_job_spec(document)) == value


def test_diamond_dag_is_accepted():
    spec = parse_job_spec(
        job_doc(
            phase_doc("a"),
            phase_doc("b", after=["a"]),
            phase_doc("c", after=["a"]),
            phase_doc("d", after=["b", "c"]),
        )
    )
    assert spec.phase("d").after == ("b", "c")


@pytest.mark.parametrize("closed", [False, True])
def test_a_long_chain_listed_downstream_first_gets_an_answer(closed: bool):
    # p0 waits for p1, which waits for p2, ...: as many as a job may have, deep enough to
    # overflow a recursive search (Python's default limit is 1000 frames)
    n = MAX_PHASES
    phases = [phase_doc(f"p{i}", after=[f"p{i + 1}"] if i < n - 1 else []) for i in range(n)]
    if closed:
        phases[-1] = phase_doc(f"p{n - 1}", after=["p0"])
        with pytest.raises(SpecError, match=r"^phases: dependency cycle p0 -> p1 -> .* -> p0$"):
            parse_job_spec(job_doc(*phases))
    else:
        assert len(parse_job_spec(job_doc(*phases)).phases) == n


@given(st.lists(st.lists(st.integers(0, 5), max_size=3, unique=True), min_size=1, max_size=6))
def test_a_named_cycle_is_real_and_an_accepted_dag_has_none(edges: list[list[int]]):
    names = [f"p{i}" for i in range(len(edges))]
    after = {
        name: [f"p{j}" for j in targets if j < len(names)]
        for name, targets in zip(names, edges, strict=True)
    }
    document = job_doc(*[phase_doc(name, after=after[name]) for name in names])
    sorter = graphlib.TopologicalSorter(after)
    try:
        parse_job_spec(document)
    except SpecError as error:
        assert error.field == "phases"
        cycle = error.problem.removeprefix("dependency cycle ").split(" -> ")
        assert cycle[0] == cycle[-1]
        assert len(set(cycle)) == len(cycle) - 1
        assert all(b in after[a] for a, b in itertools.pairwise(cycle))
        with pytest.raises(graphlib.CycleError):
            sorter.prepare()
    else:
        sorter.prepare()


# --------------------------------------------------------------------------- check_fits_cluster


@pytest.mark.parametrize(
    ("capacities", "message"),
    [
        ([], None),  # nodes may register later
        ([res(4.0, 4096)], None),
        ([res(2.0, 1024), res(1.0, 8192)], None),  # exactly the size of the first node
        (
            [res(1.0, 8192), res(8.0, 512)],  # each dimension fits somewhere, never both at once
            "phases[1].resources: 2 cpu / 1024 MiB per task fits on no node "
            "(largest: 8 cpu, 8192 MiB)",
        ),
        (
            [res(1.5, 4096)],
            "phases[1].resources: 2 cpu / 1024 MiB per task fits on no node "
            "(largest: 1.5 cpu, 4096 MiB)",
        ),
    ],
)
def test_check_fits_cluster(capacities: list[Resources], message: str | None):
    spec = job_spec(
        phase_doc("small", cpu=0.5, memory_mb=64), phase_doc("big", cpu=2, memory_mb=1024)
    )
    if message is None:
        check_fits_cluster(spec, capacities)
        return
    with pytest.raises(SpecError) as caught:
        check_fits_cluster(spec, capacities)
    assert str(caught.value) == message


# --------------------------------------------------------------------------- round trip

names = st.from_regex(r"[abcxyz019][abcxyz019._-]{0,7}", fullmatch=True)
# Any Unicode but the NUL, which no argument can hold, and lone surrogates, which no UTF-8
# command line can (the spec refuses both).
arguments = st.text(st.characters(exclude_characters="\0", codec="utf-8"), max_size=5)


@st.composite
def specs(draw: st.DrawFn) -> JobSpec:
    phase_names = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    phases = []
    for index, name in enumerate(phase_names):
        after = draw(st.lists(st.sampled_from(phase_names[:index]), unique=True)) if index else []
        extra = {"image": draw(names)} if draw(st.booleans()) else {}
        phases.append(
            phase_doc(
                name,
                draw(st.integers(1, MAX_TASKS_PER_PHASE)),
                cpu=draw(st.floats(MIN_CPU, MAX_CPU)),
                memory_mb=draw(st.integers(1, MAX_MEMORY_MB)),
                after=after,
                command=draw(st.lists(arguments, min_size=1, max_size=3)),
                **extra,
            )
        )
    spec = job_spec(
        *phases,
        name=draw(names),
        priority=draw(st.integers(INT32_MIN, INT32_MAX)),
        max_retries=draw(st.integers(0, MAX_RETRIES_LIMIT)),
    )
    if draw(st.booleans()):
        return spec
    reservation = ReservationSpec(
        isolation=draw(st.floats(0, 1, exclude_max=True)),
        prereserve_at=draw(st.floats(0, 1)),
        max_copies=draw(st.none() | st.integers(0, 100_000)),
        prior=draw(
            st.none()
            | st.builds(TaskTimePrior, st.floats(1, 1e6, exclude_min=True), st.floats(1e-3, 1e9))
        ),
    )
    return dataclasses.replace(spec, reservation=reservation)


@given(specs())
def test_document_round_trip(spec: JobSpec):
    assert parse_job_spec(job_spec_to_document(spec)) == spec


APPROXIMATION_REFUSALS: list[tuple[object, str]] = [
    (
        job_doc(phase_doc(droppable="yes")),
        "phases[0].droppable: must be true or false, not a string",
    ),
    (
        job_doc(approximation={"drop_ratio": 0.2}),
        "approximation: no phase is droppable (mark those that may be with droppable: true)",
    ),
    (
        job_doc(phase_doc(droppable=True), approximation={"drop_ratio": 1.5}),
        "approximation.drop_ratio: must be in [0, 1], got 1.5",
    ),
    (
        job_doc(phase_doc(droppable=True), approximation={}),
        "approximation.drop_ratio: is required",
    ),
    (
        job_doc(phase_doc(droppable=True), kind="service"),
        "phases[0].droppable: a service's tasks run until killed: none drops",
    ),
]


@pytest.mark.parametrize(("document", "message"), APPROXIMATION_REFUSALS)
def test_approximation_refusals_name_field_and_problem(document: object, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job_spec(document)
    assert str(caught.value) == message


def test_droppable_phases_and_the_jobs_drop_ratio_round_trip() -> None:
    spec = parse_job_spec(
        job_doc(
            phase_doc("map", 10, droppable=True),
            phase_doc("reduce", 2, after=["map"]),
            approximation={"drop_ratio": 0.2},
        )
    )
    assert [p.droppable for p in spec.phases] == [True, False]
    assert spec.approximation is not None and spec.approximation.drop_ratio == 0.2
    assert parse_job_spec(job_spec_to_document(spec)) == spec
    assert parse_job_spec(spec_document_from_pb(spec_to_pb(spec))) == spec
