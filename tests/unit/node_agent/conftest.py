"""Builders for the node-agent runtime unit tests (no processes, containers or real cgroups)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from node_agent.runtime.base import ResourceLimits, TaskLaunch


def make_launch(
    key: str = "job-1.task-0.a1",
    argv: tuple[str, ...] = ("sleep", "60"),
    cpu: float = 0.5,
    memory_mb: int = 64,
    cpuset: tuple[int, ...] = (),
    **kwargs: object,
) -> TaskLaunch:
    return TaskLaunch(
        task_key=key,
        job_id="job-1",
        task_id="task-0",
        attempt=1,
        allocation_id="alloc-9",
        argv=argv,
        limits=ResourceLimits(cpu=cpu, memory_mb=memory_mb, cpuset=cpuset),
        **kwargs,  # type: ignore[arg-type]
    )


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Create ``files`` (relative path -> content) under ``root``; returns ``root``."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def launch_builder() -> Callable[..., TaskLaunch]:
    return make_launch
