"""A swap file for tests that need swap (the machine has none by default): made, turned on, and
turned off and removed afterwards, even when the test fails.  Needs root; a machine that cannot
(no root, no fallocate) is reported through ``unavailable`` (a failure under CI=true)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def swap_file(size: str, name: str, unavailable: Callable[[str], None]) -> Iterator[Path]:
    """``size`` as fallocate reads it (``512M``, ``1G``); the file is named for the run, so one
    a killed run left on is not in the way."""
    path = Path(f"/var/tmp/sluice-test-{name}-{os.getpid()}.swap")
    try:
        subprocess.run(["fallocate", "-l", size, str(path)], check=True, capture_output=True)
        path.chmod(0o600)
        subprocess.run(["mkswap", str(path)], check=True, capture_output=True)
        subprocess.run(["swapon", str(path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as error:
        path.unlink(missing_ok=True)
        unavailable(f"cannot enable a swap file: {error}")
    try:
        yield path
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(["swapoff", str(path)], check=True, capture_output=True)
        path.unlink(missing_ok=True)
