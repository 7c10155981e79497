"""PSI parsing (table-driven, real recordings included) and reading PSI directories."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from node_agent.metrics.pressure import (
    PressureStall,
    parse_pressure,
    read_cgroup_pressure,
    read_pressure,
)

FIXTURES = Path(__file__).parent / "fixtures"

SOME_ONLY = "some avg10=0.12 avg60=3.40 avg300=100.00 total=123456789\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            (FIXTURES / "host_t1/proc/pressure/io").read_text(),
            PressureStall(0.47, 0.45, 0.61, 20890966, 0.16, 0.38, 0.52, 16073310),
            id="recorded /proc/pressure/io",
        ),
        pytest.param(
            (FIXTURES / "cgroup_v2/docker_cpu.pressure").read_text(),
            PressureStall(0.0, 0.0, 0.04, 10799863, 0.0, 0.0, 0.02, 9464462),
            id="recorded cgroup v2 cpu.pressure",
        ),
        pytest.param(
            SOME_ONLY,
            PressureStall(0.12, 3.40, 100.0, 123456789, None, None, None, None),
            id="machine cpu before Linux 5.13: no full line",
        ),
        pytest.param(
            "full avg10=1 avg60=2 avg300=3 total=4\nsome total=8 avg300=7 avg60=6 avg10=5\n",
            PressureStall(5.0, 6.0, 7.0, 8, 1.0, 2.0, 3.0, 4),
            id="lines and keys in any order",
        ),
        pytest.param(
            SOME_ONLY.replace("total", "extra=9 total") + "later avg10=1 x=2\n",
            PressureStall(0.12, 3.40, 100.0, 123456789, None, None, None, None),
            id="unknown keys and line kinds ignored",
        ),
    ],
)
def test_parse_pressure(text: str, expected: PressureStall) -> None:
    assert parse_pressure(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no 'some' line"),
        ("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "no 'some' line"),
        ("some avg10=0.00 avg60=0.00 total=0\n", "avg300 missing"),
        ("some avg10=0.00 avg60=0.00 avg300=0.00\n", "total missing"),
        ("some avg10=x avg60=0.00 avg300=0.00 total=0\n", "avg10='x' is not a number"),
        ("some avg10=nan avg60=0.00 avg300=0.00 total=0\n", "avg10='nan' is not a percentage"),
        ("some avg10=-1 avg60=0.00 avg300=0.00 total=0\n", "avg10='-1' is not a percentage"),
        ("some avg10=0 avg60=0 avg300=0 total=1.5\n", "total='1.5' is not a count"),
        ("some avg10=0 avg60=0 avg300=0 total=-3\n", "total='-3' is not a count"),
        (SOME_ONLY + SOME_ONLY, "a second 'some' line"),
        ("hello world\n", "'world' is not key=value"),
        ("some\n", "has no figures"),
    ],
)
def test_parse_pressure_rejects_garbage_naming_the_source(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=f"^/x/cpu.pressure: .*{problem}"):
        parse_pressure(text, source="/x/cpu.pressure")


def test_read_pressure_omits_missing_and_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "cpu").write_text(SOME_ONLY)
    (tmp_path / "memory").mkdir()  # reading a directory fails like EOPNOTSUPP does: OSError
    assert read_pressure(tmp_path) == {"cpu": parse_pressure(SOME_ONLY)}
    assert read_pressure(tmp_path / "absent") == {}


def test_read_pressure_names_the_file_that_does_not_parse(tmp_path: Path) -> None:
    (tmp_path / "io").write_text("some avg10=zz\n")
    with pytest.raises(ValueError, match="^" + re.escape(f"{tmp_path / 'io'}: ")):
        read_pressure(tmp_path)


def test_read_cgroup_pressure_reads_the_resource_dot_pressure_files(tmp_path: Path) -> None:
    recorded = (FIXTURES / "cgroup_v2/docker_cpu.pressure").read_text()
    (tmp_path / "cpu.pressure").write_text(recorded)
    (tmp_path / "io.pressure").write_text(SOME_ONLY)
    (tmp_path / "cpu").write_text("not a PSI file, and not read")
    assert read_cgroup_pressure(tmp_path) == {
        "cpu": parse_pressure(recorded),
        "io": parse_pressure(SOME_ONLY),
    }


def test_real_proc_pressure_parses_when_the_kernel_has_psi() -> None:
    if not Path("/proc/pressure").is_dir():
        pytest.skip("this kernel has no PSI")
    readings = read_pressure()
    assert set(readings) <= {"cpu", "memory", "io"}
    assert readings, "/proc/pressure exists but nothing could be read"
    for stall in readings.values():
        assert 0.0 <= stall.some_avg10 <= 100.0
        assert stall.some_total_us >= 0
