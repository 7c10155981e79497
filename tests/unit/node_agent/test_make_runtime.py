"""make_runtime: choosing a runtime and refusing unusable ones with one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.runtime import make_runtime
from node_agent.runtime.base import RuntimeUnavailableError
from node_agent.runtime.process_runtime import ProcessRuntime
from plumbing.errors import UserError
from tests.unit.node_agent.conftest import make_launch, write_files


def test_unknown_kind_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(RuntimeUnavailableError, match=r"runtime: unknown kind 'vm'.*process"):
        make_runtime("vm", "n1", tmp_path)


def test_unreachable_docker_engine_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(RuntimeUnavailableError, match="docker: cannot reach the engine at"):
        make_runtime("docker", "n1", tmp_path, docker_url=f"unix://{tmp_path}/no.sock")


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("none", "cgroups disabled"),
        ("missing", "no cgroup filesystem at"),
        ("unwritable", "not writable"),
    ],
)
def test_process_runtime_falls_back_and_says_why(tmp_path: Path, setup: str, reason: str) -> None:
    root: Path | None = tmp_path / "cgroup"
    if setup == "none":
        root = None
    if setup == "unwritable":
        # A v2 tree whose subtree_control cannot be written (it is a directory).
        write_files(tmp_path / "cgroup", {"cgroup.controllers": "cpu"})
        (tmp_path / "cgroup" / "cgroup.subtree_control").mkdir()
    runtime = make_runtime("process", "n1", tmp_path / "state", cgroup_root=root)
    assert isinstance(runtime, ProcessRuntime)
    assert not runtime.uses_cgroups
    text = runtime.describe()
    assert "FALLBACK" in text and reason in text and "NOT enforced" in text


@pytest.mark.parametrize(
    ("launch", "message"),
    [
        (make_launch(cpu=0), "limits.cpu: must be > 0"),
        (make_launch(memory_mb=-5), "limits.memory_mb: must be > 0"),
        (make_launch(cpuset=(4096,)), "limits.cpuset: no such CPU 4096"),
        (make_launch(argv=()), "argv: must name a program"),
    ],
)
def test_bad_launch_is_a_user_error_and_leaves_no_trace(
    tmp_path: Path, launch, message: str
) -> None:
    runtime = ProcessRuntime("n1", tmp_path, cgroup_root=None)
    with pytest.raises(UserError, match=message):
        runtime.start(launch)
    assert runtime.observe() == []
    assert not (tmp_path / "tasks").exists()
