"""bench/bench_preemption.py runs, decides, and prints its figures (a small cluster)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench" / "bench_preemption.py"


@pytest.mark.parametrize("mode", ["graceful", "immediate", "kill"])
def test_the_benchmark_runs_and_every_decision_preempts(mode: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--nodes",
            "200",
            "--containers",
            "1200",
            "--jobs",
            "12",
            "--repeats",
            "3",
            "--mode",
            mode,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=BENCH.parents[1],
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "cores" in lines[0]
    preempted = next(line for line in lines if line.startswith("each decision preempted"))
    assert int(preempted.split()[3]) > 0
    assert any(line.startswith("in a pass") for line in lines)
    assert any(line.startswith("decision alone") for line in lines)
