"""``sluice demo``: the bundled workload on a throw-away local cluster.

A low-priority batch job that wants the whole cluster is submitted first; a high-priority job of
three phases with barriers follows a moment later.  The demo shows live progress, then each job's
completion time and the cluster's CPU utilisation (allocated over capacity, sampled), then the
data plane: what the aggregator made of the agents' metrics (Kafka) and the candidate list a
job master's replica received over MQTT.  It stops the cluster whatever happens.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from job_master.candidate_feed import AggregatorResync, CandidateFeed
from plumbing.broker_tls import BrokerTls
from plumbing.tls import ClientTls
from plumbing.wire import JOB_STATE_FROM_PB
from sluice import local_cluster, machines
from sluice.client import RMClient, cluster_client_tls
from sluice.render import progress_line
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb.common_pb2 import JOB_SUCCEEDED

# The demo's job files ship inside the package (sluice/examples/: setuptools' discovery finds it
# as a namespace package and pyproject.toml's "*.yaml" package data takes the files), so that the
# demo works from any installation, not only from a checkout.
BATCH = "batch.yaml"
ANALYTICS = "analytics.yaml"
JOB_FILES = (BATCH, ANALYTICS)
SAMPLE_PERIOD = 0.5
TIME_LIMIT = 120.0
# Job masters exit right after reporting their job's end; how long to wait for the nodes to
# report them gone before stopping the cluster anyway.
SETTLE_LIMIT = 10.0
AGGREGATOR_PERIOD = 2.0


def _say(message: str) -> None:
    print(message, flush=True)


def run_demo(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="sluice-demo-") as tmp:
        directory = Path(tmp)
        _say(f"starting a local cluster: {args.nodes} nodes, {args.runtime} runtime")
        cluster = local_cluster.up(
            local_cluster.LocalClusterSpec(
                directory=directory,
                nodes=args.nodes,
                runtime=args.runtime,
                aggregator_period=AGGREGATOR_PERIOD,
            ),
            _say,
        )
        plane = cluster["data_plane"]
        assert isinstance(plane, dict)
        tls = cluster_client_tls(cluster)
        # A job master's view of the candidate list, kept up to date over MQTT.
        resync = AggregatorResync(plane["aggregator"], tls=tls)
        # Over TLS (mqtts://) with your certificate, as a job master with its own.
        client_dir = str(cluster.get("client_tls") or "")
        broker_tls = BrokerTls.of_dir(Path(client_dir)) if client_dir else None
        feed = CandidateFeed(plane["mqtt"], resync=resync, tls=broker_tls)
        feed.start()
        try:
            status = _run_workload(str(cluster["rm"]), tls)
            _show_data_plane(plane["aggregator"], feed, tls)
            return status
        finally:
            feed.close()
            resync.close()
            _say("stopping the local cluster")
            local_cluster.down(directory, _say)


def _run_workload(rm_address: str, tls: ClientTls | None) -> int:
    client = RMClient.connect(rm_address, tls)
    try:
        batch = _submit(client, BATCH)
        _say(f"submitted {batch} (batch, priority 1, wants the whole cluster)")
        time.sleep(1.0)
        analytics = _submit(client, ANALYTICS)
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
        _wait_until_idle(client)
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


def _wait_until_idle(client: RMClient) -> None:
    """Wait until no node holds a container: the job masters, which end just after their job,
    have exited and their nodes have said so.  Stopping the cluster before that would stop
    them (``local down``: "stopped 1 tasks")."""
    deadline = time.monotonic() + SETTLE_LIMIT
    while time.monotonic() < deadline:
        nodes = client.jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=10).nodes
        if all(n.allocated.cpu == 0 and n.allocated.memory_mb == 0 for n in nodes):
            return
        time.sleep(0.1)


def example(name: str) -> Traversable:
    """One of the job files bundled with Sluice (``sluice/examples/``), wherever it is installed."""
    return resources.files("sluice") / "examples" / name


def _submit(client: RMClient, name: str) -> str:
    text = example(name).read_text(encoding="utf-8")
    return str(client.submit(text).job_id)


def _show_data_plane(aggregator: str, feed: CandidateFeed, tls: ClientTls | None) -> None:
    """What the aggregator made of the metrics, and the replica a job master holds."""
    _say("")
    _say(f"data plane (agents -> Kafka -> aggregator, ranking every {AGGREGATOR_PERIOD:g} s)")
    listing = machines.list_machines(aggregator, tls)
    load_metrics = list(listing.load_metrics)
    for status in listing.machines:
        sample = status.latest
        counters = f"CPI {sample.cpi:.2f}" if sample.HasField("cpi") else "CPI/MPKI absent (no PMU)"
        _say(
            f"  {status.node_id}: {sample.sequence} samples published, "
            f"{status.window_samples} in the window; load (CPU MEM LA1) "
            f"{machines.load_summary(status, load_metrics)}; PSI cpu "
            f"{sample.pressure.cpu.some_avg10:.1f}%; {counters}"
        )
    reply = machines.get_candidates(aggregator, tls)
    ver_m, ver_c = feed.versions
    listed = ", ".join(reply.candidates) or (
        f"(none: {machines.why_none(reply, len(listing.machines))})"
    )
    _say(f"  aggregator: candidates v{reply.candidate_version} = {listed} ({reply.ranking})")
    if feed.wait_for_version(reply.candidate_version, timeout=2 * AGGREGATOR_PERIOD + 1):
        ver_m, ver_c = feed.versions
    _say(
        f"  job master replica over MQTT: v{ver_c} (machine list v{ver_m}) = "
        f"{', '.join(feed.candidates()) or '(none)'}"
    )
