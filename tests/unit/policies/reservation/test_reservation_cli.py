"""`sluice model reservation` and `sluice model stragglers`, through a tiny parser."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from plumbing.errors import UserError
from sluice.model import reservation


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    parser = argparse.ArgumentParser()
    reservation.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    assert args.handler(args) == 0
    return capsys.readouterr().out


def test_reservation_json_matches_eq2_and_eq4(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(
        [
            "reservation",
            "--isolation",
            "0.75",
            "--tasks",
            "1",
            "--alpha",
            "2",
            "--tmin",
            "1",
            "--json",
        ],
        capsys,
    )
    result = json.loads(out)
    assert result["deadline"] == pytest.approx(2.0)
    assert result["utilization_lower_bound"] == pytest.approx(0.75)
    assert result["fitted_from"] is None


def test_strict_isolation_has_no_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["reservation", "--isolation", "1", "--tasks", "5", "--alpha", "2", "--tmin", "1"]
    assert json.loads(run([*argv, "--json"], capsys))["deadline"] is None
    assert "D = none" in run(argv, capsys)


def test_reservation_from_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = tmp_path / "durations.txt"
    history.write_text("# seconds\n1.0\n2.718281828459045\n\n7.38905609893065\n")
    out = run(
        ["reservation", "--isolation", "0.75", "--tasks", "1", "--history", str(history), "--json"],
        capsys,
    )
    result = json.loads(out)
    assert result["alpha"] == pytest.approx(1.0)
    assert result["deadline"] == pytest.approx(4.0)
    assert result["utilization_lower_bound"] is None  # alpha <= 1: infinite mean
    assert result["fitted_from"]["samples"] == 3


def test_stragglers_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["stragglers", "--alpha", "1.6", "--tasks", "20", "--runs", "2000", "--seed", "3"]
    result = json.loads(run([*argv, "--json"], capsys))
    assert result["reduction"] > 0.5
    assert "reduction of the mean phase time" in run(argv, capsys)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["reservation", "--isolation", "1.5", "--tasks", "2", "--alpha", "2", "--tmin", "1"],
            "--isolation: must be in [0, 1]",
        ),
        (
            ["reservation", "--isolation", "0.5", "--tasks", "0", "--alpha", "2", "--tmin", "1"],
            "--tasks: must be >= 1",
        ),
        (["reservation", "--isolation", "0.5", "--tasks", "2", "--tmin", "1"], "--alpha: required"),
        (["reservation", "--isolation", "0.5", "--tasks", "2", "--alpha", "2"], "--tmin: required"),
        (
            ["reservation", "--isolation", "0.5", "--tasks", "2", "--alpha", "-2", "--tmin", "1"],
            "--alpha: must be a positive",
        ),
        (
            ["reservation", "--isolation", "0.5", "--tasks", "2", "--alpha", "2", "--tmin", "0"],
            "--tmin: must be a positive",
        ),
        (
            [
                "reservation",
                "--isolation",
                "0.5",
                "--tasks",
                "2",
                "--history",
                "/nonexistent/h.txt",
            ],
            "--history: cannot read",
        ),
        (["stragglers", "--alpha", "0", "--tasks", "2"], "--alpha: must be a positive"),
        (["stragglers", "--alpha", "2", "--tasks", "0"], "--tasks: must be >= 1"),
        (["stragglers", "--alpha", "2", "--tasks", "2", "--runs", "0"], "--runs: must be >= 1"),
        (
            ["stragglers", "--alpha", "2", "--tasks", "100000", "--runs", "100000"],
            "--runs: runs × tasks",
        ),
        (["stragglers", "--alpha", "2", "--tasks", "2", "--seed", "-1"], "--seed: must be >= 0"),
    ],
)
def test_bad_flags_give_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UserError) as caught:
        run(argv, capsys)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1.0\nfast\n", "--history: line 2: not a number"),
        ("1.0\n-3\n", "--history: line 2: durations must be > 0"),
        ("1.0\n", "--history: need at least 2 durations"),
        ("2.0\n2.0\n", "--history: all durations are equal"),
    ],
)
def test_bad_history_names_the_line(
    content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "h.txt"
    history.write_text(content)
    argv = ["reservation", "--isolation", "0.5", "--tasks", "2", "--history", str(history)]
    with pytest.raises(UserError, match="^" + re.escape(message)):
        run(argv, capsys)


def test_history_excludes_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = tmp_path / "h.txt"
    history.write_text("1\n2\n")
    argv = [
        "reservation",
        "--isolation",
        "0.5",
        "--tasks",
        "2",
        "--history",
        str(history),
        "--alpha",
        "2",
    ]
    with pytest.raises(UserError, match=r"^--history: give either"):
        run(argv, capsys)
