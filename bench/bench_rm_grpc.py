"""Benchmark of a real `sluice rm` process through gRPC (issue 9): how many agents heartbeating at
1 Hz it sustains, and the grants job masters receive meanwhile.

Run: .venv/bin/python bench/bench_rm_grpc.py [--agents 500 1000 2000 3000] [--masters 50]
     [--seconds 20] [--unary]

It starts `sluice rm` on a free port, then, in this one process, simulated agents (async gRPC
clients: register, then a heartbeat every second at their own phase, each reporting nothing, over
a HeartbeatStream kept open per agent, or unary Heartbeat calls with ``--unary``) and job masters
(client-mode jobs: register, then every 200 ms give back the containers whose task ended, each
having run about ``--hold`` seconds, uniformly from half to one and a half times it, and ask for
as many again, so that the cluster stays full and containers keep turning over: slots / hold
grants per second).  For each agent count it
measures, over ``--seconds`` after a warm-up: the heartbeats per second and their latency p50 and
p99 (from writing the request, or the call, to reading the answer), and the containers granted
per second.  The load generator shares the machine with the RM: the RM gets one core (taskset),
the generator the other (``--share-cores``: both float over every core).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plumbing import event_loop
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

NODE = pb.Resources(cpu=16.0, memory_mb=65536)
AGENTS_PER_CONNECTION = 20
TASK = pb.Resources(cpu=1.0, memory_mb=1024)
SPEC = """
name: churn
priority: 0
phases:
  - name: p
    tasks: 100000
    command: ["true"]
    resources: {cpu: 1, memory_mb: 1024}
"""


@dataclass
class Stats:
    heartbeat_latency: list[float] = field(default_factory=list)
    heartbeats: int = 0
    failed: int = 0
    granted: int = 0
    measuring: bool = False


async def agent(
    stub: rm_grpc.NodeServiceStub, node_id: str, phase: float, stats: Stats, unary: bool
) -> None:
    """Register, then heartbeat every second at ``phase``: over one HeartbeatStream kept open
    (another after a failure), as agents do, or with unary calls (``unary``, as older agents
    do).  The latency is from writing the request (the call) to reading its answer."""
    registration = rm_pb.RegisterNodeRequest(
        node_id=node_id, address=f"{node_id}.invalid:7000", capacity=NODE, runtime="process"
    )
    while True:  # as agents do: again after a failure
        try:
            await stub.RegisterNode(registration, timeout=10)
            break
        except grpc.aio.AioRpcError:
            # Thousands registering at once overflow the RM's queue of calls not yet taken up
            # (gRPC's grpc.server.max_pending_requests, 1,000): gRPC cancels some of them.
            await asyncio.sleep(1.0)
    await asyncio.sleep(phase)
    stream: grpc.aio.StreamStreamCall | None = None
    next_beat = time.monotonic()
    while True:
        request = rm_pb.HeartbeatRequest(node_id=node_id)
        start = time.monotonic()
        try:
            if unary:
                answer = await stub.Heartbeat(request, timeout=10)
            else:
                if stream is None:
                    stream = stub.HeartbeatStream()
                await stream.write(request)
                answer = await stream.read()
                if answer is grpc.aio.EOF:
                    raise EOFError("the RM ended the heartbeat stream")
            latency = time.monotonic() - start
            if answer.reregister:
                await stub.RegisterNode(registration)
            if stats.measuring:
                stats.heartbeat_latency.append(latency)
                stats.heartbeats += 1
        except (grpc.aio.AioRpcError, EOFError):
            if stream is not None:
                stream.cancel()
                stream = None
            if stats.measuring:
                stats.failed += 1
        next_beat += 1.0
        await asyncio.sleep(max(0.0, next_beat - time.monotonic()))


async def master(
    jobs: rm_grpc.JobServiceStub,
    stub: rm_grpc.MasterServiceStub,
    want: int,
    hold: float,
    stats: Stats,
) -> None:
    """A job master whose tasks each run about ``hold`` seconds (see below): every round it
    gives back the containers whose task ended and asks for as many as it still wants."""
    job = (
        await jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC, client_mode=True))
    ).job.job_id
    await stub.RegisterMaster(rm_pb.RegisterMasterRequest(job_id=job, attempt=1))
    held: dict[str, float] = {}  # allocation -> when its task ends
    rng = random.Random(job)
    while True:
        now = time.monotonic()
        back = [allocation for allocation, ends in held.items() if ends <= now]
        try:
            answer = await stub.Allocate(
                rm_pb.AllocateRequest(
                    job_id=job,
                    asks=[rm_pb.Ask(phase="p", count=want - len(held) + len(back), resources=TASK)],
                    releases=back,
                    master_attempt=1,
                ),
                timeout=10,
            )
            for allocation in back:
                del held[allocation]
            for granted in answer.granted:
                # Tasks vary: uniform from half to one and a half times ``hold``, so that the
                # containers granted together (the first fill) do not all end together, every
                # ``hold`` seconds, in waves no real cluster has.
                held[granted.allocation_id] = now + hold * rng.uniform(0.5, 1.5)
            if stats.measuring:
                stats.granted += len(answer.granted)
        except grpc.aio.AioRpcError:
            pass  # the same releases and asks go again next round
        await asyncio.sleep(0.2)


async def measure(
    address: str, agents: int, masters: int, hold: float, seconds: float, unary: bool = False
) -> dict[str, float]:
    stats = Stats()
    # Each real agent and job master has a connection of its own; one HTTP/2 connection per
    # AGENTS_PER_CONNECTION keeps this process's overhead down while not funnelling thousands
    # of streams through one connection.  Channels alike share one connection unless each has
    # its own subchannel pool: then the heartbeat streams, open for good, took every stream the
    # connection allows, and calls beyond them (a registration) waited for ever.
    channels = [
        grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(max(1, (agents + masters) // AGENTS_PER_CONNECTION))
    ]
    try:
        tasks = [
            asyncio.create_task(
                agent(
                    rm_grpc.NodeServiceStub(channels[i % len(channels)]),
                    f"a{agents}-{i:05d}",
                    i / agents,
                    stats,
                    unary,
                )
            )
            for i in range(agents)
        ]
        # each master wants a fair share of the cluster's slots, so the cluster stays full
        want = max(1, int(agents * NODE.cpu / max(masters, 1)))
        tasks += [
            asyncio.create_task(
                master(
                    rm_grpc.JobServiceStub(channels[m % len(channels)]),
                    rm_grpc.MasterServiceStub(channels[m % len(channels)]),
                    want,
                    hold,
                    stats,
                )
            )
            for m in range(masters)
        ]
        await asyncio.sleep(hold + 5.0)  # warm-up: every agent registered, containers turning
        stats.measuring = True
        await asyncio.sleep(seconds)
        stats.measuring = False
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for channel in channels:
            await channel.close()
    latency = sorted(stats.heartbeat_latency) or [0.0]
    return {
        "heartbeats_per_s": stats.heartbeats / seconds,
        "heartbeat_p50_ms": statistics.median(latency) * 1000,
        "heartbeat_p99_ms": latency[min(len(latency) - 1, int(0.99 * len(latency)))] * 1000,
        "failed": stats.failed,
        "grants_per_s": stats.granted / seconds,
    }


def start_rm(state: Path, core: int | None) -> tuple[subprocess.Popen[bytes], str]:
    """Start `sluice rm`, pinned to ``core`` if given; its process and address."""
    address_file = state / "address"
    command = [
        sys.executable, "-m", "sluice", "rm", "--listen", "127.0.0.1:0",
        "--state-dir", str(state / "rm"), "--address-file", str(address_file),
        "--node-timeout", "60", "--log-level", "warning",
        "--insecure",  # the simulated agents and job masters connect without TLS
    ]  # fmt: skip
    if core is not None:
        command = ["taskset", "-c", str(core), *command]
    with (state / "rm.log").open("wb") as log:
        process = subprocess.Popen(command, stderr=log)
    deadline = time.monotonic() + 60
    while not address_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"sluice rm did not start; see {state / 'rm.log'}")
        time.sleep(0.05)
    return process, address_file.read_text().strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[500, 1000, 2000, 3000])
    parser.add_argument("--masters", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--hold",
        type=float,
        default=15.0,
        help="mean seconds a granted container is used (15: 2,133 grants/s at 2,000 agents)",
    )
    parser.add_argument(
        "--unary",
        action="store_true",
        help="agents heartbeat with unary Heartbeat calls (older agents), not HeartbeatStream",
    )
    parser.add_argument(
        "--share-cores",
        action="store_true",
        help="pin nothing: the RM and the load generator share every core",
    )
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if args.share_cores:
        cores = []
    # The RM's core is chosen before this process leaves it: asked afterwards, this process's
    # affinity would name the generator's own core, and both would share it.
    rm_core = cores[0] if len(cores) > 1 else None
    if rm_core is not None:
        os.sched_setaffinity(0, set(cores[1:]))  # the generator off the RM's core
    where = (
        "the RM on one core, this load generator on the rest"
        if rm_core is not None
        else "the RM and this load generator sharing the cores"
    )
    print(
        f"os.cpu_count() = {os.cpu_count()}; {where}; {args.masters} job masters keeping the "
        "cluster full, each container used "
        f"{args.hold:g} s; agents heartbeat "
        + ("with unary calls" if args.unary else "over a stream each")
    )
    print(
        f"{'agents':>7} {'heartbeats/s':>13} {'p50 ms':>8} {'p99 ms':>8} {'failed':>7} "
        f"{'grants/s':>9}"
    )
    with tempfile.TemporaryDirectory(prefix="sluice-bench-rm-") as directory:
        for agents in args.agents:
            state = Path(directory) / f"run-{agents}"
            state.mkdir()
            process, address = start_rm(state, rm_core)
            try:
                figures = event_loop.run(
                    measure(address, agents, args.masters, args.hold, args.seconds, args.unary)
                )
            finally:
                process.terminate()
                process.wait(timeout=30)
            print(
                f"{agents:>7} {figures['heartbeats_per_s']:>13,.0f} "
                f"{figures['heartbeat_p50_ms']:>8.1f} {figures['heartbeat_p99_ms']:>8.1f} "
                f"{figures['failed']:>7.0f} {figures['grants_per_s']:>9,.0f}",
                flush=True,
            )
    print(
        "targets (issue 9): >= 2,000 agents at 1 Hz with heartbeat p99 < 50 ms; >= 2,000 grants/s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
