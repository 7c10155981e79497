"""`sluice rm` refuses a setting out of range in one line naming the flag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--locality-wait", "-1", "--locality-wait: must be 0 to 3600 seconds"),
        ("--locality-wait", "4000", "--locality-wait: must be 0 to 3600 seconds"),
        ("--preemption-interval", "-2", "--preemption-interval: must be 0 or more seconds"),
        ("--oversubscription", "xp", "argument --oversubscription: invalid choice: 'xp'"),
    ],
)
def test_a_setting_out_of_range_is_refused_naming_the_flag(
    tmp_path: Path, flag: str, value: str, message: str
) -> None:
    argv = ["rm", "--insecure", "--state-dir", str(tmp_path / "rm"), f"{flag}={value}"]
    done = subprocess.run(
        [sys.executable, "-m", "sluice", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if ": error:" in line]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr
