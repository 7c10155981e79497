"""Container preemption on a real two-node cluster (BIG-C, docs/preemption.md), checked from the
outside: the long tasks' cgroup files, the swap they use, the progress they write, and the RM's
records.

A long, low-share job fills the cluster with tasks that burn CPU, hold memory and write their
progress (per attempt) to a file.  A short job then arrives in the high-share queue.  Under each
mode the test checks that the short job starts while the long job still runs (so it did not
wait for the long tasks to end: that is the preemption, whatever the machine's speed), how the
long task's limits changed, and that afterwards the long tasks finish: on attempt 1 with their
progress carried on under immediate and graceful, on a second attempt under kill.

The machine has no swap by default: the module creates a 1 GiB swap file, turns it on, and
removes it afterwards.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from node_agent.agent import task_key
from node_agent.runtime.task_state import encode_name
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, start_cluster, unavailable, wait_until
from tests.integration.swapfile import swap_file

pytestmark = pytest.mark.integration

# Two nodes of 2 cpu, 2 GiB.  The long job's job master (0.1 cpu, 256 MiB) and four tasks of
# 0.95 cpu, 880 MiB fill them but for 0.1 cpu; the short job's master takes that, and its task
# (0.5 cpu, 512 MiB) fits nowhere: CPU and memory must both be taken from a long task.
LONG_TASKS = 4
LONG_CPU = 0.95
LONG_MEMORY_MB = 880
HELD_MB = 700  # what a long task touches: more than a graceful step leaves it, so it swaps
WORK = 400  # units of work per long task (a unit is some tens of ms of CPU)

PROGRAM = textwrap.dedent(
    """
    import os, sys, time
    out, work, held = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    path = os.path.join(out, f"{os.environ['SLUICE_TASK_ID']}.{os.environ['SLUICE_ATTEMPT']}")
    memory = bytearray(held << 20)
    done = 0
    while done < work:
        x = 0
        for _ in range(400_000):
            x += 1
        for i in range(0, len(memory), 1 << 16):  # keep the pages in use
            memory[i] = (memory[i] + 1) & 0xFF
        done += 1
        with open(path + ".tmp", "w") as f:
            f.write(str(done))
        os.replace(path + ".tmp", path)
    """
)


@pytest.fixture(scope="module")
def swap() -> Iterator[Path]:
    with swap_file("1G", "preemption", unavailable) as path:
        yield path


def queues_file(directory: Path, mode: str) -> Path:
    path = directory / f"queues-{mode}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "default": "long",
                "queues": {
                    "short": {"share": 0.95},
                    "long": {
                        "share": 0.05,
                        "mode": mode,
                        "graceful_step": {"cpu": 0.5, "memory_mb": 256},
                        "resume_after_offers": 1,
                    },
                },
            }
        )
    )
    return path


def long_job(program: Path, out: Path) -> str:
    return yaml.safe_dump(
        {
            "name": "long",
            "queue": "long",
            "max_retries": 0,  # a preemption kill uses up no retry: attempt 2 must still run
            "phases": [
                {
                    "name": "work",
                    "tasks": LONG_TASKS,
                    "command": ["python3", str(program), str(out), str(WORK), str(HELD_MB)],
                    "resources": {"cpu": LONG_CPU, "memory_mb": LONG_MEMORY_MB},
                }
            ],
        }
    )


def short_job(gate: Path) -> str:
    return yaml.safe_dump(
        {
            "name": "short",
            "queue": "short",
            "phases": [
                {
                    "name": "s",
                    "tasks": 1,
                    "command": ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"],
                    "resources": {"cpu": 0.5, "memory_mb": 512},
                }
            ],
        }
    )


def cgroup_file(
    cluster: Cluster, task: rm_pb.TaskInfo, job_id: str, hierarchy: str, name: str
) -> Path:
    key = encode_name(task_key(job_id, task.task_id, task.attempt))
    root = Path("/sys/fs/cgroup") / hierarchy / "sluice"
    (found,) = root.glob(f"{cluster.info['cluster_id']}_{task.node_id}/{key}/{name}")
    return found


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def swap_used_mb() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(fields["SwapTotal"].split()[0]) - int(fields["SwapFree"].split()[0])) >> 10


def last_limits(task: rm_pb.TaskInfo, *actions: str) -> pb.Resources | None:
    steps = [p for p in task.preemptions if p.action in actions and p.HasField("limits")]
    return steps[-1].limits if steps else None


def preempted_task(cluster: Cluster, job_id: str) -> rm_pb.TaskInfo | None:
    for task in cluster.job(job_id).tasks:
        if task.preemptions:
            return task
    return None


def wait_frozen_victim(cluster: Cluster, job_id: str) -> rm_pb.TaskInfo:
    """The job's first preempted task, once its cgroup is frozen."""
    victim = wait_until(lambda: preempted_task(cluster, job_id), 60, "a long task preempted")
    freezer = cgroup_file(cluster, victim, job_id, "freezer", "freezer.state")
    wait_until(lambda: read(freezer) == "FROZEN", 30, "the long task frozen")
    return victim


@pytest.fixture
def cluster(tmp_path: Path, swap: Path, request: Any) -> Iterator[Cluster]:
    mode = request.param
    from sluice import local_cluster

    running = start_cluster(
        tmp_path / "cluster",
        "process",
        2,
        queues=queues_file(tmp_path, mode),
        max_master_share=0.3,  # two job masters' 512 MiB are more than 10% of 4 GiB
    )
    try:
        yield running
    finally:
        running.close()
        local_cluster.down(tmp_path / "cluster", lambda _: None)


def run_long_then_short(cluster: Cluster, tmp_path: Path) -> tuple[str, str, Path, Path]:
    program = tmp_path / "long_task.py"
    program.write_text(PROGRAM)
    out = tmp_path / "progress"
    out.mkdir()
    gate = tmp_path / "gate"
    long_id = cluster.submit(long_job(program, out))
    for index in range(LONG_TASKS):
        cluster.wait_task_running(long_id, f"work-{index}", timeout=60)
    wait_until(lambda: len(list(out.iterdir())) == LONG_TASKS, 60, "every long task writing")
    short_id = cluster.submit(short_job(gate))
    return long_id, short_id, out, gate


def short_started_while_long_runs(cluster: Cluster, long_id: str, short_id: str) -> None:
    cluster.wait_task_running(short_id, "s-0", timeout=90)
    assert cluster.job(long_id).summary.state == pb.JOB_RUNNING


@pytest.mark.parametrize("cluster", ["immediate"], indirect=True)
def test_immediate_suspends_to_the_footprint_and_resumes_where_it_stopped(
    cluster: Cluster, tmp_path: Path
) -> None:
    long_id, short_id, out, gate = run_long_then_short(cluster, tmp_path)
    victim = wait_frozen_victim(cluster, long_id)
    memory = cgroup_file(cluster, victim, long_id, "memory", "memory.limit_in_bytes")
    wait_until(lambda: read(memory) == str(64 << 20), 60, "memory cut to the 64 MiB footprint")
    assert swap_used_mb() > 0
    short_started_while_long_runs(cluster, long_id, short_id)
    stopped_at = int(read(out / f"{victim.task_id}.1"))
    gate.touch()
    assert cluster.wait_final(short_id).summary.state == pb.JOB_SUCCEEDED
    detail = cluster.wait_final(long_id, timeout=240)
    assert detail.summary.state == pb.JOB_SUCCEEDED
    assert {t.attempt for t in detail.tasks} == {1}  # nobody ran twice
    assert int(read(out / f"{victim.task_id}.1")) == WORK > stopped_at
    actions = [p.action for t in detail.tasks for p in t.preemptions]
    assert actions[:2] == ["suspended", "swapped out"] and "resumed" in actions


@pytest.mark.parametrize("cluster", ["graceful"], indirect=True)
def test_graceful_steps_down_freezes_on_swapping_and_resumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    long_id, short_id, _out, gate = run_long_then_short(cluster, tmp_path)
    victim = wait_until(lambda: preempted_task(cluster, long_id), 60, "a long task preempted")

    def shrunk() -> pb.Resources | None:
        task = next(t for t in cluster.job(long_id).tasks if t.task_id == victim.task_id)
        return last_limits(task, "shrunk", "frozen")

    limits = wait_until(shrunk, 60, "a graceful step shown")
    assert limits.cpu < LONG_CPU or limits.memory_mb < LONG_MEMORY_MB
    # what the cgroup enforces is what the RM decided, step by step
    quota = cgroup_file(cluster, victim, long_id, "cpu", "cpu.cfs_quota_us")
    period = int(read(cgroup_file(cluster, victim, long_id, "cpu", "cpu.cfs_period_us")))
    memory = cgroup_file(cluster, victim, long_id, "memory", "memory.limit_in_bytes")
    assert int(read(memory)) <= limits.memory_mb << 20 or read(memory) == ""
    assert int(read(quota)) <= round(max(limits.cpu, 0.01) * period) + 1
    # It touches more than that: it swaps, so its node freezes it (Alg. 2 line 8).
    freezer = cgroup_file(cluster, victim, long_id, "freezer", "freezer.state")
    wait_until(lambda: read(freezer) == "FROZEN", 60, "frozen once swapping")
    short_started_while_long_runs(cluster, long_id, short_id)
    gate.touch()
    assert cluster.wait_final(short_id).summary.state == pb.JOB_SUCCEEDED
    detail = cluster.wait_final(long_id, timeout=240)
    assert detail.summary.state == pb.JOB_SUCCEEDED
    assert {t.attempt for t in detail.tasks} == {1}
    steps = [p for t in detail.tasks for p in t.preemptions]
    # A step and the freeze it set off may fall in one monitor round: the node then shows the
    # task frozen at the lower limits, without a report in between.
    assert {"frozen", "resumed"} <= {p.action for p in steps}
    assert all(
        p.limits.cpu < LONG_CPU or p.limits.memory_mb < LONG_MEMORY_MB
        for p in steps
        if p.action in ("shrunk", "frozen")
    )


@pytest.mark.parametrize("cluster", ["kill"], indirect=True)
def test_kill_stops_a_long_task_which_runs_again_without_using_a_retry(
    cluster: Cluster, tmp_path: Path
) -> None:
    long_id, short_id, out, gate = run_long_then_short(cluster, tmp_path)
    short_started_while_long_runs(cluster, long_id, short_id)
    gate.touch()
    assert cluster.wait_final(short_id).summary.state == pb.JOB_SUCCEEDED
    detail = cluster.wait_final(long_id, timeout=240)
    assert detail.summary.state == pb.JOB_SUCCEEDED  # max_retries 0, yet it ran twice
    killed = [t for t in detail.tasks if t.state == pb.TASK_KILLED]
    assert killed and all(t.preemptions[-1].action == "killed" for t in killed)
    assert all(t.preemptions[-1].work_lost_s > 0 for t in killed)
    again = {t.task_id for t in detail.tasks if t.attempt == 2}
    assert again == {t.task_id for t in killed}
    for task_id in again:
        assert int(read(out / f"{task_id}.2")) == WORK  # started over


@pytest.mark.parametrize("cluster", ["immediate"], indirect=True)
def test_an_rm_restart_while_tasks_are_suspended_loses_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    long_id, short_id, out, gate = run_long_then_short(cluster, tmp_path)
    victim = wait_frozen_victim(cluster, long_id)
    cluster.restart_rm()
    gate.touch()
    assert cluster.wait_final(short_id, timeout=90).summary.state == pb.JOB_SUCCEEDED
    detail = cluster.wait_final(long_id, timeout=240)
    assert detail.summary.state == pb.JOB_SUCCEEDED
    assert {t.attempt for t in detail.tasks} == {1}
    assert int(read(out / f"{victim.task_id}.1")) == WORK
