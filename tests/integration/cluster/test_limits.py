"""Limits per identity, against a real RM process with TLS: one person flooding submissions and
streams runs into their own limits, while another person's submission still answers and the
agents' heartbeats stay prompt."""

from __future__ import annotations

import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from plumbing import tls
from plumbing.rpc import channel
from plumbing.tls import ClientTls, Identity, Role
from sluice.client import RMClient
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from sluice_pb import resource_manager_pb2_grpc as rm_grpc
from tests.integration.cluster.harness import job_spec, phase, wait_until

pytestmark = pytest.mark.integration

SUBMISSIONS_PER_MINUTE = 20
MAX_STREAMS = 4
MAX_OPEN_TASKS = 30
AGENTS = 8
FLOOD_HEARTBEATS = 400  # about 2.5 s of heartbeats under the flood
SPEC = job_spec("flood", [phase("work", 1, "sleep 600")])


@dataclass
class Rm:
    address: str
    credentials: dict[str, ClientTls]


def _credentials(authority: tls.Authority, identity: Identity, out: Path) -> ClientTls:
    tls.issue(authority, identity, out)
    return ClientTls.of(tls.load_tls_dir(out))


@pytest.fixture(scope="module")
def rm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rm]:
    root = tmp_path_factory.mktemp("limits")
    authority = tls.init_ca(root / "ca", "limits")
    tls.issue(authority, Identity(Role.RM, "rm"), root / "rm")
    people = {
        name: _credentials(authority, Identity(Role.CLIENT, name), root / name)
        for name in ("mallory", "alice")
    }
    agents = {
        f"node-{i}": _credentials(authority, Identity(Role.AGENT, f"node-{i}"), root / f"node-{i}")
        for i in range(AGENTS)
    }
    address_file = root / "rm.addr"
    log = (root / "rm.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice",
            "rm",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            str(root / "state"),
            "--tls-dir",
            str(root / "rm"),
            "--address-file",
            str(address_file),
            "--submissions-per-minute",
            str(SUBMISSIONS_PER_MINUTE),
            "--max-streams-per-caller",
            str(MAX_STREAMS),
            "--max-open-tasks-per-user",
            str(MAX_OPEN_TASKS),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: address_file.exists() or process.poll() is not None, what="the RM to start"
        )
        assert process.poll() is None, (root / "rm.log").read_text()
        yield Rm(address_file.read_text().strip(), {**people, **agents})
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


class Heartbeats:
    """Agents heartbeating every 50 ms on streams of their own, timing every answer."""

    def __init__(self, rm: Rm) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(rm, f"node-{i}"), daemon=True)
            for i in range(AGENTS)
        ]

    def __enter__(self) -> Heartbeats:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _run(self, rm: Rm, node_id: str) -> None:
        ch = channel(rm.address, rm.credentials[node_id])
        stub = rm_grpc.NodeServiceStub(ch)
        try:
            stub.RegisterNode(
                rm_pb.RegisterNodeRequest(
                    node_id=node_id,
                    address=f"127.0.0.1:{9000 + int(node_id.split('-')[1])}",
                    capacity=pb.Resources(cpu=1, memory_mb=1024),
                    runtime="process",
                    instance_id=node_id,
                ),
                timeout=30,
            )
            while not self._stop.wait(0.05):
                started = time.monotonic()
                stub.Heartbeat(
                    rm_pb.HeartbeatRequest(node_id=node_id, instance_id=node_id), timeout=30
                )
                self.latencies.append(time.monotonic() - started)
        except grpc.RpcError as error:
            self.errors.append(f"{node_id}: {error}")
        finally:
            ch.close()


def flood(address: str, credentials: ClientTls, stop: Any, results: Any, threads: int = 4) -> None:
    """Submit as fast as four threads can until ``stop``; put (accepted job ids, the first
    refusal of each status, calls made) on ``results``.

    At the lowest CPU priority: in a cluster the flood comes from another machine, while here
    it shares the RM's two cores, and what is measured is the RM's answer to the flood, not the
    test machine's scheduler."""
    os.nice(19)
    client = RMClient.connect(address, credentials)
    accepted: list[str] = []
    refusals: dict[str, str] = {}
    calls = [0]
    lock = threading.Lock()

    def submit() -> None:
        while not stop.is_set():
            try:
                job = client.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=SPEC), timeout=30)
                with lock:
                    accepted.append(job.job.job_id)
            except grpc.RpcError as error:
                with lock:
                    refusals.setdefault(error.code().name, str(error.details()))
            with lock:
                calls[0] += 1

    workers = [threading.Thread(target=submit) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    client.close()
    results.put((accepted, refusals, calls[0]))


def test_a_flooding_user_hits_their_own_limits_and_nobody_else_notices(rm: Rm) -> None:
    mallory = RMClient.connect(rm.address, rm.credentials["mallory"])
    alice = RMClient.connect(rm.address, rm.credentials["alice"])
    watchers: list[grpc.Future] = []
    refusals: dict[str, str] = {}
    calls = 0
    try:
        with Heartbeats(rm) as heartbeats:
            wait_until(lambda: len(heartbeats.latencies) >= AGENTS, what="heartbeats")
            # Submissions: a burst of SUBMISSIONS_PER_MINUTE, then refusals, however fast the
            # flood: four threads of another process submitting in a loop (another process, so
            # the heartbeats measured here do not wait for the flood's share of this one).
            context = multiprocessing.get_context("spawn")
            stop, results = context.Event(), context.Queue()
            flooder = context.Process(
                target=flood, args=(rm.address, rm.credentials["mallory"], stop, results)
            )
            flood_started = time.monotonic()
            flooder.start()
            try:
                before = len(heartbeats.latencies)
                # Meanwhile, another person's submission answers.
                assert alice.submit(SPEC).owner == "alice"
                wait_until(
                    lambda: len(heartbeats.latencies) >= before + FLOOD_HEARTBEATS,
                    timeout=120,
                    what="heartbeats under the flood",
                )
            finally:
                stop.set()
                accepted, refusals, calls = results.get(timeout=60)
                flooder.join(timeout=60)
            refilled = (time.monotonic() - flood_started) * SUBMISSIONS_PER_MINUTE / 60
            assert len(accepted) <= SUBMISSIONS_PER_MINUTE + refilled + 1
            assert "RESOURCE_EXHAUSTED" in refusals
            # Streams: MAX_STREAMS watchers of mallory's, then a refusal; alice still watches.
            job_id = accepted[0]
            for _ in range(MAX_STREAMS):
                stream = mallory.jobs.WatchJob(rm_pb.GetJobRequest(job_id=job_id), timeout=120)
                next(stream)
                watchers.append(stream)
            with pytest.raises(grpc.RpcError) as caught:
                next(mallory.jobs.WatchJob(rm_pb.GetJobRequest(job_id=job_id), timeout=30))
            assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert caught.value.details() == (
                f"streams: client 'mallory' already holds {MAX_STREAMS} open streams, the limit "
                "per caller (--max-streams-per-caller); close some first"
            )
            alices = alice.jobs.WatchJob(rm_pb.GetJobRequest(job_id=job_id), timeout=30)
            assert next(alices).job_id == job_id
            alices.cancel()
        assert not heartbeats.errors
        p99 = statistics.quantiles(heartbeats.latencies, n=100)[98]
        print(  # -rP shows it
            f"{calls} calls of the flood; heartbeats: {len(heartbeats.latencies)}, "
            f"p99 {p99 * 1000:.1f} ms"
        )
        assert p99 < 0.2, f"heartbeat p99 {p99 * 1000:.0f} ms over {len(heartbeats.latencies)}"
    finally:
        for stream in watchers:
            stream.cancel()
        mallory.close()
        alice.close()
    assert refusals["RESOURCE_EXHAUSTED"].startswith(
        f"submissions: mallory submitted more than {SUBMISSIONS_PER_MINUTE} jobs a minute"
    )


def test_a_user_with_too_many_open_tasks_is_refused_more(rm: Rm) -> None:
    heavy = job_spec("heavy", [phase("work", MAX_OPEN_TASKS + 1, "sleep 600")])
    alice = RMClient.connect(rm.address, rm.credentials["alice"])
    try:
        with pytest.raises(grpc.RpcError) as caught:
            alice.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=heavy), timeout=30)
        assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert caught.value.details().startswith("tasks: alice has ")
        assert f"the limit of {MAX_OPEN_TASKS} per user (--max-open-tasks-per-user)" in (
            caught.value.details()
        )
    finally:
        alice.close()
