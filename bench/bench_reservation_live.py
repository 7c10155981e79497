"""Slot reservation on a real two-node cluster (issue 12): a high-priority pipeline's completion
time alone, and beside batch work without and with reservation.

Run: .venv/bin/python bench/bench_reservation_live.py [--runs 3] [--batch-task-s 20] [--dag]

It starts a local cluster (``sluice.local_cluster``, process runtime): two nodes of 2 cpu and
2 GiB, room for the pipeline's four 0.9-cpu tasks and no more.  The pipeline (priority 10) has
three phases of four tasks with barriers; in each phase task i runs 0.3 (i + 1) s, so its
containers come free one after another while the barrier holds.  Its first phase waits for a
file, so that the batch job (priority 0, twelve tasks of ``--batch-task-s`` seconds) is asking
when the first barrier comes.  The time measured is from that file's creation to the
pipeline's end as the RM recorded it.  Each run does four cases in turn (alone, without and
with reservation, then beside the batch job without and with); it prints the median of each
over ``--runs``, the slowdowns against alone, and the machine's core count.  (Alone, a
reservation saves the pipeline its asks at each barrier: its containers are already there.)
The times include the live cluster's own latencies (heartbeats, rounds, process launches), so
they vary with the machine's load: compare the ratios of one run.

``--dag`` (issue 28): the pipeline is a diamond instead, a fork and a join: four tasks feeding
two phases of two that join into four, timed the same way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sluice import local_cluster
from sluice.client import RMClient, cluster_client_tls
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb

FINAL = {pb.JOB_SUCCEEDED, pb.JOB_FAILED, pb.JOB_KILLED}
WIDTH = 4
CASES = ("alone", "alone, with reservation", "without reservation", "with reservation")


def task(name: str, tasks: int, script: str, *after: str) -> dict[str, Any]:
    phase: dict[str, Any] = {
        "name": name,
        "tasks": tasks,
        "command": ["sh", "-c", script],
        "resources": {"cpu": 0.9, "memory_mb": 64},
    }
    if after:
        phase["after"] = list(after)
    return phase


def pipeline(gate: Path, reserve: bool, dag: bool = False) -> str:
    tenths = "$(( (${SLUICE_TASK_ID##*-} + 1) * 3 ))"
    work = f"t={tenths}; sleep $(( t / 10 )).$(( t % 10 ))"
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done; {work}"
    document: dict[str, Any] = {
        "name": "pipeline",
        "priority": 10,
        "max_retries": 0,
        "phases": [
            task("p1", WIDTH, wait),
            task("p2", WIDTH, work, "p1"),
            task("p3", WIDTH, work, "p2"),
        ]
        if not dag
        else [
            task("split", WIDTH, wait),
            task("left", WIDTH // 2, work, "split"),
            task("right", WIDTH // 2, work, "split"),
            task("join", WIDTH, work, "left", "right"),
        ],
    }
    if reserve:
        document["reservation"] = {"isolation": 0.999}
    return yaml.safe_dump(document)


def batch(seconds: float) -> str:
    return yaml.safe_dump(
        {
            "name": "batch",
            "priority": 0,
            "max_retries": 0,
            "phases": [task("work", 3 * WIDTH, f"sleep {seconds:g}")],
        }
    )


def wait(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_reservation_live: {what} not within {timeout:g} s")
        time.sleep(0.05)


def one_case(client: RMClient, case: str, batch_s: float, dag: bool = False) -> float:
    jobs = client.jobs

    def job(job_id: str) -> rm_pb.JobDetail:
        detail: rm_pb.JobDetail = jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10)
        return detail

    gate = Path(tempfile.gettempdir()) / f"sluice-bench-gate-{uuid.uuid4().hex[:12]}"
    try:
        spec = pipeline(gate, reserve=case.endswith("with reservation"), dag=dag)
        hp = jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=spec), timeout=30).job.job_id
        wait(
            lambda: sum(t.state == pb.TASK_RUNNING for t in job(hp).tasks) == WIDTH,
            120,
            "the pipeline's first phase running",
        )
        lp = None
        if not case.startswith("alone"):
            request = rm_pb.SubmitJobRequest(spec_yaml=batch(batch_s))
            lp = jobs.SubmitJob(request, timeout=30).job.job_id
            wait(lambda: job(lp).summary.state == pb.JOB_RUNNING, 120, "the batch job asking")
        opened = time.time()
        gate.touch()
        detail = wait(
            lambda: (d := job(hp)).summary.state in FINAL and d, 10 * batch_s + 120, "the end"
        )
        if lp is not None:
            jobs.KillJob(rm_pb.GetJobRequest(job_id=lp), timeout=10)
            wait(lambda: job(lp).summary.state in FINAL, 120, "the batch job killed")
        if detail.summary.state != pb.JOB_SUCCEEDED:
            raise SystemExit(f"bench_reservation_live: the pipeline ended {detail.summary}")
        return float(detail.summary.finish_time - opened)
    finally:
        gate.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-task-s", type=float, default=20.0)
    parser.add_argument("--dag", action="store_true", help="a diamond (fork and join) instead")
    args = parser.parse_args()
    times: dict[str, list[float]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory(prefix="sluice-bench-reservation-") as directory:
        info = local_cluster.up(
            local_cluster.LocalClusterSpec(
                directory=Path(directory),
                nodes=2,
                cpus_per_node=2.0,
                memory_mb_per_node=2048,
                max_master_share=0.2,  # two job masters of 256 MiB in 4 GiB
            ),
            lambda _: None,
        )
        client = RMClient.connect(str(info["rm"]), cluster_client_tls(info))
        try:
            for run in range(args.runs):
                for case in CASES:
                    times[case].append(one_case(client, case, args.batch_task_s, args.dag))
                    print(f"run {run + 1}: {case}: {times[case][-1]:.2f} s", file=sys.stderr)
        finally:
            client.close()
            local_cluster.down(Path(directory), lambda _: None)
    alone = statistics.median(times["alone"])
    alone_kept = statistics.median(times["alone, with reservation"])
    print(
        f"bench_reservation_live: {os.cpu_count()} cores, {args.runs} runs, batch tasks of "
        f"{args.batch_task_s:g} s; the {'diamond' if args.dag else 'pipeline'}'s completion "
        "time (median)"
    )
    print("| case | completion (s) | against alone | against alone with reservation |")
    print("|---|---|---|---|")
    for case in CASES:
        median = statistics.median(times[case])
        print(
            f"| {case} | {median:.2f} | {median / alone - 1:+.0%} "
            f"| {median / alone_kept - 1:+.0%} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
