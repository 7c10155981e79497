"""Per-job records, summaries, result files and comparisons (simulator/results.py)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from simulator.results import (
    JOB_COLUMNS,
    ComparisonRow,
    JobOutcome,
    Summary,
    UtilisationSample,
    format_comparison,
    format_summary,
    load_outcomes,
    load_samples,
    percentile,
    relative_change,
    summarize,
    time_weighted_mean,
    write_comparison,
    write_results,
)

NAN = math.nan
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def job(
    job_id: str,
    priority: int,
    submit: float,
    finish: float,
    *,
    state: str | None = None,
    alone: float = 10.0,
    preemptions: int = 0,
    lost_work: float = 0.0,
) -> JobOutcome:
    if state is None:
        state = "unfinished" if math.isnan(finish) else "succeeded"
    return JobOutcome(
        job_id=job_id,
        name=f"name-{job_id}",
        job_class="batch" if priority < 5 else "service",
        priority=priority,
        submit_time=submit,
        start_time=submit + 1.0 if not math.isnan(finish) else NAN,
        finish_time=finish,
        state=state,
        tasks=3,
        preemptions=preemptions,
        lost_work=lost_work,
        alone_time=alone,
    )


# Priority 10: completion 10, 20, 30, 40 (alone 10 → slowdown 1, 2, 3, 4).
# Priority 1: completion 100 and 300, plus one unfinished job.
OUTCOMES = (
    job("a", 10, 0.0, 10.0),
    job("b", 10, 5.0, 25.0, preemptions=1),
    job("c", 10, 10.0, 40.0),
    job("d", 10, 20.0, 60.0, state="failed"),
    job("e", 1, 0.0, 100.0, alone=50.0, preemptions=2, lost_work=12.5),
    job("f", 1, 0.0, 300.0, alone=100.0, state="killed"),
    job("g", 1, 50.0, NAN, preemptions=3, lost_work=7.5),
)

SAMPLES = (
    UtilisationSample(0.0, 2.0, 4.0, 100.0, 1000.0),  # 50 %, 10 %   for 10 s
    UtilisationSample(10.0, 4.0, 4.0, 500.0, 1000.0),  # 100 %, 50 % for 30 s
    UtilisationSample(40.0, 0.0, 4.0, 0.0, 1000.0),  # 0 %, 0 %     for 60 s
    UtilisationSample(100.0, 4.0, 4.0, 1000.0, 1000.0),  # end of the run: no weight
)


@pytest.fixture(scope="module")
def summary() -> Summary:
    return summarize(OUTCOMES, SAMPLES)


# --- percentiles and weighting ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([10.0, 20.0, 30.0, 40.0], 95, 38.5),
        ([10.0, 20.0, 30.0, 40.0], 99, 39.7),
        ([10.0, 20.0, 30.0, 40.0], 90, 37.0),
        ([7.0], 99, 7.0),
        ([], 50, NAN),
    ],
)
def test_percentile_is_linear_interpolation(values: list[float], q: float, expected: float) -> None:
    got = percentile(values, q)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, rel=1e-12)
        if values:
            assert got == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_percentile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match="percentile"):
        percentile([1.0], 101)


@pytest.mark.parametrize(
    ("times", "values", "expected"),
    [
        ([0.0, 10.0], [0.5, 1.0], 0.5),  # the last sample gets no weight
        ([0.0, 10.0, 40.0], [0.5, 1.0, 0.0], (0.5 * 10 + 1.0 * 30) / 40),
        ([0.0, 0.0, 10.0], [0.9, 0.1, 0.0], 0.1),  # a zero-length step counts for nothing
        ([5.0], [0.3], 0.3),  # no span: the value itself
        ([], [], NAN),
    ],
)
def test_time_weighted_mean(times: list[float], values: list[float], expected: float) -> None:
    got = time_weighted_mean(times, values)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected)


def test_time_weighted_mean_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="times"):
        time_weighted_mean([0.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="backwards"):
        time_weighted_mean([1.0, 0.0], [1.0, 2.0])


# --- outcomes --------------------------------------------------------------------------------


def test_outcome_derived_values() -> None:
    o = job("x", 3, 10.0, 40.0, alone=15.0)
    assert o.completion_time == 30.0
    assert o.slowdown == 2.0
    assert o.finished
    u = job("y", 3, 10.0, NAN)
    assert math.isnan(u.completion_time)
    assert math.isnan(u.slowdown)
    assert not u.finished


@pytest.mark.parametrize(
    ("state", "finish", "alone", "match"),
    [
        ("done", 1.0, 1.0, "state"),
        ("unfinished", 1.0, 1.0, "finish_time"),
        ("succeeded", NAN, 1.0, "finish_time"),
        ("succeeded", 1.0, 0.0, "alone_time"),
        ("succeeded", 1.0, NAN, "alone_time"),
    ],
)
def test_outcome_validation(state: str, finish: float, alone: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        job("x", 1, 0.0, finish, state=state, alone=alone)


# --- summarize -------------------------------------------------------------------------------


def test_groups_are_priorities_descending_then_all(summary: Summary) -> None:
    assert [g.label for g in summary.groups] == ["10", "1", "all"]
    assert summary.priorities == (10, 1)
    assert summary.overall is summary.groups[-1]
    assert summary.get(7) is None
    with pytest.raises(KeyError):
        summary.group(7)


def test_summary_of_a_priority_is_exact(summary: Summary) -> None:
    high = summary.group(10)
    assert (high.jobs, high.finished, high.succeeded, high.failed) == (4, 4, 3, 1)
    c = high.completion_time
    assert (c.count, c.mean, c.p50, c.p90, c.p95, c.max) == (4, 25.0, 25.0, 37.0, 38.5, 40.0)
    assert c.p99 == pytest.approx(39.7, rel=1e-12)
    assert high.slowdown.mean == 2.5
    assert high.slowdown.p95 == pytest.approx(3.85)
    assert high.preemptions == 1
    assert high.lost_work == 0.0


def test_unfinished_jobs_are_counted_but_not_in_percentiles(summary: Summary) -> None:
    low = summary.group(1)
    assert (low.jobs, low.finished, low.unfinished, low.killed) == (3, 2, 1, 1)
    # Completion 100 and 300 only: p50 = 200, p95 = 100 + 0.95·200 = 290.
    assert low.completion_time.count == 2
    assert low.completion_time.mean == 200.0
    assert low.completion_time.p50 == 200.0
    assert low.completion_time.p95 == pytest.approx(290.0)
    # Slowdown 100/50 = 2 and 300/100 = 3.
    assert low.slowdown.mean == 2.5
    # The unfinished job's preemptions and lost work still count.
    assert low.preemptions == 5
    assert low.lost_work == 20.0


def test_all_row(summary: Summary) -> None:
    every = summary.overall
    assert every.priority is None
    assert (every.jobs, every.finished, every.unfinished) == (7, 6, 1)
    times = [10.0, 20.0, 30.0, 40.0, 100.0, 300.0]
    assert every.completion_time.mean == pytest.approx(sum(times) / 6)
    for q in (50, 90, 95, 99):
        assert getattr(every.completion_time, f"p{q}") == pytest.approx(np.percentile(times, q))
    assert every.preemptions == 6
    assert every.lost_work == 20.0


def test_utilisation_and_makespan(summary: Summary) -> None:
    assert summary.cpu_utilisation == pytest.approx((0.5 * 10 + 1.0 * 30 + 0 * 60) / 100)
    assert summary.memory_utilisation == pytest.approx((0.1 * 10 + 0.5 * 30) / 100)
    assert summary.makespan == 300.0  # latest finish 300 − earliest submit 0


def test_samples_are_sorted_before_weighting() -> None:
    shuffled = (SAMPLES[2], SAMPLES[0], SAMPLES[3], SAMPLES[1])
    assert summarize(OUTCOMES, shuffled) == summarize(OUTCOMES, SAMPLES)


def test_zero_capacity_counts_as_idle() -> None:
    samples = [UtilisationSample(0.0, 0.0, 0.0, 0.0, 0.0), UtilisationSample(10.0, 1, 1, 1, 1)]
    s = summarize([], samples)
    assert s.cpu_utilisation == 0.0
    assert s.memory_utilisation == 0.0


def test_empty_input_gives_zeros_and_nans() -> None:
    s = summarize([], [])
    assert [g.label for g in s.groups] == ["all"]
    assert s.overall.jobs == 0
    assert s.overall.finished == 0
    assert s.overall.preemptions == 0
    assert math.isnan(s.overall.completion_time.mean)
    assert math.isnan(s.overall.slowdown.p99)
    assert math.isnan(s.cpu_utilisation)
    assert math.isnan(s.makespan)
    assert "all" in format_summary(s)


def test_no_finished_jobs() -> None:
    s = summarize([job("u", 2, 0.0, NAN)], [])
    assert s.overall.jobs == 1
    assert s.overall.finished == 0
    assert math.isnan(s.overall.completion_time.p50)
    assert math.isnan(s.makespan)


# --- text ------------------------------------------------------------------------------------


def test_format_summary(summary: Summary) -> None:
    text = format_summary(summary)
    lines = text.splitlines()
    assert lines[0].split()[0] == "priority"
    assert [line.split()[0] for line in lines[1:4]] == ["10", "1", "all"]
    # jobs, finished, mean, p50, p95, p99 of priority 10.
    assert lines[1].split()[1:7] == ["4", "4", "25.0", "25.0", "38.5", "39.7"]
    assert lines[2].split()[1:3] == ["3", "2"]
    # Columns line up: every table line is as long as the header or shorter only by padding.
    assert len({len(line) for line in lines[:4]}) == 1
    assert "cpu 35.0%" in lines[4]
    assert "memory 16.0%" in lines[4]
    assert "makespan 300.0 s" in lines[4]
    assert text.endswith("\n")


def test_format_summary_shows_dashes_for_missing_values() -> None:
    text = format_summary(summarize([job("u", 2, 0.0, NAN)], []))
    assert "-" in text.splitlines()[1]
    assert "nan" not in text


# --- files -----------------------------------------------------------------------------------

EXPECTED_FILES = [
    "jobs.csv",
    "jobs.json",
    "utilisation.csv",
    "summary.json",
    "summary.txt",
    "completion_cdf.png",
    "utilisation.png",
]
META = {"seed": 7, "configuration": {"policy": "preempt", "nodes": 4, "path": Path("x.yaml")}}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, summary: Summary) -> tuple[Path, list[Path]]:
    directory = tmp_path_factory.mktemp("run") / "nested" / "out"
    return directory, write_results(directory, OUTCOMES, SAMPLES, summary, META)


def test_write_results_lists_every_file(written: tuple[Path, list[Path]]) -> None:
    directory, paths = written
    assert [p.name for p in paths] == EXPECTED_FILES
    for p in paths:
        assert p.parent == directory
        assert p.is_file()
        assert p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes().startswith(PNG_SIGNATURE)


def test_write_results_is_byte_identical(
    tmp_path: Path, written: tuple[Path, list[Path]], summary: Summary
) -> None:
    _, first = written
    # Same input in another order: the files are sorted, so they must not change.
    second = write_results(tmp_path, tuple(reversed(OUTCOMES)), SAMPLES, summary, dict(META))
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_pngs_carry_no_software_or_date(written: tuple[Path, list[Path]]) -> None:
    for p in written[1]:
        if p.suffix == ".png":
            data = p.read_bytes()
            assert b"matplotlib" not in data.lower()
            assert b"tEXt" not in data
            assert b"tIME" not in data


def test_jobs_csv(written: tuple[Path, list[Path]]) -> None:
    directory, _ = written
    with (directory / "jobs.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == JOB_COLUMNS
    assert "completion_time" in JOB_COLUMNS
    assert "slowdown" in JOB_COLUMNS
    assert [r["job_id"] for r in rows] == ["a", "e", "f", "b", "c", "d", "g"]  # by submit, id
    b = next(r for r in rows if r["job_id"] == "b")
    assert (b["completion_time"], b["slowdown"], b["preemptions"]) == ("20.0", "2.0", "1")
    g = next(r for r in rows if r["job_id"] == "g")
    assert (g["finish_time"], g["completion_time"], g["state"]) == ("nan", "nan", "unfinished")


def test_jobs_json_round_trips(written: tuple[Path, list[Path]]) -> None:
    directory, _ = written
    records = json.loads((directory / "jobs.json").read_text())
    g = next(r for r in records if r["job_id"] == "g")
    assert g["finish_time"] is None
    assert g["slowdown"] is None
    loaded = load_outcomes(directory)
    assert _same_outcomes(loaded, OUTCOMES)
    assert load_samples(directory) == SAMPLES


def _same_outcomes(a: tuple[JobOutcome, ...], b: tuple[JobOutcome, ...]) -> bool:
    # nan != nan, so compare reprs (which write nan as 'nan'); floats' reprs round-trip exactly.
    return sorted(map(repr, a)) == sorted(map(repr, b))


def test_summary_json(written: tuple[Path, list[Path]], summary: Summary) -> None:
    directory, _ = written
    text = (directory / "summary.json").read_text()
    data = json.loads(text)
    assert data["meta"] == {
        "seed": 7,
        "configuration": {"policy": "preempt", "nodes": 4, "path": "x.yaml"},
    }
    groups = data["summary"]["groups"]
    assert [g["label"] for g in groups] == ["10", "1", "all"]
    assert groups[0]["completion_time"]["p95"] == 38.5
    assert data["summary"]["makespan"] == 300.0
    assert "NaN" not in text
    assert (directory / "summary.txt").read_text() == format_summary(summary)


def test_meta_must_be_plain_data(tmp_path: Path, summary: Summary) -> None:
    with pytest.raises(TypeError, match="JSON"):
        write_results(tmp_path, OUTCOMES, SAMPLES, summary, {"bad": object()})


def test_write_results_of_an_empty_run(tmp_path: Path) -> None:
    meta = {"seed": np.int64(3), "rate": np.float32(0.5)}  # numpy scalars are plain numbers
    paths = write_results(tmp_path, [], [], summarize([], []), meta)
    assert [p.name for p in paths] == EXPECTED_FILES
    assert (tmp_path / "jobs.csv").read_text() == ",".join(JOB_COLUMNS) + "\n"
    assert json.loads((tmp_path / "jobs.json").read_text()) == []
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["meta"] == {"seed": 3, "rate": 0.5}
    assert summary["summary"]["makespan"] is None


# --- comparisons -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "base", "expected"),
    [
        (150.0, 100.0, 50.0),
        (50.0, 100.0, -50.0),
        (100.0, 100.0, 0.0),
        (1.0, 0.0, NAN),
        (NAN, 1.0, NAN),
    ],
)
def test_relative_change(value: float, base: float, expected: float) -> None:
    got = relative_change(value, base)
    assert got == pytest.approx(expected, nan_ok=True)


def _scaled(factor: float) -> tuple[JobOutcome, ...]:
    """OUTCOMES with every completion time multiplied by ``factor``."""
    return tuple(
        job(
            o.job_id,
            o.priority,
            o.submit_time,
            o.submit_time + factor * o.completion_time if o.finished else NAN,
            state=o.state,
            alone=o.alone_time,
        )
        for o in OUTCOMES
    )


@pytest.fixture(scope="module")
def rows() -> list[ComparisonRow]:
    result = []
    for name, factor in [("baseline", 1.0), ("faster", 0.5), ("slower", 1.2)]:
        outcomes = _scaled(factor)
        result.append(ComparisonRow(name, summarize(outcomes, SAMPLES), outcomes))
    return result


@pytest.mark.parametrize(
    ("priority", "configuration", "delta_mean", "delta_p95"),
    [
        (None, "baseline", "+0.0%", "+0.0%"),
        (None, "faster", "-50.0%", "-50.0%"),
        (None, "slower", "+20.0%", "+20.0%"),
        (10, "faster", "-50.0%", "-50.0%"),
        (1, "slower", "+20.0%", "+20.0%"),
    ],
)
def test_format_comparison_relative_changes(
    rows: list[ComparisonRow],
    priority: int | None,
    configuration: str,
    delta_mean: str,
    delta_p95: str,
) -> None:
    lines = format_comparison(rows, priority).splitlines()
    header = lines[1].split()
    line = next(x for x in lines[2:] if x.split()[0] == configuration)
    cells = line.split()
    # Δmean and Δp95 come before the first header cell with a space ("p95 slowdown").
    assert cells[header.index("Δmean")] == delta_mean
    assert cells[header.index("Δp95")] == delta_p95


def test_format_comparison_table(rows: list[ComparisonRow]) -> None:
    text = format_comparison(rows, 10)
    lines = text.splitlines()
    assert lines[0].startswith("priority 10")
    assert "baseline" in lines[0]
    assert [x.split()[0] for x in lines[2:]] == ["baseline", "faster", "slower"]
    faster = lines[3].split()
    # jobs, finished, mean(s), p50(s) of priority 10 at half the completion times.
    assert faster[1:5] == ["4", "4", "12.5", "12.5"]
    assert len({len(x) for x in lines[1:]}) == 1


def test_format_comparison_with_a_missing_priority() -> None:
    only_high = tuple(o for o in OUTCOMES if o.priority == 10)
    rows = [
        ComparisonRow("all", summarize(OUTCOMES, SAMPLES)),
        ComparisonRow("high only", summarize(only_high, SAMPLES)),
    ]
    line = format_comparison(rows, 1).splitlines()[3]
    assert line.split()[:4] == ["high", "only", "0", "0"]
    assert format_comparison([], None) == "all jobs: no configurations\n"


def test_write_comparison(tmp_path: Path, rows: list[ComparisonRow]) -> None:
    paths = write_comparison(tmp_path / "cmp", rows, {"seed": 1})
    assert [p.name for p in paths] == ["comparison.txt", "comparison.json", "comparison.png"]
    assert paths[2].read_bytes().startswith(PNG_SIGNATURE)
    text = paths[0].read_text()
    for title in ("all jobs", "priority 10", "priority 1"):
        assert title in text
    data = json.loads(paths[1].read_text())
    assert data["baseline"] == "baseline"
    assert data["meta"] == {"seed": 1}
    assert [c["configuration"] for c in data["configurations"]] == ["baseline", "faster", "slower"]
    change = data["relative_change"]["10"]["faster"]
    assert change["mean_completion_time_percent"] == pytest.approx(-50.0)
    assert change["p95_completion_time_percent"] == pytest.approx(-50.0)
    again = write_comparison(tmp_path / "again", rows, {"seed": 1})
    for a, b in zip(paths, again, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_write_comparison_without_outcomes_or_rows(tmp_path: Path, summary: Summary) -> None:
    paths = write_comparison(tmp_path / "a", [ComparisonRow("only", summary)])
    assert paths[2].read_bytes().startswith(PNG_SIGNATURE)
    paths = write_comparison(tmp_path / "b", [])
    assert json.loads(paths[1].read_text())["configurations"] == []
    assert paths[2].read_bytes().startswith(PNG_SIGNATURE)
