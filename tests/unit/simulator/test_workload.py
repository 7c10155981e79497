"""Workload files: parsing, every refusal, generation and its determinism, alone_time."""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path

import pytest
import yaml

from policies.scheduling.jobspec import JobSpec, PhaseSpec, ReservationSpec
from policies.scheduling.resources import Resources
from simulator.distributions import Fixed, Pareto
from simulator.workload import (
    FixedArrival,
    PoissonArrival,
    SimJob,
    Workload,
    WorkloadError,
    alone_time,
    load_workload,
    parse_workload,
)

BATCH = """\
seed: 7
classes:
  - name: batch
    priority: 0
    max_retries: 3
    arrival: {process: poisson, rate: 0.5, count: 100}
    phases:
      - name: map
        tasks: 20
        cpu: 1
        memory_mb: 1024
        duration: {distribution: pareto, alpha: 1.6, t_min: 10}
      - name: reduce
        after: [map]
        tasks: 5
        cpu: 1
        memory_mb: 2048
        duration: 30
"""

SERVICE_CLASS = """\
  - name: service
    priority: 10
    arrival: {process: fixed, times: [0, 10, 20]}
    phases:
      - {name: serve, tasks: 2, cpu: 0.5, memory_mb: 256, duration: {distribution: exponential, mean: 60}}
"""


def workload(text: str) -> Workload:
    return parse_workload(yaml.safe_load(text))


def test_load_workload(tmp_path: Path) -> None:
    path = tmp_path / "workload.yaml"
    path.write_text(BATCH)
    loaded = load_workload(path)
    assert loaded.seed == 7
    (batch,) = loaded.classes
    assert batch.name == "batch"
    assert batch.arrival == PoissonArrival(rate=0.5, count=100, start=0.0)
    assert batch.durations == (Pareto(1.6, 10), Fixed(30))
    assert batch.spec.priority == 0
    assert batch.spec.max_retries == 3
    assert [phase.name for phase in batch.spec.phases] == ["map", "reduce"]
    assert batch.spec.phase("reduce").after == ("map",)
    assert batch.spec.phase("reduce").resources == Resources(cpu=1.0, memory_mb=2048)
    assert batch.spec.phase("map").command == ("true",)


def test_generated_jobs() -> None:
    jobs = workload(BATCH + SERVICE_CLASS).generate(7)
    assert len(jobs) == 103
    assert jobs == sorted(jobs, key=lambda job: (job.submit_time, job.name))
    assert len({job.name for job in jobs}) == len(jobs)
    batch = [job for job in jobs if job.job_class == "batch"]
    assert sorted(job.name for job in batch) == [f"batch-{i:06d}" for i in range(100)]
    for job in jobs:
        assert job.spec.name == job.name
        assert isinstance(job.spec, JobSpec)
        for phase in job.spec.phases:
            assert len(job.durations[phase.name]) == phase.tasks
            assert all(duration > 0 for duration in job.durations[phase.name])
    first = next(job for job in jobs if job.name == "batch-000000")
    assert first.spec.max_retries == 3
    assert all(duration >= 10 for duration in first.durations["map"])
    assert first.durations["reduce"] == (30.0,) * 5
    service = [job for job in jobs if job.job_class == "service"]
    assert [(job.name, job.submit_time) for job in service] == [
        ("service-000000", 0.0),
        ("service-000001", 10.0),
        ("service-000002", 20.0),
    ]
    assert service[0].spec.priority == 10
    assert service[0].spec.max_retries == 2  # the job spec's default


@pytest.mark.parametrize(
    ("marks", "coupled"),
    [
        ({}, frozenset()),
        ({"map": "false"}, frozenset()),
        ({"reduce": "true"}, frozenset({"reduce"})),
        ({"map": "true", "reduce": "true"}, frozenset({"map", "reduce"})),
    ],
)
def test_coupled_phases_are_carried_to_every_job(
    marks: dict[str, str], coupled: frozenset[str]
) -> None:
    text = BATCH
    for phase, value in marks.items():
        text = text.replace(f"name: {phase}\n", f"name: {phase}\n        coupled: {value}\n")
    (batch,) = workload(text).classes
    assert batch.coupled == coupled
    assert {job.coupled for job in workload(text).generate(7)} == {coupled}


def test_a_class_may_give_its_jobs_a_slot_reservation() -> None:
    text = BATCH.replace(
        "    max_retries: 3\n", "    max_retries: 3\n    reservation: {isolation: 0.5}\n"
    )
    (batch,) = workload(text).classes
    assert batch.spec.reservation == ReservationSpec(isolation=0.5)
    assert all(
        job.spec.reservation == ReservationSpec(isolation=0.5) for job in workload(text).generate(1)
    )
    assert workload(BATCH).classes[0].spec.reservation is None


def test_same_seed_same_jobs_different_seed_different_jobs() -> None:
    load = workload(BATCH + SERVICE_CLASS)
    assert load.generate(1) == load.generate(1)
    assert workload(BATCH + SERVICE_CLASS).generate(1) == load.generate(1)
    assert load.generate(1) != load.generate(2)


def test_adding_a_class_does_not_change_the_others() -> None:
    alone = workload(BATCH).generate(3)
    together = workload(BATCH + SERVICE_CLASS).generate(3)
    assert [job for job in together if job.job_class == "batch"] == alone


def test_changing_one_phase_does_not_change_another() -> None:
    before = workload(BATCH).generate(3)
    after = workload(BATCH.replace("duration: 30", "duration: 40")).generate(3)
    assert [job.submit_time for job in before] == [job.submit_time for job in after]
    assert [job.durations["map"] for job in before] == [job.durations["map"] for job in after]
    assert {job.durations["reduce"] for job in after} == {(40.0,) * 5}


def test_poisson_arrivals() -> None:
    text = BATCH.replace("rate: 0.5, count: 100", "rate: 2, count: 5000, start: 100")
    times = [job.submit_time for job in workload(text).generate(11)]
    assert len(times) == 5000
    assert min(times) > 100
    gaps = [b - a for a, b in zip([100.0, *times], times, strict=False)]
    # Fixed seed: no flake; the standard error of the mean gap is 0.5 / sqrt(5000) = 0.007.
    assert statistics.fmean(gaps) == pytest.approx(0.5, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.5, rel=0.1)  # exponential: sd = mean


def test_fixed_arrivals_in_list_order() -> None:
    text = BATCH.replace(
        "{process: poisson, rate: 0.5, count: 100}", "{process: fixed, times: [5, 0, 2.5, 5]}"
    )
    jobs = workload(text).generate(0)
    assert [(job.name, job.submit_time) for job in jobs] == [
        ("batch-000001", 0.0),
        ("batch-000002", 2.5),
        ("batch-000000", 5.0),
        ("batch-000003", 5.0),
    ]
    assert workload(text).classes[0].arrival == FixedArrival((5.0, 0.0, 2.5, 5.0))


def test_seed_is_optional() -> None:
    assert workload(BATCH.replace("seed: 7\n", "")).seed is None


def test_generate_refuses_a_non_integer_seed() -> None:
    with pytest.raises(WorkloadError, match="seed: must be an integer"):
        workload(BATCH).generate("7")  # type: ignore[arg-type]


REFUSALS: list[tuple[str, str]] = [
    ("- 1\n", "workload: must be a mapping, not a list"),
    ("seed: 1\n", "classes: is required"),
    ("classes: []\n", "classes: must be a non-empty list, not an empty list"),
    ("classes: {}\n", "classes: must be a non-empty list, not a dict"),
    (BATCH + "colour: red\n", "colour: unknown field (allowed: classes, seed)"),
    (BATCH.replace("seed: 7", "seed: x"), "seed: must be an integer, not a string"),
    (BATCH.replace("seed: 7", "seed: -1"), "seed: must be in 0..18446744073709551615, got -1"),
    (
        BATCH.replace("    priority: 0\n", "    colour: red\n"),
        "classes[0].colour: unknown field "
        "(allowed: name, arrival, phases, priority, max_retries, queue, reservation)",
    ),
    (
        BATCH.replace("    arrival: {process: poisson, rate: 0.5, count: 100}\n", ""),
        "classes[0].arrival: is required",
    ),
    (
        BATCH.replace("name: batch", "name: -batch"),
        "classes[0].name: must be at most 56 letters, digits, '-', '_' or '.', starting with a letter or digit, got '-batch'",
    ),
    (
        BATCH.replace("name: batch", "name: " + "b" * 57),
        "classes[0].name: must be at most 56 letters",
    ),
    (
        BATCH.replace("name: batch", "name: 12"),
        "classes[0].name: must be a non-empty string, not an integer",
    ),
    (
        BATCH + BATCH.split("classes:\n")[1],
        "classes[1].name: duplicate class name 'batch' (also classes[0])",
    ),
    (
        BATCH.replace("priority: 0", "priority: high"),
        "classes[0].priority: must be an integer, not a string",
    ),
    (
        BATCH.replace("priority: 0", "priority: 2147483648"),
        "classes[0].priority: must be at most 2147483647, got 2147483648",
    ),
    (
        BATCH.replace("max_retries: 3", "max_retries: -1"),
        "classes[0].max_retries: must be at least 0, got -1",
    ),
    (
        BATCH.replace("process: poisson", "process: uniform"),
        "classes[0].arrival.process: must be one of poisson, fixed, got 'uniform'",
    ),
    (BATCH.replace("process: poisson, ", ""), "classes[0].arrival.process: is required"),
    (
        BATCH.replace("arrival: {process: poisson, rate: 0.5, count: 100}", "arrival: 5"),
        "classes[0].arrival: must be a mapping, not an integer",
    ),
    (BATCH.replace(", count: 100", ""), "classes[0].arrival.count: is required"),
    (
        BATCH.replace("rate: 0.5", "rate: -1"),
        "classes[0].arrival.rate: must be a positive number, got -1",
    ),
    (
        BATCH.replace("rate: 0.5", "rate: 1.0e-12"),
        "classes[0].arrival.rate: must be at least 1e-09, got 1e-12",
    ),
    (
        BATCH.replace("count: 100", "count: 0"),
        "classes[0].arrival.count: must be in 1..999999, got 0",
    ),
    (
        BATCH.replace("count: 100", "count: 1000000"),
        "classes[0].arrival.count: must be in 1..999999, got 1000000",
    ),
    (
        BATCH.replace("count: 100", "count: 1.5"),
        "classes[0].arrival.count: must be an integer, not a number",
    ),
    (
        BATCH.replace("count: 100", "count: 100, start: -1"),
        "classes[0].arrival.start: must be a number of seconds >= 0, got -1",
    ),
    (
        BATCH.replace("count: 100", "count: 100, times: [1]"),
        "classes[0].arrival.times: unknown field (allowed: process, rate, count, start)",
    ),
    (
        BATCH.replace("{process: poisson, rate: 0.5, count: 100}", "{process: fixed, times: []}"),
        "classes[0].arrival.times: must be a non-empty list of times, not an empty list",
    ),
    (
        BATCH.replace(
            "{process: poisson, rate: 0.5, count: 100}", "{process: fixed, times: [1, a]}"
        ),
        "classes[0].arrival.times[1]: must be a number of seconds >= 0, not a string",
    ),
    (
        BATCH.replace(
            "{process: poisson, rate: 0.5, count: 100}", "{process: fixed, times: [1, .inf]}"
        ),
        "classes[0].arrival.times[1]: must be a finite positive number, got inf",
    ),
    (
        BATCH.replace("{process: poisson, rate: 0.5, count: 100}", "{process: fixed}"),
        "classes[0].arrival.times: is required",
    ),
    (
        BATCH.split("    phases:\n", maxsplit=1)[0] + "    phases: []\n",
        "classes[0].phases: must be a non-empty list, not an empty list",
    ),
    (
        BATCH.replace("        tasks: 20\n", "        tasks: 20\n        command: [sleep, '1']\n"),
        "classes[0].phases[0].command: unknown field (allowed: name, tasks, cpu, memory_mb, duration, after, coupled, droppable)",
    ),
    (
        BATCH.replace("        tasks: 20\n", "        tasks: 20\n        coupled: yes please\n"),
        "classes[0].phases[0].coupled: must be true or false, not a string",
    ),
    (BATCH.replace("        duration: 30\n", ""), "classes[0].phases[1].duration: is required"),
    (BATCH.replace("tasks: 20", "tasks: 0"), "classes[0].phases[0].tasks: must be positive, got 0"),
    (
        BATCH.replace("tasks: 20", "tasks: 100001"),
        "classes[0].phases[0].tasks: must be at most 100000, got 100001",
    ),
    (
        BATCH.replace("memory_mb: 1024", "memory_mb: 1G"),
        "classes[0].phases[0].memory_mb: must be an integer, not a string",
    ),
    (
        BATCH.replace(
            "        cpu: 1\n        memory_mb: 1024",
            "        cpu: 0.0001\n        memory_mb: 1024",
        ),
        "classes[0].phases[0].cpu: must be at least 0.001, got 0.0001",
    ),
    (
        BATCH.replace("after: [map]", "after: [mapp]"),
        "classes[0].phases[1].after: unknown phase 'mapp'",
    ),
    (
        BATCH.replace("after: [map]", "after: map"),
        "classes[0].phases[1].after: must be a list of strings, not a string",
    ),
    (
        BATCH.replace("      - name: map\n", "      - name: map\n        after: [reduce]\n"),
        "classes[0].phases: dependency cycle",
    ),
    (
        BATCH.replace("name: reduce", "name: map"),
        "classes[0].phases[1].name: duplicate phase name 'map'",
    ),
    (
        BATCH.replace("name: map\n", "name: m/ap\n"),
        "classes[0].phases[0].name: must be at most 63 letters",
    ),
    (
        BATCH.replace("alpha: 1.6", "alpha: -1"),
        "classes[0].phases[0].duration.alpha: must be a positive number, got -1",
    ),
    (
        BATCH + SERVICE_CLASS.replace("mean: 60", "mean: -60"),
        "classes[1].phases[0].duration.mean: must be a positive number, got -60",
    ),
    (
        BATCH.replace("duration: 30", "duration: thirty"),
        "classes[0].phases[1].duration: must be a positive number or a mapping with 'distribution', not a string",
    ),
    (
        BATCH.replace(
            "    max_retries: 3\n", "    max_retries: 3\n    reservation: {isolation: 1}\n"
        ),
        "classes[0].reservation.isolation: must be below 1, got 1",
    ),
    ("classes: [\n", "workload: not valid YAML"),
    ("classes: []\nclasses: []\n", "classes: duplicate key (line 2; first at line 1)"),
]


@pytest.mark.parametrize(("text", "message"), REFUSALS)
def test_refusals(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "workload.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_yaml_errors_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "workload.yaml"
    path.write_text(
        textwrap.dedent("""\
        classes:
          - name: a
            phases: [
        """)
    )
    with pytest.raises(WorkloadError, match=r"^workload: not valid YAML: .*\(line 4, column 1\)"):
        load_workload(path)


def test_the_brief_example_message() -> None:
    document = yaml.safe_load(BATCH + SERVICE_CLASS)
    document["classes"][1]["phases"][0]["duration"] = {
        "distribution": "pareto",
        "alpha": -1,
        "t_min": 10,
    }
    with pytest.raises(WorkloadError) as caught:
        parse_workload(document)
    assert str(caught.value) == (
        "classes[1].phases[0].duration.alpha: must be a positive number, got -1"
    )


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"^workload: cannot read .*missing\.yaml"):
        load_workload(tmp_path / "missing.yaml")


def dag_job(phases: list[tuple[str, tuple[str, ...], tuple[float, ...]]]) -> SimJob:
    spec = JobSpec(
        name="dag",
        priority=0,
        phases=tuple(
            PhaseSpec(name, len(durations), ("true",), Resources(1.0, 1), after)
            for name, after, durations in phases
        ),
    )
    return SimJob("dag", "test", 0.0, spec, {name: durations for name, _, durations in phases})


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        ([("a", (), (3.0, 5.0))], 5.0),
        ([("a", (), (3.0,)), ("b", (), (7.0, 1.0))], 7.0),
        ([("a", (), (3.0,)), ("b", ("a",), (4.0,))], 7.0),
        # a diamond, listed downstream first: a(5) -> b(2), c(10) -> d(1)
        (
            [
                ("d", ("b", "c"), (1.0, 0.5)),
                ("c", ("a",), (10.0,)),
                ("b", ("a",), (2.0,)),
                ("a", (), (3.0, 5.0)),
            ],
            16.0,
        ),
        # the longest path is not through the longest phase
        ([("a", (), (1.0,)), ("b", ("a",), (1.0,)), ("c", ("b",), (1.0,)), ("x", (), (2.5,))], 3.0),
    ],
)
def test_alone_time(
    phases: list[tuple[str, tuple[str, ...], tuple[float, ...]]], expected: float
) -> None:
    assert alone_time(dag_job(phases)) == expected


def test_alone_time_of_generated_jobs() -> None:
    for job in workload(BATCH).generate(5)[:10]:
        assert alone_time(job) == max(job.durations["map"]) + 30.0
