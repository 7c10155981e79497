"""`scripts/demo.sh` installs only what the demo needs, and says what it installs: nothing for
the process runtime (the README: the demo needs no external service), Docker Engine and
busybox-static for `--runtime docker`.  It used to install Docker, Mosquitto, InfluxDB and
docker-compose as root, silently choosing what the tests need.

Run for real in a copy of the scripts, with `apt-get`, `dpkg-query` and `id` on PATH recording
what they are asked (every package missing, run as root), and a `.venv` whose `python` and
`sluice` only record their arguments.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _tool(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def run_demo(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], str]:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "scripts", tree / "scripts")
    calls = tmp_path / "calls"
    calls.touch()
    fake = tmp_path / "bin"
    fake.mkdir()
    _tool(fake / "apt-get", f'echo "apt-get $*" >> {calls}')
    _tool(fake / "dpkg-query", "exit 1")  # nothing installed
    _tool(fake / "id", "echo 0")  # root
    venv = tree / ".venv" / "bin"
    venv.mkdir(parents=True)
    _tool(venv / "python", f'echo "python $*" >> {calls}')
    _tool(venv / "sluice", f'echo "sluice $*" >> {calls}')
    result = subprocess.run(
        ["bash", str(tree / "scripts" / "demo.sh"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": f"{fake}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path)},
    )
    return result, calls.read_text()


def test_the_process_runtime_demo_installs_no_system_package(tmp_path: Path) -> None:
    result, calls = run_demo(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "apt-get" not in calls
    assert "sluice demo" in calls


@pytest.mark.parametrize("argv", [["--runtime", "docker"], ["--runtime=docker"]])
def test_the_docker_demo_installs_docker_and_busybox_only_and_says_so(
    tmp_path: Path, argv: list[str]
) -> None:
    result, calls = run_demo(tmp_path, *argv)
    assert result.returncode == 0, result.stderr
    installs = [
        line for line in calls.splitlines() if line.startswith("apt-get") and "install" in line
    ]
    assert len(installs) == 1
    assert installs[0].split()[-2:] == ["docker.io", "busybox-static"]
    for package in ("mosquitto", "influxdb", "docker-compose"):
        assert package not in calls
    assert "installing Debian packages as root (apt-get): docker.io busybox-static" in result.stdout
    assert f"sluice demo {' '.join(argv)}" in calls
