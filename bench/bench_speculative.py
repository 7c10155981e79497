"""What speculative oversubscription costs (issue 13): one admission decision, the agent's
enqueue-to-running on each runtime, and, on a live cluster, the job master's decision to the
task running for a speculative task against a regular one through the RM's grant.

Run: .venv/bin/python bench/bench_speculative.py [--decisions 20000] [--agent-runs 40]
     [--docker-runs 10] [--live-tasks 8] [--skip-docker] [--skip-live]

* **admission**: :func:`policies.oversubscription.node_queue.launches` over a queue of
  ``max_queue_length`` (20) tasks, the quota letting half of them start: what the agent's pass
  decides per node.
* **agent**: a real :class:`node_agent.agent.NodeAgent` (process runtime on this machine's
  cgroups; then Docker): a task put in its queue, admitted and started by the pass the
  enqueue triggers, until the runtime runs it.  The agent's share of decision-to-running.
* **live**: a local cluster (two nodes, process runtime, then Docker); a client-mode job
  master here.
  Speculative: from the round that decided the placement to the agent's answer that the task
  runs (EnqueueSpeculative returns once its pass started it).  Regular: from the job master's
  registration (its tasks are ready, its first round asks for them) to StartTask's answer in
  the granted container: a round, the RM's pass, the answer, the launch.  A blocker job holds
  the cluster for the speculative case (its asks starve); the regular case runs on an idle
  cluster.

Prints medians and p99 (milliseconds) and the machine's core count.  Figures vary with the
machine's load; compare the ratios of one run.
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

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from live_cluster import nodes, phase, two_nodes

from policies.oversubscription.config import OversubscriptionConfig
from policies.oversubscription.node_queue import NodeLoad, QueuedTask, launches
from policies.scheduling.resources import Resources
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb


def percentiles(samples: list[float]) -> str:
    if not samples:
        return "no samples"
    ordered = np.sort(np.asarray(samples))
    return (
        f"p50 {1000 * statistics.median(ordered):8.3f} ms   "
        f"p99 {1000 * float(np.percentile(ordered, 99)):8.3f} ms   (n={len(ordered)})"
    )


def bench_admission(decisions: int) -> None:
    config = OversubscriptionConfig(admission_thresholds=(0.9, 0.9, 0.6))
    capacity = Resources(16.0, 65536)
    queue = [QueuedTask(f"t{i}", Resources(0.6, 1024), float(i)) for i in range(20)]
    load = NodeLoad((0.4, 0.3, 0.1), Resources(1.0, 2048), capacity)
    samples = []
    for _ in range(decisions):
        started = time.perf_counter()
        decision = launches(queue, load, config)
        samples.append(time.perf_counter() - started)
    assert decision.keys and decision.blocked
    print(f"admission decision (queue of 20):        {percentiles(samples)}")


def bench_agent(runtime_name: str, runs: int) -> None:
    from node_agent.agent import AgentConfig, NodeAgent
    from node_agent.runtime import make_runtime
    from node_agent.speculative import QueuedLaunch

    directory = Path(tempfile.mkdtemp(prefix="bench-speculative-"))
    node_id = f"bench-{uuid.uuid4().hex[:8]}"
    runtime: Any = make_runtime(runtime_name, node_id, directory / "tasks")
    config = OversubscriptionConfig(
        admission_thresholds=(1.0, 1.0, 1.0), oversubscription_quota=(1.0, 1.0, 1.0)
    )
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    agent = NodeAgent(
        AgentConfig(
            node_id=node_id,
            cpu_ids=cpus,
            capacity=Resources(float(len(cpus)), 4096),
            oversubscription=config,
            state_dir=directory,
        ),
        runtime,
    )
    samples = []
    try:
        for index in range(runs):
            launch = QueuedLaunch(
                "job-bench",
                f"map-{index}",
                1,
                ("sleep", "30"),
                Resources(0.1, 32),
                None,
                {},
                time.time(),
            )
            started = time.perf_counter()
            agent.speculative.enqueue(launch, known=False)
            agent.monitor_once(time.time())
            running = any(
                o.task_key == launch.key and o.state.value == "running"
                for o in agent.observations()
            )
            samples.append(time.perf_counter() - started)
            assert running, f"{launch.key} did not start"
            agent.stop(launch.key, 0.2)
    finally:
        runtime.purge(0.2)
    print(f"agent enqueue -> running ({runtime_name:7}):   {percentiles(samples)}")


def bench_live(tasks: int, runtime: str) -> None:
    from job_master.master import JobMaster
    from job_master.plan import JobPlan, Launch, SpeculativeLaunch

    speculative: list[float] = []
    regular: list[float] = []

    class Timed(JobMaster):
        registered = 0.0
        regular_path = True  # this job's launches are the regular grant path's

        def _join_data_plane(self, plane: Any) -> None:
            self.registered = time.monotonic()
            super()._join_data_plane(plane)

        def _launch(self, plan: JobPlan, launch: Launch) -> None:
            super()._launch(plan, launch)
            if self.regular_path:
                regular.append(time.monotonic() - self.registered)

        def _enqueue(self, plan: JobPlan, launch: SpeculativeLaunch) -> None:
            decided = self._decided_at.get((launch.task_id, launch.attempt))
            super()._enqueue(plan, launch)
            if decided is not None:
                speculative.append(time.monotonic() - decided)

    with two_nodes(
        f"bench-speculative-live-{runtime}-",
        runtime=runtime,
        insecure=True,  # the client-mode job master here needs no broker certificate
        agent_args=(
            "--admission-thresholds",
            "1,1,1",
            "--speculative-quota",
            "1,1,1",
            "--speculative-queue-length",
            str(tasks),
        ),
    ) as (_, client):

        def run(document: dict[str, Any]) -> None:
            job = client.submit(yaml.safe_dump(document), client_mode=True)
            master = Timed(client.address, job.job_id, tls=client.tls)
            master.regular_path = "speculative" not in document
            master.run()

        # Regular: one task at a time on an idle cluster (nothing waits for capacity).
        for _ in range(tasks):
            run({"name": "regular", "phases": [phase("work", 1, "true", 0.5)]})
        # Speculative: a blocker holds the cluster, so every task (half a cpu: more than any
        # node has left) goes speculative.
        blocker = client.submit(
            yaml.safe_dump({"name": "blocker", "phases": [phase("work", 7, "sleep 600", 0.5)]})
        )
        while any(n.capacity.cpu - n.allocated.cpu >= 0.5 for n in nodes(client)):
            time.sleep(0.2)  # a benchmark's wait: the blocker's tasks are being placed

        def blocker_running() -> int:
            job = client.jobs.GetJob(rm_pb.GetJobRequest(job_id=blocker.job_id), timeout=10)
            return sum(1 for t in job.tasks if t.state == pb.TASK_RUNNING)

        while blocker_running() < 7:  # their starts must not share the engine with the measure
            time.sleep(0.2)
        run(
            {
                "name": "speculative",
                "priority": 10,
                "speculative": {"after_s": 0},
                "phases": [phase("work", tasks, "sleep 1", 0.5)],
            }
        )
        client.jobs.KillJob(rm_pb.GetJobRequest(job_id=blocker.job_id), timeout=10)
    print(f"live ({runtime}): speculative decision -> running:  {percentiles(speculative)}")
    print(f"live ({runtime}): regular ready -> running (grant): {percentiles(regular)}")
    if speculative and regular:
        ratio = statistics.median(regular) / statistics.median(speculative)
        print(
            f"live ({runtime}): the regular path takes {ratio:.1f}x the speculative one (medians)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--agent-runs", type=int, default=40)
    parser.add_argument("--docker-runs", type=int, default=10)
    parser.add_argument(
        "--live-tasks", type=int, default=8, help="per case (8: every speculative one runs at once)"
    )
    parser.add_argument("--skip-docker", action="store_true")
    parser.add_argument("--skip-live", action="store_true")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores")
    bench_admission(args.decisions)
    bench_agent("process", args.agent_runs)
    if not args.skip_docker:
        bench_agent("docker", args.docker_runs)
    if not args.skip_live:
        bench_live(args.live_tasks, "process")
        if not args.skip_docker:
            bench_live(args.live_tasks, "docker")


if __name__ == "__main__":
    main()
