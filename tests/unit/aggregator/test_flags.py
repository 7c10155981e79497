"""The aggregator's knobs through ``sluice local up`` (issue 28 section 3): the ones given are
passed on to the aggregator it starts, and a bad one is a one-line error before anything."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from aggregator import flags


def local_up(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    flags.add_arguments(parser, for_local=True)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "forwarded"),
    [
        ((), ()),  # nothing given: the aggregator's own defaults
        (
            ("--load-threshold", "cpu_ut=off", "--load-threshold", "mem_ut=0.5"),
            ("--load-threshold", "cpu_ut=off", "--load-threshold", "mem_ut=0.5"),
        ),
        (
            ("--window", "10", "--ranking", "least-loaded"),
            ("--window", "10", "--ranking", "least-loaded"),
        ),
        (
            ("--stale-after", "2", "--forget-after", "30", "--candidate-limit", "5"),
            ("--stale-after", "2.0", "--forget-after", "30.0", "--candidate-limit", "5"),
        ),
    ],
)
def test_the_knobs_given_are_passed_on(argv: tuple[str, ...], forwarded: tuple[str, ...]) -> None:
    args = local_up(*argv)
    flags.check(args)
    assert flags.forwarded(args) == forwarded


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (("--load-threshold", "cpu_ut=abc"), "--load-threshold: cpu_ut must be a positive"),
        (("--load-threshold", "cpu=0.5"), "--load-threshold: expected METRIC=FRACTION"),
        (("--window", "1"), "--window: must be at least 2 samples"),
        (("--stale-after", "700"), "--forget-after: must be longer than --stale-after"),
        (("--candidate-limit", "0"), "--candidate-limit: must be at least 1"),
    ],
)
def test_a_bad_knob_names_its_flag(argv: tuple[str, ...], problem: str) -> None:
    with pytest.raises(ValueError, match="^" + problem.replace(".", r"\.")):
        flags.check(local_up(*argv))


def test_local_up_refuses_a_bad_knob_in_one_line_before_starting_anything(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    argv = ["local", "up", "--dir", str(directory), "--load-threshold", "cpu_ut=lots"]
    run = subprocess.run(
        [sys.executable, "-m", "sluice", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "sluice: error: --load-threshold: cpu_ut must be a positive fraction or 'off', got 'lots'"
    ]
    assert not directory.exists()
