"""What mutual TLS costs a real `sluice rm` on the heartbeat and grant paths (issue 10): the
load of ``bench_rm_grpc.py``, insecure and with TLS, side by side in one run.

Run: .venv/bin/python bench/bench_rm_tls.py [--agents 500 1000 2000] [--masters 50]
     [--seconds 20] [--hold 15] [--repeats 3] [--share-cores] [--json]

It makes a throwaway CA in a temporary directory and issues from it, once for the whole run
(the time it took is printed): the RM's certificate, one agent certificate per simulated agent
(``sluice://agent/NODE_ID``: the RM lets an agent speak only for the node its certificate
names) and one client certificate per job master (``sluice://client/master-NNN``: a client-mode
job master, which MasterService accepts for the client's own jobs; one user each, so that no
user's open tasks reach ``--max-open-tasks-per-user``).  Then, for each agent count and each
repeat, it runs the same load twice, once against ``sluice rm --insecure`` and once against
``sluice rm --tls-dir`` (the order alternates between repeats), each time on a fresh RM:

1. *connect*: every agent's channel connects at once (TCP, and with TLS the handshake, ECDSA
   P-256, both sides presenting certificates), as after an RM restart; then *register*: every
   agent's ``RegisterNode`` at once (retried after 1 s when refused, as ``bench_rm_grpc.py``
   does).  Wall time of each, and the RM's CPU time per agent during each.
2. *mixed*: agents heartbeat at 1 Hz over a HeartbeatStream each while job masters keep the
   cluster full (``bench_rm_grpc.master``); after a warm-up of ``--hold`` + 5 s, over
   ``--seconds``: heartbeats per second, heartbeat latency p50/p99, grants per second, the RM's
   and the load generator's CPU (share of a core).
3. *heartbeats only*: the job masters stop; over ``--seconds`` / 2 (at least 5 s): heartbeat
   p50/p99 and the RM's CPU time per heartbeat.  The RM's CPU per grant is estimated as the
   mixed window's CPU less the heartbeats' (at this rate), divided by the grants.

Unlike ``bench_rm_grpc.py``, which multiplexes 20 agents on one HTTP/2 connection, every agent
and every job master here has a connection of its own in both modes, as real ones do (and as
TLS requires: one certificate per agent): so the insecure figures differ a little from that
benchmark's.  The RM gets one core (taskset), this generator the others, unless
``--share-cores``; the generator also pays for TLS on its side (every agent's encryption and
handshakes), which is shown as its share of its core.  Prints the machine's core count, the
load average before and after, each run, then the medians over the repeats with TLS/insecure
ratios; ``--json`` prints everything as JSON instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_rm_grpc import NODE, Stats, master

from plumbing import event_loop, tls
from plumbing.tls import ClientTls, Identity, Role
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc

MODES = ("insecure", "tls")
# Each channel its own connection (its own subchannel pool), as each real agent has.
CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]
CONNECT_TIMEOUT_S = 300.0
IDLE_S = 3.0


@dataclass(frozen=True)
class Certificates:
    """The run's TLS directories, and the agents' and job masters' client credentials."""

    rm: Path
    agents: list[ClientTls]
    masters: list[ClientTls]
    seconds: float  # issuing them all (and loading them back)


def node_id(i: int) -> str:
    return f"node-{i:05d}"


def issue_certificates(directory: Path, agents: int, masters: int) -> Certificates:
    """A CA in ``directory`` and every certificate of the run, issued once (about a
    millisecond each: ECDSA P-256 key, signature, three files) and loaded as agents load
    theirs (checked against the CA)."""
    start = time.perf_counter()
    authority = tls.init_ca(directory / "ca", "bench")
    rm_dir = directory / "rm"
    tls.issue(authority, Identity(Role.RM, "rm"), rm_dir)
    agent_tls = []
    for i in range(agents):
        out = directory / f"agent-{node_id(i)}"
        tls.issue(authority, Identity(Role.AGENT, node_id(i)), out)
        agent_tls.append(ClientTls.load(out))
    master_tls = []
    for m in range(masters):
        out = directory / f"client-master-{m:03d}"
        tls.issue(authority, Identity(Role.CLIENT, f"master-{m:03d}"), out)
        master_tls.append(ClientTls.load(out))
    return Certificates(rm_dir, agent_tls, master_tls, time.perf_counter() - start)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_rm(
    state: Path, core: int | None, tls_dir: Path | None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start `sluice rm` (with TLS if ``tls_dir``), pinned to ``core`` if given."""
    address_file = state / "address"
    command = [
        sys.executable, "-m", "sluice", "rm", "--listen", "127.0.0.1:0",
        "--state-dir", str(state / "rm"), "--address-file", str(address_file),
        "--node-timeout", "60", "--log-level", "warning",
        *(["--tls-dir", str(tls_dir)] if tls_dir is not None else ["--insecure"]),
    ]  # fmt: skip
    if core is not None:
        command = ["taskset", "-c", str(core), *command]
    with (state / "rm.log").open("wb") as log:
        process = subprocess.Popen(command, stderr=log)
    deadline = time.monotonic() + 60
    while not address_file.exists() or not address_file.read_text().strip():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"sluice rm did not start; see {state / 'rm.log'}")
        time.sleep(0.05)
    return process, address_file.read_text().strip()


def open_channel(address: str, credentials: ClientTls | None) -> grpc.aio.Channel:
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    return grpc.aio.secure_channel(
        address, tls.channel_credentials(credentials), options=CHANNEL_OPTIONS
    )


def registration(i: int) -> rm_pb.RegisterNodeRequest:
    return rm_pb.RegisterNodeRequest(
        node_id=node_id(i), address=f"{node_id(i)}.invalid:7000", capacity=NODE, runtime="process"
    )


async def register(stub: rm_grpc.NodeServiceStub, request: rm_pb.RegisterNodeRequest) -> int:
    """Register, again after 1 s when refused (as ``bench_rm_grpc.agent``); the retries."""
    retries = 0
    while True:
        try:
            await stub.RegisterNode(request, timeout=30)
            return retries
        except grpc.aio.AioRpcError:
            retries += 1
            await asyncio.sleep(1.0)


async def heartbeats(
    stub: rm_grpc.NodeServiceStub, request: rm_pb.RegisterNodeRequest, phase: float, stats: Stats
) -> None:
    """A registered agent: a heartbeat every second at ``phase`` over one HeartbeatStream (as
    ``bench_rm_grpc.agent``); latency from writing the request to reading its answer."""
    await asyncio.sleep(phase)
    stream: grpc.aio.StreamStreamCall | None = None
    next_beat = time.monotonic()
    while True:
        beat = rm_pb.HeartbeatRequest(node_id=request.node_id)
        start = time.monotonic()
        try:
            if stream is None:
                stream = stub.HeartbeatStream()
            await stream.write(beat)
            answer = await stream.read()
            if answer is grpc.aio.EOF:
                raise EOFError("the RM ended the heartbeat stream")
            latency = time.monotonic() - start
            if answer.reregister:
                await stub.RegisterNode(request)
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


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples) or [0.0]
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def window(stats: Stats, pid: int, seconds: float) -> dict[str, float]:
    """Measure over ``seconds``: heartbeats, their latency, grants, the RM's and this
    process's CPU."""
    stats.heartbeat_latency, stats.heartbeats, stats.failed, stats.granted = [], 0, 0, 0
    rm_cpu, own_cpu, start = cpu_seconds(pid), time.process_time(), time.monotonic()
    stats.measuring = True
    await asyncio.sleep(seconds)
    stats.measuring = False
    elapsed = time.monotonic() - start
    rm_cpu = cpu_seconds(pid) - rm_cpu
    return {
        "heartbeats_per_s": stats.heartbeats / elapsed,
        "heartbeat_p50_ms": percentile(stats.heartbeat_latency, 0.5) * 1000,
        "heartbeat_p99_ms": percentile(stats.heartbeat_latency, 0.99) * 1000,
        "failed": stats.failed,
        "grants_per_s": stats.granted / elapsed,
        "rm_cpu_s": rm_cpu,
        "rm_core_busy": rm_cpu / elapsed,
        "generator_core_busy": (time.process_time() - own_cpu) / elapsed,
        "seconds": elapsed,
        "heartbeats": stats.heartbeats,
        "grants": stats.granted,
    }


async def measure(
    address: str,
    pid: int,
    agents: int,
    masters: int,
    hold: float,
    seconds: float,
    certificates: Certificates | None,
) -> dict[str, float]:
    """One run against the RM at ``address`` (process ``pid``); with TLS if ``certificates``."""
    agent_channels = [
        open_channel(address, certificates.agents[i] if certificates else None)
        for i in range(agents)
    ]
    master_channels = [
        open_channel(address, certificates.masters[m] if certificates else None)
        for m in range(masters)
    ]
    figures: dict[str, float] = {}
    tasks: list[asyncio.Task[None]] = []
    try:
        # 0. the RM idle, for its background cost
        rm_cpu, start = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(IDLE_S)
        figures["rm_idle_core_busy"] = (cpu_seconds(pid) - rm_cpu) / (time.monotonic() - start)
        # 1. every agent connects at once, then registers at once
        rm_cpu, start = cpu_seconds(pid), time.monotonic()
        await asyncio.wait_for(
            asyncio.gather(*(channel.channel_ready() for channel in agent_channels)),
            CONNECT_TIMEOUT_S,
        )
        figures["connect_s"] = time.monotonic() - start
        figures["connect_rm_cpu_ms_per_agent"] = (cpu_seconds(pid) - rm_cpu) / agents * 1000
        stubs = [rm_grpc.NodeServiceStub(channel) for channel in agent_channels]
        requests = [registration(i) for i in range(agents)]
        rm_cpu, start = cpu_seconds(pid), time.monotonic()
        retries = await asyncio.wait_for(
            asyncio.gather(*(register(stub, r) for stub, r in zip(stubs, requests, strict=True))),
            CONNECT_TIMEOUT_S,
        )
        figures["register_s"] = time.monotonic() - start
        figures["register_rm_cpu_ms_per_agent"] = (cpu_seconds(pid) - rm_cpu) / agents * 1000
        figures["register_retries"] = sum(retries)
        await asyncio.wait_for(
            asyncio.gather(*(channel.channel_ready() for channel in master_channels)),
            CONNECT_TIMEOUT_S,
        )

        # 2. heartbeats and grants
        stats = Stats()
        tasks = [
            asyncio.create_task(heartbeats(stub, request, i / agents, stats))
            for i, (stub, request) in enumerate(zip(stubs, requests, strict=True))
        ]
        want = max(1, int(agents * NODE.cpu / max(masters, 1)))  # the cluster stays full
        master_tasks = [
            asyncio.create_task(
                master(rm_grpc.JobServiceStub(c), rm_grpc.MasterServiceStub(c), want, hold, stats)
            )
            for c in master_channels
        ]
        tasks += master_tasks
        await asyncio.sleep(hold + 5.0)  # warm-up: containers turning over
        mixed = await window(stats, pid, seconds)
        for key, value in mixed.items():
            figures[f"mixed_{key}"] = value

        # 3. heartbeats only
        for task in master_tasks:
            task.cancel()
        await asyncio.gather(*master_tasks, return_exceptions=True)
        await asyncio.sleep(2.0)
        alone = await window(stats, pid, max(5.0, seconds / 2))
        for key, value in alone.items():
            figures[f"beats_{key}"] = value
        figures["rm_cpu_us_per_heartbeat"] = alone["rm_cpu_s"] / max(1, alone["heartbeats"]) * 1e6
        heartbeat_cpu = alone["rm_cpu_s"] / alone["seconds"] * mixed["seconds"]
        figures["rm_cpu_us_per_grant"] = (
            max(0.0, mixed["rm_cpu_s"] - heartbeat_cpu) / max(1, mixed["grants"]) * 1e6
        )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for channel in [*agent_channels, *master_channels]:
            await channel.close()
    return figures


# What the summary shows: (label, key, format).
ROWS = [
    ("RM core busy, idle (%)", "rm_idle_core_busy", "{:.1%}"),
    ("connect all agents (s)", "connect_s", "{:.2f}"),
    ("RM CPU per connection (ms)", "connect_rm_cpu_ms_per_agent", "{:.2f}"),
    ("register all agents (s)", "register_s", "{:.2f}"),
    ("RM CPU per registration (ms)", "register_rm_cpu_ms_per_agent", "{:.2f}"),
    ("heartbeats/s", "mixed_heartbeats_per_s", "{:,.0f}"),
    ("heartbeat p50 (ms)", "mixed_heartbeat_p50_ms", "{:.1f}"),
    ("heartbeat p99 (ms)", "mixed_heartbeat_p99_ms", "{:.1f}"),
    ("grants/s", "mixed_grants_per_s", "{:,.0f}"),
    ("RM core busy, mixed (%)", "mixed_rm_core_busy", "{:.0%}"),
    ("generator core busy, mixed (%)", "mixed_generator_core_busy", "{:.0%}"),
    ("heartbeats only: p50 (ms)", "beats_heartbeat_p50_ms", "{:.1f}"),
    ("heartbeats only: p99 (ms)", "beats_heartbeat_p99_ms", "{:.1f}"),
    ("RM CPU per heartbeat (us)", "rm_cpu_us_per_heartbeat", "{:.0f}"),
    ("RM CPU per grant (us, est.)", "rm_cpu_us_per_grant", "{:.0f}"),
]
RUN_COLUMNS = (
    "{agents:>6} {repeat:>3} {mode:>8} {connect_s:>8.2f} {register_s:>9.2f} "
    "{mixed_heartbeat_p50_ms:>7.1f} {mixed_heartbeat_p99_ms:>7.1f} {mixed_failed:>6.0f} "
    "{mixed_grants_per_s:>9,.0f} {mixed_rm_core_busy:>6.0%} {mixed_generator_core_busy:>6.0%} "
    "{rm_cpu_us_per_heartbeat:>8.0f} {load:>5.2f}"
)
RUN_HEADER = (
    f"{'agents':>6} {'rep':>3} {'mode':>8} {'connect':>8} {'register':>9} {'p50 ms':>7} "
    f"{'p99 ms':>7} {'failed':>6} {'grants/s':>9} {'RM':>6} {'gen':>6} {'us/beat':>8} "
    f"{'load':>5}"
)


def medians(runs: list[dict[str, Any]], agents: int, mode: str) -> dict[str, float]:
    chosen = [r for r in runs if r["agents"] == agents and r["mode"] == mode]
    return {key: statistics.median(r[key] for r in chosen) for _, key, _ in ROWS}


def summary(runs: list[dict[str, Any]], sizes: Sequence[int], repeats: int) -> str:
    lines = [
        f"medians over {repeats} repeat(s); ratio = TLS / insecure",
        f"{'agents':>6}  {'':<32} {'insecure':>10} {'TLS':>10} {'ratio':>7}",
    ]
    for agents in sizes:
        plain, secure = medians(runs, agents, "insecure"), medians(runs, agents, "tls")
        for n, (label, key, form) in enumerate(ROWS):
            ratio = f"{secure[key] / plain[key]:.2f}x" if plain[key] else "-"
            lines.append(
                f"{agents if n == 0 else '':>6}  {label:<32} {form.format(plain[key]):>10} "
                f"{form.format(secure[key]):>10} {ratio:>7}"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--masters", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--hold", type=float, default=15.0, help="mean seconds a granted container is used"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--share-cores",
        action="store_true",
        help="pin nothing: the RM and the load generator share every core",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args()
    quiet = args.json

    def say(text: str) -> None:
        if not quiet:
            print(text, flush=True)

    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if args.share_cores:
        cores = []
    rm_core = cores[0] if len(cores) > 1 else None
    if rm_core is not None:
        os.sched_setaffinity(0, set(cores[1:]))  # the generator off the RM's core
    where = (
        "the RM on one core, this load generator on the rest"
        if rm_core is not None
        else "the RM and this load generator sharing the cores"
    )
    load_before = os.getloadavg()
    say(
        f"os.cpu_count() = {os.cpu_count()}; {where}; load average {load_before[0]:.2f} "
        f"{load_before[1]:.2f} {load_before[2]:.2f}; {args.masters} job masters, containers "
        f"used {args.hold:g} s; every agent and job master on a connection of its own"
    )
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="sluice-bench-tls-") as directory:
        root = Path(directory)
        certificates = issue_certificates(root / "tls", max(args.agents), args.masters)
        say(
            f"issued a CA, the RM's certificate, {max(args.agents):,} agent and "
            f"{args.masters} client certificates (ECDSA P-256) in {certificates.seconds:.1f} s "
            f"({certificates.seconds / (max(args.agents) + args.masters + 1) * 1000:.2f} ms "
            "each, loading included)"
        )
        say(RUN_HEADER)
        for agents in args.agents:
            for repeat in range(args.repeats):
                order = MODES if repeat % 2 == 0 else MODES[::-1]
                for mode in order:
                    state = root / f"run-{agents}-{repeat}-{mode}"
                    state.mkdir()
                    load = os.getloadavg()[0]
                    secure = certificates if mode == "tls" else None
                    process, address = start_rm(state, rm_core, certificates.rm if secure else None)
                    try:
                        figures = event_loop.run(
                            measure(
                                address,
                                process.pid,
                                agents,
                                args.masters,
                                args.hold,
                                args.seconds,
                                secure,
                            )
                        )
                    finally:
                        process.terminate()
                        process.wait(timeout=30)
                    run = {"agents": agents, "repeat": repeat, "mode": mode, "load": load}
                    run.update(figures)
                    runs.append(run)
                    say(RUN_COLUMNS.format(**run))
    load_after = os.getloadavg()
    say(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    say(summary(runs, args.agents, args.repeats))
    if quiet:
        document = {
            "cpu_count": os.cpu_count(),
            "rm_pinned_core": rm_core,
            "load_before": load_before,
            "load_after": load_after,
            "certificates_s": certificates.seconds,
            "arguments": vars(args),
            "runs": runs,
            "medians": {
                str(agents): {mode: medians(runs, agents, mode) for mode in MODES}
                for agents in args.agents
            },
        }
        print(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
