"""perf stat parsing against real recordings (this PMU-less VM and machines with counters),
detection and measuring with a fake ``run``, and one real detection on this machine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from node_agent.metrics import counters
from node_agent.metrics.counters import (
    CounterReading,
    CounterSampler,
    CounterSupport,
    PerfCount,
    detect_counters,
    parse_perf_counts,
    parse_perf_stat,
)

PERF = Path(__file__).parent / "fixtures" / "perf"
HYBRID = (PERF / "intel_hybrid_saxpy.csv").read_text()
LKML = (PERF / "lkml_intel_system_wide.csv").read_text()
EVENTS = "cycles,instructions,cache-misses"


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PERF / f"{name}.json").read_text())
    return data


class FakeRun:
    """Stands in for ``subprocess.run``: records each call, answers with a recording."""

    def __init__(
        self,
        stdout: str = "",
        stderr: str = "",
        returncode: int = 0,
        *,
        raises: BaseException | None = None,
    ) -> None:
        self.answer = (stdout, stderr, returncode)
        self.raises = raises
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    @classmethod
    def replaying(cls, name: str) -> FakeRun:
        data = recorded(name)
        return cls(data["stdout"], data["stderr"], data["returncode"])

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, kwargs))
        if self.raises is not None:
            raise self.raises
        stdout, stderr, returncode = self.answer
        return subprocess.CompletedProcess(argv, returncode, stdout, stderr)


# --- parsing --------------------------------------------------------------------------------


def test_hybrid_machine_counts_are_summed_over_core_types() -> None:
    reading = parse_perf_stat(HYBRID)
    assert reading == {
        "": CounterReading(
            cycles=1137157478 + 1593334628,
            instructions=2954171974 + 6648162165,
            cache_misses=10508716 + 6839402,
        )
    }
    assert reading[""].cpi == pytest.approx(2730492106 / 9602334139)
    assert reading[""].mpki == pytest.approx(17348118 / 9602334139 * 1000)


def test_real_system_wide_output_without_cache_misses_has_no_reading() -> None:
    counts = parse_perf_counts(LKML)
    assert PerfCount("", "cycles", 20574191.0, "counted") in counts
    assert PerfCount("", "cpu-clock", 8013.48, "counted") in counts  # msec unit, 2 decimals
    assert parse_perf_stat(LKML) == {}


@pytest.mark.parametrize("name", ["vm_detect", "vm_detect_nonroot", "vm_measure_cgroup"])
def test_this_vm_reports_not_supported_so_no_readings(name: str) -> None:
    data = recorded(name)
    counts = parse_perf_counts(data["stdout"])
    assert counts and all(c.status == "<not supported>" and c.value is None for c in counts)
    assert {c.event for c in counts} == {"cycles", "instructions", "cache-misses"}  # ":u" gone
    assert parse_perf_stat(data["stdout"]) == {}


def test_recorded_cgroup_run_has_a_cgroup_column_and_machine_wide_lines() -> None:
    counts = parse_perf_counts(recorded("vm_measure_cgroup")["stdout"])
    assert [(c.cgroup, c.event) for c in counts] == [
        ("docker", "cycles"),
        ("docker", "instructions"),
        ("docker", "cache-misses"),
        ("", "cycles"),
        ("", "instructions"),
        ("", "cache-misses"),
    ]


# The cgroup layout below follows the recorded cgroup run above, with counted values in place
# of "<not supported>" (this VM cannot produce those).
CGROUP_RUN = """# started on Sat Nov 21 08:56:58 2026

3000,,cycles,sluice/n1/job-1.t0.a1,100200300,100.00,,
1000,,instructions,sluice/n1/job-1.t0.a1,100200300,100.00,0.33,insn per cycle
7,,cache-misses,sluice/n1/job-1.t0.a1,100200300,100.00,,
<not counted>,,cycles,sluice/n1/job-2.t0.a1,0,0.00,,
<not counted>,,instructions,sluice/n1/job-2.t0.a1,0,0.00,,
<not counted>,,cache-misses,sluice/n1/job-2.t0.a1,0,0.00,,
9000,,cycles,,200400600,100.00,,
6000,,instructions,,200400600,100.00,0.67,insn per cycle
30,,cache-misses,,200400600,100.00,,
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            CGROUP_RUN,
            {
                "sluice/n1/job-1.t0.a1": CounterReading(3000, 1000, 7),
                "": CounterReading(9000, 6000, 30),
            },
            id="cgroups and machine-wide; a not-counted cgroup is absent",
        ),
        pytest.param(
            "5,,cycles:u,10,100.00,,\n4,,instructions:u,10,100.00,,\n1,,cache-misses:u,10,100.00,,\n",
            {"": CounterReading(5, 4, 1)},
            id="user-only fallback modifiers",
        ),
        pytest.param(
            "5,,cpu-cycles,10,100.00,,\n4,,instructions,10,100.00,,\n1,,cache-misses,10,100.00,,\n",
            {"": CounterReading(5, 4, 1)},
            id="cpu-cycles alias",
        ),
        pytest.param(
            "5,,cpu_core/cycles/,10,98.00,,\n<not counted>,,cpu_atom/cycles/,0,0.00,,\n"
            "4,,cpu_core/instructions/,10,98.00,,\n<not counted>,,cpu_atom/instructions/,0,0.00,,\n"
            "1,,cpu_core/cache-misses/,10,98.00,,\n<not counted>,,cpu_atom/cache-misses/,0,0.00,,\n",
            {"": CounterReading(5, 4, 1)},
            id="hybrid: an idle core type not counted",
        ),
        pytest.param(
            "5,,cycles,10,100.00,,\n4,,instructions,10,100.00,,\n"
            "<not supported>,,cache-misses,0,100.00,,\n",
            {},
            id="one event not supported",
        ),
        pytest.param(
            "5,,cycles,10,100.00,,\n0,,instructions,10,100.00,,\n1,,cache-misses,10,100.00,,\n",
            {"": CounterReading(5, 0, 1)},
            id="zero instructions still a reading",
        ),
        pytest.param(
            "5,,cycles,10,100.00,1.2,GHz\n,,,,,0.04,stalled cycles per insn\n"
            "4,,instructions,10,100.00,,\n1,,cache-misses,10,100.00,,\n\n",
            {"": CounterReading(5, 4, 1)},
            id="metric-only continuation and empty lines skipped",
        ),
        pytest.param("# started on Mon\n\n", {}, id="nothing counted"),
    ],
)
def test_parse_perf_stat(text: str, expected: dict[str, CounterReading]) -> None:
    assert parse_perf_stat(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Error:\n", "line 1: 'Error:' is not a counter line"),
        ("5,,\n", "line 1: no event name"),
        ("# c\nfive,,cycles,10,100.00,,\n", "line 2: value 'five' of cycles is not a count"),
        ("-5,,cycles,10,100.00,,\n", "line 1: value '-5' of cycles is not a count"),
        ("nan,,cycles,10,100.00,,\n", "line 1: value 'nan' of cycles is not a count"),
    ],
)
def test_parse_perf_stat_rejects_garbage(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"^perf stat: {problem}"):
        parse_perf_stat(text)


@pytest.mark.parametrize(
    ("reading", "cpi", "mpki"),
    [
        (CounterReading(3000, 1000, 7), 3.0, 7.0),
        (CounterReading(500, 2000, 0), 0.25, 0.0),
        (CounterReading(500, 0, 3), None, None),
    ],
)
def test_cpi_and_mpki(reading: CounterReading, cpi: float | None, mpki: float | None) -> None:
    assert (reading.cpi, reading.mpki) == (cpi, mpki)


# --- detection ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        pytest.param(
            FakeRun(HYBRID),
            CounterSupport(True, ""),
            id="machine with counters",
        ),
        pytest.param(
            FakeRun.replaying("vm_detect"),
            CounterSupport(
                False,
                "no hardware performance counters "
                "(perf stat: cycles, instructions, cache-misses <not supported>)",
            ),
            id="this VM: no PMU",
        ),
        pytest.param(
            FakeRun.replaying("vm_detect_nonroot"),
            CounterSupport(
                False,
                "no hardware performance counters "
                "(perf stat: cycles, instructions, cache-misses <not supported>)",
            ),
            id="this VM as nobody: user-only fallback, still no PMU",
        ),
        pytest.param(
            FakeRun.replaying("permission_denied"),
            CounterSupport(
                False,
                "no permission to read hardware counters (kernel.perf_event_paranoid is 2): "
                "run the agent as root or with CAP_PERFMON",
            ),
            id="refused by perf_event_paranoid",
        ),
        pytest.param(
            FakeRun(LKML),
            CounterSupport(False, "perf stat did not report cache-misses"),
            id="an event missing",
        ),
        pytest.param(
            FakeRun("<not counted>,,cycles,0,0.00,,\n4,,instructions,1,100.00,,\n"),
            CounterSupport(
                False,
                "hardware counters were not counted (perf stat: cycles <not counted>); "
                "perf stat did not report cache-misses",
            ),
            id="not counted",
        ),
        pytest.param(
            FakeRun(
                "0,,cycles,9,100.00,,\n0,,instructions,9,100.00,,\n0,,cache-misses,9,100.00,,\n"
            ),
            CounterSupport(False, "hardware counters read zero (perf stat: cycles, instructions)"),
            id="counters that never count",
        ),
        pytest.param(
            FakeRun("", "WARNING: perf not found for kernel 5.15.0-91\n\n  You may need...\n", 2),
            CounterSupport(
                False, "perf stat failed (exit 2): WARNING: perf not found for kernel 5.15.0-91"
            ),
            id="distribution wrapper without the kernel's perf",
        ),
        pytest.param(
            FakeRun("Segmentation fault\n"),
            CounterSupport(
                False,
                "perf stat output not understood "
                "(perf stat: line 1: 'Segmentation fault' is not a counter line)",
            ),
            id="unparsable output",
        ),
    ],
)
def test_detect_counters(run: FakeRun, expected: CounterSupport) -> None:
    assert detect_counters(run) == expected
    [(argv, kwargs)] = run.calls
    assert argv == ["perf", "stat", "-x,", "-o", "/dev/stdout", "-a", "-e", EVENTS, "--", "true"]
    assert kwargs["timeout"] == counters.DETECT_TIMEOUT_S
    assert kwargs["capture_output"] and kwargs["text"]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (FileNotFoundError(2, "No such file or directory", "perf"), "perf is not installed"),
        (
            subprocess.TimeoutExpired(["perf"], counters.DETECT_TIMEOUT_S),
            "perf stat did not finish within 5 s",
        ),
        (PermissionError(13, "Permission denied", "perf"), "perf cannot be run: [Errno 13]"),
    ],
)
def test_detect_counters_when_perf_cannot_run(error: BaseException, reason: str) -> None:
    run = FakeRun(raises=error)
    support = detect_counters(run)
    assert not support.available
    assert support.reason.startswith(reason)


def test_detect_counters_on_this_machine() -> None:
    support = detect_counters()
    if not support.available:
        assert support.reason  # this VM: no PMU, and the reason says so
        return
    # A machine that has counters after all: believe it only if a real measurement counts.
    readings = CounterSampler(support).measure([], 0.05)
    assert readings[""].cycles > 0


# --- measuring ------------------------------------------------------------------------------

AVAILABLE = CounterSupport(True, "")


@pytest.mark.parametrize(
    ("cgroups", "expected"),
    [
        ([], ["-e", EVENTS, "--", "sleep", "0.250"]),
        (
            ["a/b", "c"],
            [
                "-e",
                f"{EVENTS},{EVENTS}",
                "-G",
                "a/b,a/b,a/b,c,c,c",
                "-e",
                EVENTS,
                "--",
                "sleep",
                "0.250",
            ],
        ),
        (["c", "c"], ["-e", EVENTS, "-G", "c,c,c", "-e", EVENTS, "--", "sleep", "0.250"]),
    ],
)
def test_measure_command_gives_every_event_its_cgroup(
    cgroups: list[str], expected: list[str]
) -> None:
    run = FakeRun(CGROUP_RUN)
    CounterSampler(AVAILABLE, run).measure(cgroups, 0.25)
    [(argv, kwargs)] = run.calls
    assert argv == ["perf", "stat", "-x,", "-o", "/dev/stdout", "-a", *expected]
    assert kwargs["timeout"] == 0.25 + counters.MEASURE_TIMEOUT_MARGIN_S


def test_measure_returns_the_readings_by_cgroup() -> None:
    sampler = CounterSampler(AVAILABLE, FakeRun(CGROUP_RUN))
    readings = sampler.measure(["sluice/n1/job-1.t0.a1", "sluice/n1/job-2.t0.a1"], 1.0)
    assert readings == {
        "sluice/n1/job-1.t0.a1": CounterReading(3000, 1000, 7),
        "": CounterReading(9000, 6000, 30),
    }
    assert sampler.last_failure == ""


def test_measure_without_counters_runs_nothing() -> None:
    run = FakeRun(HYBRID)
    assert CounterSampler(CounterSupport(False, "no PMU"), run).measure(["a"], 1.0) == {}
    assert run.calls == []


@pytest.mark.parametrize(
    ("run", "failure"),
    [
        pytest.param(
            FakeRun.replaying("missing_cgroup"),
            "perf stat failed (exit 129): no access to cgroup "
            "/sys/fs/cgroup/unified/sluice-no-such-cgroup",
            id="a cgroup removed before perf opened it (recorded)",
        ),
        pytest.param(
            FakeRun(raises=subprocess.TimeoutExpired(["perf"], 11.0)),
            "perf stat did not finish within 1 s + margin",
            id="timeout",
        ),
        pytest.param(
            FakeRun(raises=FileNotFoundError(2, "gone", "perf")),
            "perf cannot be run: [Errno 2] gone: 'perf'",
            id="perf uninstalled since detection",
        ),
        pytest.param(
            FakeRun("garbage\n"),
            "perf stat output not understood (perf stat: line 1: 'garbage' is not a counter line)",
            id="unparsable output",
        ),
    ],
)
def test_measure_failure_returns_nothing_and_says_why(
    run: FakeRun, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    sampler = CounterSampler(AVAILABLE, run)
    assert sampler.measure(["sluice-no-such-cgroup"], 1.0) == {}
    assert sampler.last_failure == failure
    sampler.measure(["sluice-no-such-cgroup"], 1.0)
    warnings = [r for r in caplog.records if "hardware counters not measured" in r.getMessage()]
    assert len(warnings) == 1  # the same failure is logged once, not every interval


@pytest.mark.parametrize(
    ("cgroups", "duration"), [([""], 1.0), (["a,b"], 1.0), (["a"], 0.0), (["a"], -1.0)]
)
def test_measure_rejects_bad_arguments(cgroups: list[str], duration: float) -> None:
    with pytest.raises(ValueError):
        CounterSampler(AVAILABLE, FakeRun(CGROUP_RUN)).measure(cgroups, duration)
