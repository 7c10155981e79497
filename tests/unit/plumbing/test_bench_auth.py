"""bench/bench_auth.py runs and prints a figure for every operation it names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "bench_auth.py"


def test_the_benchmark_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--repeats", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=BENCH.parents[1],
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "cores" in lines[0]
    assert len(lines) == 8 and all(len(line.split()) >= 3 for line in lines[2:])
