"""An operator's hand on a real local cluster (issue 28, section 1), through the `sluice` CLI.

`sluice task suspend` and `sluice task resize` hold a task until `sluice task resume`: the RM's
automatic resumption (BIG-C's delayed resumption, which offers a preempted container its node's
free room at every heartbeat) leaves it alone, heartbeat after heartbeat and across an RM
restart, and `sluice job` says who holds it.  Each preemption step is stamped with when it
happened; resuming a task that runs whole is refused; a finished job keeps what it sprinted.

Nothing here waits for time to pass: "the RM had its chance to resume it" is a number of the
node's heartbeats the RM answered (its ``last_heartbeat`` moving on), not a sleep.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
import pytest
import yaml

from sluice.cli import main
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, Gate, phase, running_cluster, wait_until

pytestmark = pytest.mark.integration

T = TypeVar("T")
SPRINTER = 5  # the priority that sprints (1 s after its first task runs)
HEARTBEATS = 10  # more than the offers a preempted container declines before it is resumed
SETTINGS = {
    "priorities": [{"priority": SPRINTER, "sprint_timeout_s": 1}],
    "sprint": {"budget_s": 60, "replenish_s_per_hour": 0, "factor": 2.0},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("operator-hold-settings")
    settings = directory / "dias.yaml"
    settings.write_text(yaml.safe_dump(SETTINGS))
    yield from running_cluster(
        tmp_path_factory, "operator-hold", dispatch="dias", max_running_jobs=4, dias_config=settings
    )


@pytest.fixture
def gate() -> Iterator[Gate]:
    gate = Gate()
    yield gate
    gate.close()


def answered(ask: Callable[[], T]) -> T | None:
    """``ask()``, or None while the RM does not answer (it is restarting)."""
    with contextlib.suppress(grpc.RpcError):
        return ask()
    return None


def sluice(cluster: Cluster, *argv: str) -> int:
    return main(["--rm", cluster.info["rm"], "--dir", str(cluster.directory), *argv])


def task(cluster: Cluster, job_id: str) -> rm_pb.TaskInfo | None:
    detail = answered(lambda: cluster.job(job_id))
    return None if detail is None else max(detail.tasks, key=lambda t: t.attempt)


def heartbeats_pass(cluster: Cluster, count: int) -> None:
    """Wait until the RM has answered ``count`` more heartbeats of the (only) node."""
    seen: set[float] = set()

    def enough() -> bool:
        nodes = answered(
            lambda: cluster.client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=5).nodes
        )
        if nodes:
            seen.add(nodes[0].last_heartbeat)
        return len(seen) > count

    wait_until(enough, 60 + count, f"{count} heartbeats")


def shown(cluster: Cluster, job_id: str, state: int, action: str) -> Callable[[], Any]:
    """The task, once the RM shows it in ``state`` with ``action`` its last preemption step."""

    def check() -> rm_pb.TaskInfo | None:
        found = task(cluster, job_id)
        if found is None or found.state != state or not found.preemptions:
            return None
        return found if found.preemptions[-1].action == action else None

    return check


def test_an_operators_suspension_and_resize_stand_until_the_operator_resumes(
    cluster: Cluster, gate: Gate, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = gate.kill_on_close(
        cluster,
        cluster.submit(
            yaml.safe_dump(
                {
                    "name": "held",
                    "priority": 0,
                    "max_retries": 0,
                    "phases": [phase("p", 1, gate.hold("true"), cpu=0.5, mem=64)],
                }
            )
        ),
    )
    started = cluster.wait_task_running(job_id, "p-0", timeout=60)

    # -- resuming what runs whole: nothing to resume, one line, non-zero
    capsys.readouterr()
    assert sluice(cluster, "task", "resume", job_id, "p-0") != 0
    err = capsys.readouterr().err
    assert "nothing to resume" in err and err.count("\n") == 1

    # -- suspended by the operator: it stays so while the RM answers many heartbeats
    asked_at = time.time()
    assert sluice(cluster, "task", "suspend", job_id, "p-0") == 0
    held = wait_until(shown(cluster, job_id, pb.TASK_SUSPENDED, "suspended"), 60, "suspended")
    assert held.held_by == "operator"
    # stamped when it happened, not with the task's start
    assert held.preemptions[-1].time >= asked_at > started.start_time
    heartbeats_pass(cluster, HEARTBEATS)
    still = task(cluster, job_id)
    assert still is not None and still.state == pb.TASK_SUSPENDED
    assert [p.action for p in still.preemptions] == ["suspended"]
    capsys.readouterr()
    assert sluice(cluster, "job", job_id) == 0
    assert f"held by an operator until `sluice task resume {job_id} p-0`" in capsys.readouterr().out

    # -- an RM restart remembers who holds it
    cluster.restart_rm()
    wait_until(lambda: answered(lambda: cluster.job(job_id)), 60, "the RM back")
    heartbeats_pass(cluster, HEARTBEATS)
    still = task(cluster, job_id)
    assert still is not None and still.state == pb.TASK_SUSPENDED
    assert still.held_by == "operator"
    assert [p.action for p in still.preemptions] == ["suspended"]

    # -- the operator lifts it
    assert sluice(cluster, "task", "resume", job_id, "p-0") == 0
    resumed = wait_until(shown(cluster, job_id, pb.TASK_RUNNING, "resumed"), 60, "resumed")
    assert resumed.held_by == ""

    # -- resized by the operator: the smaller limits stand too
    asked_at = time.time()
    assert (
        sluice(cluster, "task", "resize", job_id, "p-0", "--cpu", "0.25", "--memory-mb", "48") == 0
    )
    shrunk = wait_until(shown(cluster, job_id, pb.TASK_RUNNING, "shrunk"), 60, "shrunk")
    assert shrunk.held_by == "operator" and shrunk.preemptions[-1].time >= asked_at
    heartbeats_pass(cluster, HEARTBEATS)
    still = task(cluster, job_id)
    assert still is not None and still.preemptions[-1].action == "shrunk"
    assert (still.preemptions[-1].limits.cpu, still.preemptions[-1].limits.memory_mb) == (0.25, 48)
    # the steps are stamped apart: each when it happened
    times = [p.time for p in still.preemptions]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert sluice(cluster, "task", "resume", job_id, "p-0") == 0
    wait_until(shown(cluster, job_id, pb.TASK_RUNNING, "resumed"), 60, "whole again")

    gate.open(cluster, job_id, ["p-0"])
    assert cluster.wait_final(job_id).summary.state == pb.JOB_SUCCEEDED


def test_a_finished_job_keeps_what_it_sprinted(
    cluster: Cluster, gate: Gate, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = gate.kill_on_close(
        cluster,
        cluster.submit(
            yaml.safe_dump(
                {
                    "name": "sprinter",
                    "priority": SPRINTER,
                    "max_retries": 0,
                    "phases": [phase("p", 1, gate.hold("true"), cpu=0.5, mem=64)],
                }
            )
        ),
    )
    cluster.wait_task_running(job_id, "p-0", timeout=60)
    running = wait_until(
        lambda: (s := cluster.job(job_id).summary).dias.sprinted_s > 0 and s, 60, "a sprint"
    )
    gate.open(cluster, job_id, ["p-0"])
    final = cluster.wait_final(job_id).summary
    assert final.state == pb.JOB_SUCCEEDED
    assert final.dias.sprinted_s >= running.dias.sprinted_s > 0
    assert not final.dias.sprinting
    listed = cluster.client.jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=10).jobs
    (row,) = [j for j in listed if j.job_id == job_id]
    assert row.dias.sprinted_s == final.dias.sprinted_s
    capsys.readouterr()
    assert sluice(cluster, "job", job_id) == 0
    assert f"sprinted {final.dias.sprinted_s:.1f} s" in capsys.readouterr().out
