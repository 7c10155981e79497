"""`sluice agent --machine-pressure DIR`: where the service watch reads the machine's PSI (tests
write it there); a directory without a readable, parsable ``cpu`` file is refused in one line."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from node_agent.daemon import add_arguments, machine_pressure_of
from node_agent.service_monitor import MACHINE_PRESSURE
from plumbing.errors import UserError

PSI = "some avg10=1.00 avg60=0.50 avg300=0.10 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def parsed(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--rm", "127.0.0.1:1", *flags])


def test_the_default_is_the_kernels() -> None:
    assert machine_pressure_of(parsed().machine_pressure) == MACHINE_PRESSURE


def test_a_directory_with_a_psi_cpu_file_is_taken(tmp_path: Path) -> None:
    (tmp_path / "cpu").write_text(PSI)
    assert machine_pressure_of(parsed("--machine-pressure", str(tmp_path)).machine_pressure) == (
        tmp_path
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "--machine-pressure: cannot read "),
        ("nonsense\n", "--machine-pressure: "),
        ("full avg10=0 avg60=0 avg300=0 total=0\n", "--machine-pressure: "),
    ],
)
def test_a_directory_without_a_psi_cpu_file_is_refused_in_one_line(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    if content is not None:
        (tmp_path / "cpu").write_text(content)
    with pytest.raises(UserError) as caught:
        machine_pressure_of(parsed("--machine-pressure", str(tmp_path)).machine_pressure)
    assert str(caught.value).startswith(problem) and "\n" not in str(caught.value)
