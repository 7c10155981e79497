"""``sluice demo``: the bundled workload on a throw-away local cluster.

A low-priority batch job that wants the whole cluster is submitted first; a high-priority job of
three phases with barriers follows a moment later.  The demo shows live progress, then each job's
completion time and the cluster's CPU utilisation (allocated over capacity, sampled), and stops
the cluster whatever happens.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sluice import local_cluster
from sluice.client import RMClient
from sluice.render import progress_line
from sluice.wire import JOB_STATE_FROM_PB
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb.common_pb2 import JOB_SUCCEEDED

# The demo runs from a checkout (the README installs it editable), next to examples/.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SAMPLE_PERIOD = 0.5
TIME_LIMIT = 120.0


def _say(message: str) -> None:
    print(message, flush=True)


def run_demo(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="sluice-demo-") as tmp:
        directory = Path(tmp)
        _say(f"starting a local cluster: {args.nodes} nodes, {args.runtime} runtime")
        cluster = local_cluster.up(
            local_cluster.LocalClusterSpec(
                directory=directory, nodes=args.nodes, runtime=args.runtime
            ),
            _say,
        )
        try:
            return _run_workload(str(cluster["rm"]))
        finally:
            _say("stopping the local cluster")
            local_cluster.down(directory, _say)


def _run_workload(rm_address: str) -> int:
    client = RMClient.connect(rm_address)
    try:
        batch = _submit(client, "batch.yaml")
        _say(f"submitted {batch} (batch, priority 1, wants the whole cluster)")
        time.sleep(1.0)
        analytics = _submit(client, "analytics.yaml")
        _say(f"submitted {analytics} (analytics, priority 10, 3 phases with barriers)")
        samples: list[float] = []
        shown: dict[str, str] = {}
        deadline = time.monotonic() + TIME_LIMIT
        jobs: list[rm_pb.JobSummary] = []
        while time.monotonic() < deadline:
            jobs = list(client.jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=10).jobs)
            nodes = client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=10).nodes
            capacity = sum(n.capacity.cpu for n in nodes)
            if capacity:
                samples.append(sum(n.allocated.cpu for n in nodes) / capacity)
            for job in jobs:
                line = progress_line(job)
                if shown.get(job.job_id) != line:
                    shown[job.job_id] = line
                    _say(f"  {line}")
            if all(JOB_STATE_FROM_PB[j.state].is_final for j in jobs):
                break
            time.sleep(SAMPLE_PERIOD)
        else:
            _say(f"the workload did not finish within {TIME_LIMIT:.0f} s")
            return 1
        _say("")
        _say("results")
        for job in sorted(jobs, key=lambda j: -j.priority):
            state = JOB_STATE_FROM_PB[job.state].value
            _say(
                f"  {job.name:<10} priority {job.priority:<3} {state:<9} "
                f"completion time {job.finish_time - job.submit_time:5.1f} s"
                + (f" ({job.message})" if job.message else "")
            )
        if samples:
            mean = sum(samples) / len(samples)
            _say(f"  cluster CPU utilisation (allocated / capacity): {mean:.0%} mean")
        ok = all(j.state == JOB_SUCCEEDED for j in jobs)
        return 0 if ok else 1
    finally:
        client.close()


def _submit(client: RMClient, name: str) -> str:
    text = (EXAMPLES / name).read_text()
    response = client.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=text), timeout=30)
    return str(response.job.job_id)
