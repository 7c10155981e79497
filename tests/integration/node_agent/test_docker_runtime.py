"""The docker runtime against the real Docker Engine, checked through ``docker inspect``/stats."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from node_agent.runtime.base import ResourceLimits, RunState, TaskExistsError, UnknownTaskError
from node_agent.runtime.cgroups import format_cpuset
from node_agent.runtime.docker_runtime import DockerRuntime
from node_agent.runtime.task_image import DEFAULT_IMAGE, RECIPE_LABEL
from tests.integration.node_agent.conftest import BURN, exited, launch, state_of, wait_until

pytestmark = pytest.mark.integration
MiB = 1024 * 1024
SLEEP = ("sleep", "30")


@pytest.fixture
def runtime(docker_client: Any, node_id: str, state_dir: Path) -> Iterator[DockerRuntime]:
    rt = DockerRuntime(node_id, state_dir, docker_client)
    yield rt
    rt.purge(grace_seconds=0)


def container_of(client: Any, node_id: str, key: str) -> Any:
    (container,) = client.containers.list(
        all=True, filters={"label": [f"sluice.node={node_id}", f"sluice.task_key={key}"]}
    )
    return container


def status_of(container: Any) -> str:
    container.reload()
    return str(container.status)


def cpu_over_about_one_second(container: Any) -> float:
    """CPU seconds between the two samples one non-streaming ``docker stats`` call takes."""
    stats = container.stats(stream=False)
    now = stats["cpu_stats"]["cpu_usage"]["total_usage"]
    before = stats["precpu_stats"]["cpu_usage"]["total_usage"]
    return float(now - before) / 1e9


def test_container_has_labels_and_granted_limits(
    runtime: DockerRuntime, docker_client: Any, node_id: str
) -> None:
    runtime.start(launch("t1", SLEEP, cpu=0.5, memory_mb=48, cpuset=(0,)))
    attrs = container_of(docker_client, node_id, "t1").attrs
    host = attrs["HostConfig"]
    assert (host["CpuPeriod"], host["CpuQuota"], host["CpusetCpus"]) == (100_000, 50_000, "0")
    assert (host["Memory"], host["MemorySwap"]) == (48 * MiB, 48 * MiB)
    assert host["AutoRemove"] is False
    labels = attrs["Config"]["Labels"]
    # The image's recipe label is inherited; the runtime's own labels are these.
    assert {k: v for k, v in labels.items() if k.startswith("sluice.")} == {
        "sluice.cluster": "sluice",
        "sluice.node": node_id,
        "sluice.job": "job",
        "sluice.task": "t1",
        "sluice.attempt": "1",
        "sluice.allocation": "alloc",
        "sluice.task_key": "t1",
    }
    assert attrs["Config"]["Image"] == DEFAULT_IMAGE
    assert state_of(runtime, "t1").state is RunState.RUNNING


def test_default_image_is_built_locally_with_recipe_label(
    runtime: DockerRuntime, docker_client: Any
) -> None:
    # dd reports on stderr, which Docker keeps apart from stdout: send it to stdout to keep order.
    script = "echo hi; seq 3; yes | head -n 2; dd if=/dev/zero bs=1 count=0 2>&1"
    runtime.start(launch("t1", script))
    assert exited(runtime, "t1").exit_code == 0
    assert runtime.logs("t1") == b"hi\n1\n2\n3\ny\ny\n0+0 records in\n0+0 records out\n"
    assert RECIPE_LABEL in docker_client.images.get(DEFAULT_IMAGE).labels


def test_paused_task_burns_no_cpu_and_burns_again_after_resume(
    runtime: DockerRuntime, docker_client: Any, node_id: str
) -> None:
    runtime.start(launch("burn", BURN, cpu=1.0))
    container = container_of(docker_client, node_id, "burn")
    runtime.suspend("burn")
    container.reload()
    assert container.status == "paused"
    assert state_of(runtime, "burn").state is RunState.SUSPENDED
    assert cpu_over_about_one_second(container) < 0.02
    runtime.resume("burn")
    container.reload()
    assert container.status == "running"
    # Burning again: at once on an idle machine, a little later on a busy one.
    wait_until(lambda: cpu_over_about_one_second(container) > 0.1)


def test_resize_updates_quota_cpuset_and_memory(
    runtime: DockerRuntime, docker_client: Any, node_id: str
) -> None:
    runtime.start(launch("t1", SLEEP, cpu=0.5, memory_mb=64, cpuset=(0,)))
    runtime.resize("t1", ResourceLimits(cpu=1.5, memory_mb=32, cpuset=()))
    host = container_of(docker_client, node_id, "t1").attrs["HostConfig"]
    # Below its grant (a preemption's shrink) its memory may go to swap; back at it, not.
    assert (host["CpuQuota"], host["Memory"], host["MemorySwap"]) == (150_000, 32 * MiB, -1)
    # An empty cpuset is spelled out as all of the node's CPUs, so the resize widens it.
    assert host["CpusetCpus"] == format_cpuset(os.sched_getaffinity(0))
    assert state_of(runtime, "t1").limits.memory_mb == 32
    runtime.resize("t1", ResourceLimits(cpu=0.5, memory_mb=64, cpuset=()))
    host = container_of(docker_client, node_id, "t1").attrs["HostConfig"]
    assert (host["Memory"], host["MemorySwap"]) == (64 * MiB, 64 * MiB)


def test_usage_grows_while_burning(runtime: DockerRuntime) -> None:
    runtime.start(launch("burn", BURN))
    first = runtime.usage("burn")
    second = wait_until(
        lambda: (u := runtime.usage("burn")).cpu_seconds > first.cpu_seconds + 0.05 and u
    )
    assert second.memory_bytes > 0


@pytest.mark.parametrize(("script", "code"), [("exit 0", 0), ("exit 3", 3), ("kill -KILL $$", 137)])
def test_exit_codes(runtime: DockerRuntime, script: str, code: int) -> None:
    runtime.start(launch("t1", script))
    observation = exited(runtime, "t1")
    assert observation.exit_code == code
    assert observation.finished_at is not None and observation.finished_at >= time.time() - 60


def test_stop_is_sigterm_then_sigkill_after_grace(runtime: DockerRuntime) -> None:
    runtime.start(launch("polite", SLEEP))
    runtime.start(launch("stubborn", "trap '' TERM; echo ready; while :; do sleep 0.05; done"))
    wait_until(lambda: b"ready" in runtime.logs("stubborn"))  # SIGTERM before the trap kills
    runtime.suspend("polite")
    runtime.stop("polite", grace_seconds=2)  # unpauses first
    runtime.stop("stubborn", grace_seconds=0.5)
    observed = {o.task_key: o.exit_code for o in runtime.observe()}
    assert observed == {"polite": 143, "stubborn": 137}
    runtime.stop("polite")  # stopping an exited task does nothing


def test_logs_survive_cleanup_until_forget(
    runtime: DockerRuntime, docker_client: Any, node_id: str
) -> None:
    runtime.start(launch("t1", "echo to-out; exit 5"))
    exited(runtime, "t1")
    container_id = container_of(docker_client, node_id, "t1").id
    runtime.cleanup("t1")
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(container_id)
    assert runtime.logs("t1") == b"to-out\n"
    assert state_of(runtime, "t1").exit_code == 5
    runtime.forget("t1")
    with pytest.raises(UnknownTaskError):
        runtime.logs("t1")


def test_concurrent_starts_each_run_once(
    runtime: DockerRuntime, docker_client: Any, node_id: str
) -> None:
    """Starts run outside the runtime's lock: several at once all start, and two starts of
    one key give one container and one TaskExistsError."""
    keys = ["a", "b", "c", "twice", "twice"]
    with ThreadPoolExecutor(len(keys)) as pool:
        futures = [pool.submit(runtime.start, launch(key, SLEEP)) for key in keys]
    errors = [f.exception() for f in futures]
    assert errors[:3] == [None, None, None]
    assert sorted(type(e).__name__ for e in errors[3:]) == ["NoneType", "TaskExistsError"]
    for key in ("a", "b", "c", "twice"):
        assert state_of(runtime, key).state is RunState.RUNNING
        container_of(docker_client, node_id, key)  # exactly one each
    assert len(runtime.observe()) == 4


def test_new_runtime_adopts_containers_without_duplicating(
    docker_client: Any, node_id: str, state_dir: Path
) -> None:
    first = DockerRuntime(node_id, state_dir, docker_client)
    first.start(launch("t1", SLEEP))
    first.start(launch("t2", SLEEP))
    first.suspend("t2")
    first.start(launch("t3", "sleep 0.3; exit 7"))
    del first  # the agent is SIGKILLed: nothing stopped, nothing cleaned up
    t3 = container_of(docker_client, node_id, "t3")
    wait_until(lambda: status_of(t3) == "exited")  # t3 ends while no runtime exists

    second = DockerRuntime(node_id, state_dir, docker_client)
    try:
        observed = {o.task_key: o for o in second.observe()}
        assert observed["t1"].state is RunState.RUNNING
        assert observed["t2"].state is RunState.SUSPENDED
        assert exited(second, "t3").exit_code == 7
        with pytest.raises(TaskExistsError):
            second.start(launch("t1", SLEEP))
        container_of(docker_client, node_id, "t1")  # still exactly one
        second.stop("t1", grace_seconds=2)
        assert state_of(second, "t1").exit_code == 143
    finally:
        second.purge(grace_seconds=0)


def test_purge_leaves_no_container_and_no_state(
    runtime: DockerRuntime, docker_client: Any, node_id: str, state_dir: Path
) -> None:
    runtime.start(launch("running", SLEEP))
    runtime.start(launch("paused", SLEEP))
    runtime.suspend("paused")
    runtime.start(launch("done", "true"))
    exited(runtime, "done")
    runtime.purge(grace_seconds=0)
    assert (
        docker_client.containers.list(all=True, filters={"label": f"sluice.node={node_id}"}) == []
    )
    assert not (state_dir / "tasks").exists()
    assert runtime.observe() == []
