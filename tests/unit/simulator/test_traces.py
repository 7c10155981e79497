"""Trace CSV replay (round trip, refusals) and the Google 2011 and Alibaba 2018 importers."""

from __future__ import annotations

import dataclasses
import gzip
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.scheduling.resources import Resources
from simulator.traces import (
    TRACE_COLUMNS,
    google_priority_class,
    import_alibaba_2018,
    import_google_2011,
    read_alibaba_2018,
    read_google_2011,
    read_trace_csv,
    write_trace_csv,
)
from simulator.workload import SimJob, WorkloadError, alone_time, parse_workload

FIXTURES = Path(__file__).parent / "fixtures"
HEADER = ",".join(TRACE_COLUMNS)

WORKLOAD = """\
classes:
  - name: batch
    priority: -3
    max_retries: 0
    arrival: {process: poisson, rate: 0.5, count: 30}
    phases:
      - {name: map, tasks: 7, cpu: 0.333, memory_mb: 1000, duration: {distribution: pareto, alpha: 1.6, t_min: 10}}
      - {name: side, tasks: 2, cpu: 1, memory_mb: 10, duration: {distribution: lognormal, median: 3, sigma: 2}}
      - {name: reduce, after: [map, side], tasks: 2, cpu: 4, memory_mb: 2048, duration: {distribution: exponential, mean: 0.1}}
  - name: web
    priority: 100
    arrival: {process: fixed, times: [0, 0, 1.25]}
    phases:
      - {name: serve, tasks: 1, cpu: 0.001, memory_mb: 1, duration: {distribution: empirical, values: [0.1, 0.2]}}
"""


def generated() -> list[SimJob]:
    return parse_workload(yaml.safe_load(WORKLOAD)).generate(42)


# ------------------------------------------------------------------------------ trace CSV


@pytest.mark.parametrize("name", ["trace.csv", "trace.csv.gz"])
def test_round_trip_is_exact(tmp_path: Path, name: str) -> None:
    jobs = generated()
    write_trace_csv(jobs, tmp_path / name)
    again = read_trace_csv(tmp_path / name)
    # A trace holds each task's duration; a straggler copy's own draw is not written
    assert again == [dataclasses.replace(job, copy_durations={}) for job in jobs]
    for before, after in zip(jobs, again, strict=True):
        for phase in before.spec.phases:  # bit for bit, not approximately
            assert [d.hex() for d in before.durations[phase.name]] == [
                d.hex() for d in after.durations[phase.name]
            ]
        assert before.submit_time.hex() == after.submit_time.hex()
    write_trace_csv(again, tmp_path / ("again-" + name))
    if not name.endswith(".gz"):
        assert (tmp_path / name).read_text() == (tmp_path / ("again-" + name)).read_text()


def test_read_the_fixture() -> None:
    etl, adhoc = read_trace_csv(FIXTURES / "trace.csv")
    assert (etl.name, etl.job_class, etl.submit_time) == ("etl-1", "etl", 0.0)
    assert (etl.spec.priority, etl.spec.max_retries) == (5, 1)
    assert [phase.name for phase in etl.spec.phases] == ["extract", "load", "merge"]
    assert etl.spec.phase("merge").after == ("extract", "load")
    assert etl.spec.phase("extract").resources == Resources(cpu=0.5, memory_mb=512)
    assert etl.durations == {"extract": (10.0, 12.5), "load": (30.0,), "merge": (1.0,)}
    assert alone_time(etl) == 12.5 + 30 + 1
    assert (adhoc.name, adhoc.job_class, adhoc.submit_time, adhoc.spec.priority) == (
        "adhoc",
        "interactive",
        2.5,
        9,
    )


def test_optional_columns_take_defaults(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("duration,task,phase,job,submit_time,cpu,memory_mb\n4,0,p,j,1.5,1,64\n")
    (job,) = read_trace_csv(path)
    assert (job.job_class, job.spec.priority, job.spec.max_retries) == ("trace", 0, 2)
    assert job.spec.phases[0].after == ()
    assert job.durations == {"p": (4.0,)}


ROW = "j,c,0,0,2,p,,0,1,64,5"
CSV_REFUSALS: list[tuple[str, str]] = [
    ("", "line 1: the header row is missing"),
    (
        "job,submit_time\n",
        "line 1: the header lacks the column(s) phase, task, cpu, memory_mb, duration",
    ),
    (HEADER + ",colour\n", "line 1: unknown column 'colour'"),
    (HEADER + ",job\n", "line 1: column 'job' appears twice"),
    (f"{HEADER}\n{ROW},9\n", "line 2: has 12 fields; the header has 11"),
    (
        f"{HEADER}\n{ROW}\n\n{ROW.replace(',1,64', ',x,64')}\n",
        "line 4, column cpu: must be a number, got 'x'",
    ),
    (
        f"{HEADER}\n{ROW.replace(',1,64', ',nan,64')}\n",
        "line 2, column cpu: must be a number, got 'nan'",
    ),
    (
        f"{HEADER}\n{ROW.replace(',1,64', ',1,6.5')}\n",
        "line 2, column memory_mb: must be an integer, got '6.5'",
    ),
    (
        f"{HEADER}\n{ROW.replace(',5', ',-5')}\n",
        "line 2, column duration: must be a number of seconds in 0..1e+09, got -5.0",
    ),
    (
        f"{HEADER}\n{ROW.replace('j,c,0', 'j,c,-1')}\n",
        "line 2, column submit_time: must be a number of seconds >= 0, got -1.0",
    ),
    (f"{HEADER}\n{ROW.replace('j,c', '-j,c')}\n", "line 2, column job: must be at most 63 letters"),
    (f"{HEADER}\n{ROW.replace('j,c', 'j,')}\n", "line 2, column class: must be at most 63 letters"),
    (
        f"{HEADER}\n{ROW}\n{ROW.replace('j,c,0', 'j,c,1')}\n",
        "line 3, column submit_time: is 1.0, but 0.0 on line 2 for job 'j'",
    ),
    (
        f"{HEADER}\n{ROW}\n{ROW.replace('j,c', 'j,d')}\n",
        "line 3, column class: is d, but c on line 2 for job 'j'",
    ),
    (
        f"{HEADER}\n{ROW}\n{ROW.replace(',1,64', ',2,64')}\n",
        "line 3, column cpu: is 2.0, but 1.0 on line 2 for phase 'p' of job 'j'",
    ),
    (
        f"{HEADER}\n{ROW}\n{ROW}\n",
        "line 3, column task: task 0 of phase 'p' of job 'j' is also on line 2",
    ),
    (
        f"{HEADER}\n{ROW}\n{ROW.replace(',0,1,64', ',2,1,64')}\n",
        "line 2, column task: phase 'p' of job 'j' has 2 rows but no task 1",
    ),
    (
        f"{HEADER}\n{ROW.replace(',0,1,64', ',-1,1,64')}\n",
        "line 2, column task: must be in 0..99999, got -1",
    ),
    (
        f"{HEADER}\n{ROW.replace(',1,64', ',5000,64')}\n",
        "line 2, column cpu: must be at most 4096, got 5000",
    ),
    (
        f"{HEADER}\n{ROW.replace(',1,64', ',1,0')}\n",
        "line 2, column memory_mb: must be positive, got 0",
    ),
    (
        f"{HEADER}\n{ROW.replace('j,c,0,0', 'j,c,0,2147483648')}\n",
        "line 2, column priority: must be at most 2147483647",
    ),
    (
        f"{HEADER}\n{ROW}\n{ROW.replace(',p,,', ',q,z,')}\n",
        "line 3, column after: unknown phase 'z'",
    ),
    (
        f"{HEADER}\n{ROW}\n{ROW.replace(',p,,', ',q/r,,')}\n",
        "line 3, column phase: must be at most 63 letters",
    ),
    (
        f"{HEADER}\n{ROW.replace(',p,,', ',p,q,')}\n{ROW.replace(',p,,', ',q,p,')}\n",
        "line 2, column after: dependency cycle",
    ),
    (
        f"{HEADER}\n{ROW.replace('j,c,0,0,2', 'j,c,0,0,101')}\n",
        "line 2, column max_retries: must be at most 100",
    ),
    (f'{HEADER}\n{ROW}\n"j,c\n', "line 3: not valid CSV"),
]


@pytest.mark.parametrize(("text", "message"), CSV_REFUSALS)
def test_trace_refusals(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(WorkloadError) as caught:
        read_trace_csv(path)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_trace_that_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"^trace: cannot read"):
        read_trace_csv(tmp_path / "none.csv")
    (tmp_path / "bad.csv.gz").write_bytes(b"not gzip at all")
    with pytest.raises(WorkloadError, match=r"^trace: "):
        read_trace_csv(tmp_path / "bad.csv.gz")
    (tmp_path / "latin.csv").write_bytes(HEADER.encode() + b"\n\xe9\n")
    with pytest.raises(WorkloadError, match="not UTF-8"):
        read_trace_csv(tmp_path / "latin.csv")


# ------------------------------------------------------------------------------ Google 2011

GOOGLE: dict[str, Any] = {"machine_cpu": 32.0, "machine_memory_mb": 65536}


def google(**options: object) -> list[SimJob]:
    return import_google_2011(
        FIXTURES / "google_job_events.csv",
        FIXTURES / "google_task_events.csv",
        **{**GOOGLE, **options},
    )


def test_google_fixture() -> None:
    jobs = google()
    assert [(job.name, job.job_class, job.submit_time, job.spec.priority) for job in jobs] == [
        ("google-200", "middle", 0.0, 4),  # priorities 2 and 4: the highest
        ("google-300", "production", 5.0, 10),
        ("google-500", "free", 30.0, 0),
    ]
    j200, j300, j500 = jobs
    (phase,) = j200.spec.phases
    assert (phase.name, phase.tasks) == ("tasks", 2)
    assert phase.resources == Resources(cpu=4.0, memory_mb=3932)  # 0.125 x 32, 0.06 x 65536
    assert j200.durations == {"tasks": (10.0, 20.0)}
    # task 0 was evicted and scheduled again: its last SCHEDULE counts; task 1 finished after
    # the window and is dropped, with its larger request
    assert j300.durations == {"tasks": (30.0,)}
    assert j300.spec.phases[0].resources == Resources(cpu=8.0, memory_mb=32768)
    # tiny requests are rounded up to the smallest a job spec takes
    assert j500.spec.phases[0].resources == Resources(cpu=0.001, memory_mb=1)
    assert j500.durations == {"tasks": (0.5,)}


def test_google_summary(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="simulator.traces"):
        result = read_google_2011(
            FIXTURES / "google_job_events.csv", FIXTURES / "google_task_events.csv", **GOOGLE
        )
    assert result.rows == 12 + 21
    assert result.skipped == {
        "jobs submitted outside the trace window": 1,  # job 100, submitted at 0
        "task events of jobs not kept (no SUBMIT in the window)": 1,
        "tasks that never finished in the window": 2,  # 300/1 (after the window), 400/0 (killed)
        "jobs without a finished task": 1,  # 400
    }
    assert result.summary().startswith("3 jobs from 33 rows; skipped: 1 jobs submitted outside")
    assert "3 jobs from 33 rows" in caplog.text


def test_google_gzip_and_parts(tmp_path: Path) -> None:
    for name in ("google_job_events.csv", "google_task_events.csv"):
        with (
            (FIXTURES / name).open("rb") as source,
            gzip.open(tmp_path / (name + ".gz"), "wb") as gz,
        ):
            shutil.copyfileobj(source, gz)
    gz_jobs = import_google_2011(
        tmp_path / "google_job_events.csv.gz", tmp_path / "google_task_events.csv.gz", **GOOGLE
    )
    assert gz_jobs == google()
    lines = (FIXTURES / "google_task_events.csv").read_text().splitlines(keepends=True)
    (tmp_path / "part-0.csv").write_text("".join(lines[:10]))
    (tmp_path / "part-1.csv").write_text("".join(lines[10:]))
    parts = import_google_2011(
        [FIXTURES / "google_job_events.csv"],
        [tmp_path / "part-0.csv", tmp_path / "part-1.csv"],
        **GOOGLE,
    )
    assert parts == google()


def test_google_limit_shifts_to_the_first_kept_job() -> None:
    assert [job.name for job in google(limit=2)] == ["google-200", "google-300"]
    assert google(limit=0) == []


def test_google_priority_bands() -> None:
    assert [google_priority_class(p) for p in range(12)] == ["free"] * 2 + ["middle"] * 7 + [
        "production"
    ] * 3


TASK = "600000000,,200,0,m1,1,userB,1,2,0.0625,0.03,0.001,0"
GOOGLE_REFUSALS: list[tuple[str, str, str]] = [
    (
        "job",
        "600000000,,200,0,userB,1,nameB\n",
        "job_events.csv line 1: has 7 fields; the schema has 8",
    ),
    (
        "job",
        "6e8,,200,0,userB,1,nameB,l\n",
        "job_events.csv line 1, column timestamp: must be an integer, got '6e8'",
    ),
    (
        "job",
        "1,,200,9,userB,1,nameB,l\n",
        "job_events.csv line 1, column event_type: must be 0..8, got 9",
    ),
    ("task", TASK + ",0\n", "task_events.csv line 1: has 14 fields; the schema has 13"),
    (
        "task",
        TASK.replace(",1,userB", ",x,userB") + "\n",
        "task_events.csv line 1, column event_type: must be an integer, got 'x'",
    ),
    (
        "task",
        TASK.replace(",2,0.0625", ",12,0.0625") + "\n",
        "task_events.csv line 1, column priority: must be 0..11, got 12",
    ),
    (
        "task",
        TASK.replace("0.0625", "-0.5") + "\n",
        "task_events.csv line 1, column cpu_request: must be a normalised request >= 0, got -0.5",
    ),
    (
        "task",
        TASK.replace("0.03", "lots") + "\n",
        "task_events.csv line 1, column memory_request: must be a number, got 'lots'",
    ),
    (
        "task",
        TASK.replace(",200,0,", ",200,,") + "\n",
        "task_events.csv line 1, column task_index: must be an integer, got ''",
    ),
]


@pytest.mark.parametrize(("which", "text", "message"), GOOGLE_REFUSALS)
def test_google_refusals(tmp_path: Path, which: str, text: str, message: str) -> None:
    job_events = tmp_path / "job_events.csv"
    task_events = tmp_path / "task_events.csv"
    job_events.write_text(text if which == "job" else "600000000,,200,0,u,1,n,l\n")
    task_events.write_text(text if which == "task" else "")
    with pytest.raises(WorkloadError) as caught:
        import_google_2011(job_events, task_events, **GOOGLE)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "options",
    [{"machine_cpu": 0.0}, {"machine_memory_mb": -1}, {"limit": -1}, {"machine_cpu": float("inf")}],
)
def test_google_options_refused(options: dict[str, object]) -> None:
    with pytest.raises(WorkloadError):
        google(**options)


# ------------------------------------------------------------------------------ Alibaba 2018


def alibaba(**options: object) -> list[SimJob]:
    return import_alibaba_2018(
        FIXTURES / "alibaba_batch_task.csv",
        **{"machine_memory_mb": 100_000, **options},  # type: ignore[arg-type]
    )


def test_alibaba_fixture() -> None:
    jobs = alibaba()
    assert [(job.name, job.job_class, job.submit_time, job.spec.priority) for job in jobs] == [
        ("j_1", "alibaba", 0.0, 0),
        ("j_2", "alibaba", 100.0, 0),
        ("j_7", "alibaba", 400.0, 0),
    ]
    j1, j2, j7 = jobs
    assert [(p.name, p.tasks, p.after) for p in j1.spec.phases] == [
        ("M1", 2, ()),
        ("R2_1", 1, ("M1",)),
        ("M3", 1, ()),
        ("J4_2_3", 3, ("R2_1", "M3")),
    ]
    assert [p.resources for p in j1.spec.phases] == [
        Resources(cpu=1.0, memory_mb=390),  # plan_cpu 100, plan_mem 0.39 (% of 100000 MiB)
        Resources(cpu=0.5, memory_mb=200),
        Resources(cpu=1.0, memory_mb=390),
        Resources(cpu=2.0, memory_mb=1500),
    ]
    assert j1.durations == {
        "M1": (10.0, 10.0),
        "R2_1": (18.0,),
        "M3": (4.0,),
        "J4_2_3": (9.0, 9.0, 9.0),
    }
    assert alone_time(j1) == 10 + 18 + 9
    # names outside the DAG notation are independent phases, made into phase names
    assert [(p.name, p.after) for p in j2.spec.phases] == [
        ("task_LTg0MTMyNjYyMDUxMTI5MjM0NDY4NA__", ()),
        ("MergeTask", ()),
    ]
    assert j7.spec.phases[0].resources == Resources(cpu=0.01, memory_mb=1)
    assert j7.durations == {"M1": (0.0,)}  # start == end: under the trace's 1 s resolution


def test_alibaba_summary() -> None:
    result = read_alibaba_2018(FIXTURES / "alibaba_batch_task.csv", machine_memory_mb=100_000)
    assert result.rows == 13
    assert result.skipped == {
        "jobs with a task not Terminated": 2,  # j_3 (Failed), j_6 (Running)
        "jobs whose task names make no DAG (a missing or repeated number)": 1,  # j_4
        "jobs with a task without valid times": 1,  # j_5 (start 0)
    }


def test_alibaba_limit() -> None:
    assert [job.name for job in alibaba(limit=1)] == ["j_1"]


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ("M1,1,j,1,Terminated,10,20,100,\n", "jobs with a task without a resource request"),
        ("M1,0,j,1,Terminated,10,20,100,1\n", "jobs with a task of no instances"),
        (
            "M1,1,j,1,Terminated,10,20,100,1\nM1,1,j,1,Terminated,10,20,100,1\n",
            "jobs with a task listed twice",
        ),
        (
            "M1,1,j,1,Terminated,10,20,100,1\nR1,1,j,1,Terminated,10,20,100,1\n",
            "jobs whose task names make no DAG (a missing or repeated number)",
        ),
        ("M1,1,j,1,Terminated,20,10,100,1\n", "jobs with a task without valid times"),
        ("M1_1,1,j,1,Terminated,10,20,100,1\n", "jobs the job-spec rules refuse"),
        ("M1,1,j,1,Terminated,10,20,500000,1\n", "jobs the job-spec rules refuse"),
    ],
)
def test_alibaba_skips(tmp_path: Path, rows: str, reason: str) -> None:
    path = tmp_path / "batch_task.csv"
    path.write_text(rows)
    result = read_alibaba_2018(path, machine_memory_mb=1000)
    assert result.jobs == []
    assert result.skipped == {reason: 1}
    if reason == "jobs the job-spec rules refuse":
        assert result.refusals[0].startswith("job 'j': phases")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (
            "M1,1,j_1,1,Terminated,10,20,100\n",
            "batch_task.csv line 1: has 8 fields; the schema has 9",
        ),
        (
            "M1,one,j_1,1,Terminated,10,20,100,1\n",
            "batch_task.csv line 1, column instance_num: must be an integer, got 'one'",
        ),
        (
            "M1,1,j_1,1,Terminated,10,2.5,100,1\n",
            "batch_task.csv line 1, column end_time: must be an integer, got '2.5'",
        ),
        (
            "M1,1,j_1,1,Terminated,10,20,lots,1\n",
            "batch_task.csv line 1, column plan_cpu: must be a number, got 'lots'",
        ),
        (
            "M1,1,,1,Terminated,10,20,100,1\n",
            "batch_task.csv line 1, column job_name: must not be empty",
        ),
    ],
)
def test_alibaba_refusals(tmp_path: Path, rows: str, message: str) -> None:
    path = tmp_path / "batch_task.csv"
    path.write_text("M1,1,j_0,1,Terminated,10,20,100,1\n" + rows)
    with pytest.raises(WorkloadError) as caught:
        import_alibaba_2018(path, machine_memory_mb=1000)
    assert message.replace("line 1", "line 2") in str(caught.value)


def test_alibaba_gzip(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "batch_task.csv.gz", "wb") as gz:
        gz.write((FIXTURES / "alibaba_batch_task.csv").read_bytes())
    assert (
        import_alibaba_2018(tmp_path / "batch_task.csv.gz", machine_memory_mb=100_000) == alibaba()
    )


def test_imported_jobs_round_trip_through_the_trace_csv(tmp_path: Path) -> None:
    jobs = sorted(google() + alibaba(), key=lambda job: (job.submit_time, job.name))
    write_trace_csv(jobs, tmp_path / "t.csv")
    assert read_trace_csv(tmp_path / "t.csv") == jobs
