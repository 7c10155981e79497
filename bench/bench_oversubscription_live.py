"""A latency-sensitive service's p95 latency on a real two-node cluster (issue 13): alone,
beside CPU-hungry speculative tasks under UP, and under RP (ROSE Sec. 7.4: +5.4 % under RP).

Run: .venv/bin/python bench/bench_oversubscription_live.py [--seconds 40] [--rate 50]

For each mode (UP, then RP) it starts a local cluster (process runtime; two nodes of 2 cpu on
this machine), waits for the machine to be quiet after the cluster's start-up, runs an HTTP
server as a latency-sensitive service on both nodes (a task each, 0.5 cpu), and waits until
the agents' watch of it has a baseline.  A load generator here sends
``--rate`` GETs a second to one of them and records each answer's latency:

* **alone**: for ``--seconds``, with nothing else running (measured in the UP cluster);
* **co-located**: a blocker job takes the cores the service leaves, and a job of eight
  CPU-burning tasks goes speculative on both nodes (each burns its 0.5 cpu; the speculative
  quota is the whole node, so together they ask twice the machine's cores); the latency is
  measured over the next ``--seconds``.  Under RP the agents see the service's CPU pressure
  rise, throttle their queues and evict; under UP nothing stops the burners.

Both "nodes" share this machine's cores, so what runs on one slows the other: the service
runs on both, and both agents judge the machine's pressure (cgroup v1 keeps none per group).
Prints the p95 (and p50) latencies, their ratios to alone, the evictions, and the core count.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from live_cluster import nodes, phase, two_nodes

from sluice.client import agent_stub
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} not met within {timeout:.0f} s")
        time.sleep(0.5)
    return result


def load(url: str, seconds: float, rate: float) -> list[float]:
    """GET ``url`` ``rate`` times a second for ``seconds``; each answer's latency."""
    latencies: list[float] = []
    period = 1.0 / rate
    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while time.monotonic() < end:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                answer.read()
            latencies.append(time.perf_counter() - started)
        except OSError:
            latencies.append(5.0)
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))
    return latencies


def machine_cpu_pressure() -> float:
    """The machine's CPU pressure over the last 10 s (PSI ``some avg10``, percent)."""
    first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    return float(first.split("avg10=")[1].split()[0])


def run_mode(mode: str, seconds: float, rate: float, alone: bool) -> dict[str, Any]:
    found: dict[str, Any] = {}
    port = free_port()  # and the next one (the service's second task)
    with two_nodes(
        f"bench-oversub-{mode}-",
        oversubscription=mode,
        agent_args=("--admission-thresholds", "1,1,1", "--speculative-quota", "1,1,1"),
    ) as (info, client):

        def submit(document: dict[str, Any]) -> str:
            return str(client.submit(yaml.safe_dump(document)).job_id)

        # The service's watch learns its normal pressure from its first samples: not while
        # the cluster's own start-up keeps this machine's cores busy.
        wait(lambda: machine_cpu_pressure() < 10.0, 120, "the machine quiet after start-up")

        service = submit(
            {
                "name": "web",
                "kind": "service",
                "priority": 20,
                "service": {"latency_sensitive": True},
                "phases": [
                    phase(
                        "server",
                        2,
                        # one port per task: both "nodes" are this machine
                        f"exec {sys.executable} -m http.server "
                        f"$(( {port} + ${{SLUICE_TASK_ID##*-}} )) --bind 127.0.0.1",
                        0.5,
                    )
                ],
            }
        )

        def healths() -> list[agent_pb.ServiceHealth]:
            out: list[agent_pb.ServiceHealth] = []
            for node in info["nodes"]:
                ch, agent = agent_stub(node["address"], client.tls)
                try:
                    listed = agent.ListTasks(agent_pb.ListTasksRequest(), timeout=10).tasks
                finally:
                    ch.close()
                out += [
                    s.service
                    for s in listed
                    if s.task.job_id == service
                    and s.task.task_id != "master"
                    and s.state == pb.TASK_RUNNING
                ]
            return out

        wait(
            lambda: (h := healths()) and len(h) == 2 and all(x.judging for x in h),
            300,
            "the service watched, with a baseline",
        )
        url = f"http://127.0.0.1:{port}/"
        if alone:
            found["alone"] = load(url, seconds, rate)
        submit(  # the blocker
            {"name": "blocker", "priority": 1, "phases": [phase("hold", 8, "sleep 600", 0.5)]}
        )
        wait(
            lambda: all(n.capacity.cpu - n.allocated.cpu < 0.5 for n in nodes(client)),
            60,
            "the blocker holding the cluster",
        )
        submit(  # the burners
            {
                "name": "burn",
                "priority": 10,
                "speculative": {"after_s": 0},
                "phases": [phase("burn", 8, "timeout 600 sh -c 'while :; do :; done'", 0.5)],
            }
        )

        def burning() -> bool:  # (under RP they may be evicted before a heartbeat shows them)
            listed = nodes(client)
            return sum(n.speculative_tasks for n in listed) >= 2 or any(
                n.speculative.evicted for n in listed
            )

        wait(burning, 60, "speculative burners running")
        found["co-located"] = load(url, seconds, rate)
        found["evicted"] = sum(n.speculative.evicted for n in nodes(client))
    return found


def p(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores")
    up = run_mode("up", args.seconds, args.rate, alone=True)
    rp = run_mode("rp", args.seconds, args.rate, alone=False)
    alone = up["alone"]
    rows = [
        ("alone", alone, 0),
        ("co-located, UP", up["co-located"], up["evicted"]),
        ("co-located, RP", rp["co-located"], rp["evicted"]),
    ]
    base = p(alone, 95)
    for name, samples, evicted in rows:
        print(
            f"{name:16} p95 {p(samples, 95):8.2f} ms ({p(samples, 95) / base - 1:+6.1%})   "
            f"p50 {statistics.median(samples) * 1000:7.2f} ms   evicted {evicted}"
        )


if __name__ == "__main__":
    main()
