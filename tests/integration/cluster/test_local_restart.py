"""Ports that stay put: a daemon started again with the command line ``cluster.json`` records
listens where everyone already looks for it, and ``sluice local restart DAEMON`` does that for
one daemon of a running local cluster (issue 27, item 12).

Real processes: one local cluster (TLS on, embedded brokers) for the module; each test reads
``cluster.json`` from disk, since restarts rewrite it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from plumbing import bearer, tls
from plumbing.errors import UserError
from sluice import local_cluster, machines
from sluice.client import RMClient
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb

from .harness import Cluster, job_spec, phase, running_cluster, start_recorded, wait_until

# Seconds a daemon may take to answer again on a machine shared by many test runs: a bound on
# waiting, never a measurement.
PATIENCE = 90.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory, "local-restart", nodes=1)


def _recorded(cluster: Cluster) -> dict[str, Any]:
    return dict(json.loads((cluster.directory / "cluster.json").read_text()))


def _write(cluster: Cluster, info: dict[str, Any]) -> None:
    (cluster.directory / "cluster.json").write_text(json.dumps(info))


def _token_client(cluster: Cluster, address: str) -> RMClient:
    """A person with a bearer token of the cluster's CA, at the RM's bearer-token port."""
    authority = tls.load_ca(cluster.directory / "tls" / "ca")
    token, _ = bearer.issue_token(authority, tls.Identity(tls.Role.CLIENT, "erin"))
    assert cluster.client.tls is not None
    return RMClient.connect(address, tls.ClientTls(cluster.client.tls.ca_pem, token=token))


def _answers(client: RMClient) -> bool:
    with contextlib.suppress(grpc.RpcError):
        client.jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=5)
        return True
    return False


def _aggregator_answers(cluster: Cluster, address: str) -> bool:
    with contextlib.suppress(UserError):
        machines.get_candidates(address, cluster.client.tls)
        return True
    return False


def _all_alive(cluster: Cluster) -> dict[str, bool]:
    names = ["rm", *(n["node_id"] for n in cluster.info["nodes"])]
    return dict.fromkeys([*names, *(s["name"] for s in cluster.info["services"])], True)


def _handed_out_aggregator(cluster: Cluster) -> str:
    info = cluster.client.jobs.GetClusterInfo(rm_pb.GetClusterInfoRequest(), timeout=10)
    return str(info.data_plane.aggregator_address)


def _sluice_local(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice", "local", *args, "--dir", str(cluster.directory)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _run_a_job(cluster: Cluster, name: str) -> None:
    job_id = cluster.submit(job_spec(name, [phase("p", 2, "echo ok", cpu=0.2)], retries=2))
    assert cluster.wait_final(job_id, PATIENCE).summary.state == pb.JOB_SUCCEEDED


def test_an_rm_restarted_with_its_recorded_command_line_answers_on_every_recorded_port(
    cluster: Cluster,
) -> None:
    before = _recorded(cluster)
    assert before["rm_tokens"], "a cluster with TLS has a bearer-token port"
    people = _token_client(cluster, before["rm_tokens"])
    try:
        assert wait_until(lambda: _answers(people), PATIENCE, "the bearer-token port answers")
        cluster.restart_rm()  # SIGKILL, then the very argv `local up` recorded (ports 0)
        # recorded with its identity, so that `local down` knows it for ours and stops it
        assert local_cluster.status(cluster.directory)["alive"] == _all_alive(cluster)
        after = _recorded(cluster)
        assert (after["rm"], after["rm_tokens"]) == (before["rm"], before["rm_tokens"])
        wait_until(lambda: _answers(cluster.client), PATIENCE, f"the RM at {after['rm']}")
        wait_until(lambda: _answers(people), PATIENCE, f"bearer tokens at {after['rm_tokens']}")
    finally:
        people.close()
    _run_a_job(cluster, "after-rm-restart")


def test_an_aggregator_restarted_with_its_recorded_command_line_is_where_the_rm_says(
    cluster: Cluster,
) -> None:
    info = _recorded(cluster)
    (aggregator,) = [s for s in info["services"] if s["name"] == "aggregator"]
    assert _handed_out_aggregator(cluster) == aggregator["address"]
    cluster.kill_process(int(aggregator["pid"]))
    start_recorded(
        aggregator, "pid", aggregator["argv"], cluster.directory / "logs" / "aggregator.log"
    )
    _write(cluster, info)  # so that `local down` stops this one
    assert local_cluster.status(cluster.directory)["alive"] == _all_alive(cluster)
    handed_out = _handed_out_aggregator(cluster)
    wait_until(
        lambda: _aggregator_answers(cluster, handed_out),
        PATIENCE,
        f"the aggregator at {handed_out}, the address the RM hands out",
    )


@pytest.mark.parametrize(
    "daemon",
    [["rm"], ["aggregator"], ["agent", "node-1"]],
    ids=" ".join,
)
def test_sluice_local_restart_restarts_one_daemon_on_its_ports_and_jobs_still_run(
    cluster: Cluster, daemon: list[str]
) -> None:
    before = _recorded(cluster)
    result = _sluice_local(cluster, "restart", *daemon)
    assert result.returncode == 0, result.stderr
    name = " ".join(daemon)
    assert f"starting {name}" in result.stderr
    assert f"{name} restarted" in result.stderr
    after = _recorded(cluster)
    if daemon == ["rm"]:
        assert after["rm_pid"] != before["rm_pid"]
        assert (after["rm"], after["rm_tokens"]) == (before["rm"], before["rm_tokens"])
    elif daemon == ["aggregator"]:
        old, new = (
            [s for s in i["services"] if s["name"] == "aggregator"] for i in (before, after)
        )
        assert new[0]["pid"] != old[0]["pid"] and new[0]["address"] == old[0]["address"]
        handed_out = _handed_out_aggregator(cluster)
        assert handed_out == new[0]["address"]
        wait_until(lambda: _aggregator_answers(cluster, handed_out), PATIENCE, "the aggregator")
    else:
        assert after["nodes"][0]["pid"] != before["nodes"][0]["pid"]
        assert after["nodes"][0]["address"] == before["nodes"][0]["address"]
    status = _sluice_local(cluster, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    _run_a_job(cluster, f"after-{'-'.join(daemon)}")


@pytest.mark.parametrize("broker", ["mqtt", "kafka"])
def test_sluice_local_restart_restarts_an_embedded_broker_on_its_port(
    cluster: Cluster, broker: str
) -> None:
    (before,) = [s for s in _recorded(cluster)["services"] if s["name"] == broker]
    result = _sluice_local(cluster, "restart", broker)
    assert result.returncode == 0, result.stderr
    (after,) = [s for s in _recorded(cluster)["services"] if s["name"] == broker]
    assert after["pid"] != before["pid"] and after["address"] == before["address"]
    status = _sluice_local(cluster, "status")
    assert status.returncode == 0, status.stdout + status.stderr


@pytest.mark.parametrize(
    ("daemon", "message"),
    [
        (["nonsense"], "unknown daemon 'nonsense': expected one of rm, aggregator"),
        (["agent", "node-9"], "agent 'node-9': no such node (nodes: node-1)"),
        (["rm", "now"], "unknown daemon 'rm now'"),
    ],
)
def test_sluice_local_restart_of_an_unknown_daemon_says_so_in_one_line(
    cluster: Cluster, daemon: list[str], message: str
) -> None:
    result = _sluice_local(cluster, "restart", *daemon)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("sluice: error: ") and message in line, line
