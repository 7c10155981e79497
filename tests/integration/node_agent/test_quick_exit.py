"""A task that ends quickly is started and exited, never "did not start" (issue 27 item 14).

With ``max_retries: 0`` one job of 200 ``true`` tasks failed with ``did not start: no output``:
the runtime read the exit-status file, the task ended, then it polled the wrapper and, finding
it gone with no status read, concluded the task never started.  The first test forces that
interleaving on real processes and cgroups: the task waits until the runtime has made its
first read of the exit-status file, and that read answers as it was before the task ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from node_agent.runtime.base import RunState
from node_agent.runtime.process_runtime import ProcessRuntime
from node_agent.runtime.task_state import TaskDir
from tests.integration.node_agent.conftest import exited, launch, pid_alive, wait_until, wrapper_pid

pytestmark = pytest.mark.integration
GO = "go"
# Runs once the runtime's first read of its exit file lets it (see ``ends_between_reads``).
WAIT_FOR_GO = f'until [ -e "$SLUICE_TASK_DIR/{GO}" ]; do sleep 0.01; done'


@pytest.fixture
def runtime(cgroup_v1: Path, node_id: str, state_dir: Path) -> Iterator[ProcessRuntime]:
    rt = ProcessRuntime(node_id, state_dir, cgroup_root=cgroup_v1)
    assert rt.uses_cgroups, rt.describe()
    yield rt
    rt.purge(grace_seconds=0.2)


@pytest.fixture
def ends_between_reads(
    runtime: ProcessRuntime, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> list[Path]:
    """The first time the runtime reads a task's exit-status file and finds none, the task is
    let go and ends (its wrapper records the status and exits) before the read returns "none".
    Until then, the task's cgroup is seen without the wrapper in it (it runs, but the look came
    first).  Returns the task directories where that happened."""
    real_read_exit = TaskDir.read_exit
    straddled: list[Path] = []

    def read_exit(self: TaskDir) -> tuple[int, float] | None:
        seen = real_read_exit(self)
        if seen is None and not (self.path / GO).exists():
            (self.path / GO).touch()
            pid = wrapper_pid(state_dir, self.path.name)
            wait_until(lambda: not pid_alive(pid))
            straddled.append(self.path)
        return seen

    driver = runtime._cgroups
    assert driver is not None
    real_pids = driver.pids

    def pids(name: str) -> set[int]:
        if not (state_dir / "tasks" / name / GO).exists():
            return set()
        return real_pids(name)

    monkeypatch.setattr(TaskDir, "read_exit", read_exit)
    monkeypatch.setattr(driver, "pids", pids)
    return straddled


def test_a_task_that_ends_between_two_reads_has_started(
    runtime: ProcessRuntime, ends_between_reads: list[Path]
) -> None:
    runtime.start(launch("t-41", WAIT_FOR_GO))
    assert [p.name for p in ends_between_reads] == ["t-41"]  # the interleaving happened
    observation = exited(runtime, "t-41")
    assert (observation.state, observation.exit_code) == (RunState.EXITED, 0)


def test_many_quick_tasks_all_start_and_exit(runtime: ProcessRuntime) -> None:
    keys = [f"t-{i}" for i in range(100)]
    for key in keys:
        runtime.start(launch(key, ("true",)))
    for key in keys:
        assert exited(runtime, key).exit_code == 0, runtime.logs(key)
