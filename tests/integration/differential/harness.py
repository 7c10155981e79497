"""Run a scenario live and in the simulator, and compare their decision traces (issue 29).

The live side is a real two-node local cluster (``tests/integration/cluster/harness.py``) whose
RM writes its decisions with ``--decision-trace``; the simulated side replays the same job specs,
submitted at the same times after the first, with each task's duration and the job masters'
start-up as measured live (as ``test_simulator_matches_live`` does), and records its decisions
with the same recorder (``Simulation(record_decisions=True)``).  :func:`assert_same_decisions`
compares the two with :mod:`simulator.trace_diff` and prints both traces when they differ.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plumbing.spec_text import load_job_document
from plumbing.wire import TASK_STATE_FROM_PB
from policies.scheduling.jobspec import JobSpec, parse_job_spec
from policies.scheduling.lifecycle import TaskState
from simulator.engine import SimSettings, Simulation
from simulator.trace_diff import Tolerance, compare, normalise, report
from simulator.workload import SimJob
from sluice import local_cluster
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import Cluster, start_cluster

NODES, CPUS, MEMORY_MB = 2, 2.0, 2048  # the harness's local cluster
HEARTBEAT_S = 0.5  # the local cluster's agents' (the simulator's default is a production 1 s)

TOLERANCE = Tolerance(seconds=6.0, relative=0.35)
"""How far a simulated decision's time may be from the live one's: 6 s, or 35 % of the later,
whichever is more.  Generous on purpose: CI runs these on two loaded cores, where a job master's
start-up, a heartbeat and a pass may each come seconds late (a load average of 4 and more must
not fail the test); the order of decisions, not their exact times, is what the test is about."""


class TaskGates:
    """Each task held until the test lets it go, one by one, so that the order in which tasks
    end (and so what the scheduler is asked next) is the scenario's, not the order in which
    the nodes happen to report (the simulator cannot know the live nodes' heartbeat phases).
    Process runtime only (the gates are files on the host)."""

    def __init__(self) -> None:
        self.prefix = f"/tmp/sluice-diff-gate-{uuid.uuid4().hex[:12]}"

    def hold(self, job: str, script: str) -> str:
        """A task script of the job named ``job`` that waits for its own gate first."""
        gate = f"{self.prefix}-{job}-$SLUICE_TASK_ID"
        return f"while [ ! -e {gate} ]; do sleep 0.05; done; {script}"

    def open(self, job: str, task_id: str) -> None:
        Path(f"{self.prefix}-{job}-{task_id}").touch()

    def close(self) -> None:
        for path in Path(self.prefix).parent.glob(f"{Path(self.prefix).name}-*"):
            path.unlink(missing_ok=True)


@dataclass
class LiveRun:
    cluster: Cluster
    trace: Path
    specs: dict[str, str]  # job id -> its spec's YAML, as submitted

    def submit(self, spec_yaml: str) -> str:
        job_id = self.cluster.submit(spec_yaml)
        self.specs[job_id] = spec_yaml
        return job_id

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.trace.read_text().splitlines() if line]


@contextmanager
def live_cluster(directory: Path, **spec: Any) -> Iterator[LiveRun]:
    """A two-node local cluster whose RM writes its decision trace; stopped afterwards."""
    trace = directory / "decisions.jsonl"
    extra = tuple(spec.pop("rm_args", ()))
    cluster = start_cluster(
        directory / "cluster",
        "process",
        nodes=NODES,
        rm_args=("--decision-trace", str(trace), *extra),
        heartbeat_interval=HEARTBEAT_S,
        **spec,
    )
    try:
        yield LiveRun(cluster, trace, {})
    finally:
        cluster.close()
        local_cluster.down(directory / "cluster", lambda _: None)


def parse(spec_yaml: str) -> JobSpec:
    return parse_job_spec(load_job_document(spec_yaml))


def measured_durations(detail: rm_pb.JobDetail, spec: JobSpec) -> dict[str, tuple[float, ...]]:
    """Each task's duration in the live run: its last attempt that ran, start to finish (a task
    never run, dropped say, takes what its phase's first measured task took)."""
    took: dict[str, float] = {}
    for task in detail.tasks:
        state = TASK_STATE_FROM_PB[task.state]
        if state is TaskState.SUCCEEDED or (task.finish_time and task.task_id not in took):
            took[task.task_id] = max(0.0, task.finish_time - task.start_time)
    durations = {}
    for phase in spec.phases:
        ids = [f"{phase.name}-{i}" for i in range(phase.tasks)]
        known = [took[i] for i in ids if i in took] or [1.0]
        durations[phase.name] = tuple(took.get(i, known[0]) for i in ids)
    return durations


def simulate(
    live: LiveRun,
    details: Mapping[str, rm_pb.JobDetail],
    simulation_class: Callable[..., Simulation] = Simulation,
    **settings: Any,
) -> Simulation:
    """The live run's jobs replayed in the simulator (``settings``: SimSettings fields beyond
    the cluster's shape and the measured job master start-up; ``simulation_class``: called as
    ``Simulation`` is, e.g. an :class:`simulator.oversubscription.OversubscribedSimulation`
    with its settings bound)."""
    first = min(d.summary.submit_time for d in details.values())
    jobs = []
    for job_id, detail in details.items():
        spec = parse(live.specs[job_id])
        jobs.append(
            SimJob(
                name=spec.name,
                job_class=spec.name,
                submit_time=detail.summary.submit_time - first,
                spec=spec,
                durations=measured_durations(detail, spec),
            )
        )
    # The job master's start-up as measured: submission to registration, the quickest job's
    # (one that waited for room measured that wait too, which the simulation reproduces by
    # itself), less a whole heartbeat (the most its node waits before launching it).  So the
    # simulated job masters are, if anything, quicker than the live ones: where a scenario
    # waits for a job's task to run before it submits the next job, the replay has it running
    # by then too.
    startups = [d.summary.start_time - d.summary.submit_time for d in details.values()]
    simulation = simulation_class(
        jobs,
        SimSettings(
            nodes=NODES,
            node_cpu=CPUS,
            node_memory_mb=MEMORY_MB,
            heartbeat_interval=HEARTBEAT_S,
            master_startup=max(0.0, min(startups) - HEARTBEAT_S),
            master_startup_jitter=0.01,
            **settings,
        ),
        seed=1,
        record_decisions=True,
    )
    simulation.run()
    return simulation


def assert_same_decisions(
    live: Iterable[dict[str, Any]],
    simulated: Iterable[dict[str, Any]],
    *,
    ignore_fields: Iterable[str] = (),
    ignore_decisions: Iterable[str] = (),
    causal: Iterable[tuple[str, str]] = (),
    tolerance: Tolerance = TOLERANCE,
) -> None:
    ignore_fields, ignore_decisions = list(ignore_fields), list(ignore_decisions)
    live_steps = normalise(live, ignore_fields, ignore_decisions)
    simulated_steps = normalise(simulated, ignore_fields, ignore_decisions)
    problems = compare(live_steps, simulated_steps, tolerance, causal)
    assert not problems, report(live_steps, simulated_steps, problems)
