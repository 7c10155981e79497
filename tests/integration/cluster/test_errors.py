"""Bad input against a real RM: INVALID_ARGUMENT / NOT_FOUND over gRPC, one clear line from the
CLI, and nothing created."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import (
    Cluster,
    job_spec,
    phase,
    running_cluster,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory, "cluster-errors")


BAD_SPECS = [
    ("name: x\nphases: []\n", "phases: must be a non-empty list"),
    (
        "name: x\nbogus: 1\nphases: [{name: a, tasks: 1, command: ['true'], resources: {cpu: 1, memory_mb: 1}}]\n",
        "bogus: unknown field",
    ),
    (
        "name: x\nphases: [{name: a, tasks: 0, command: ['true'], resources: {cpu: 1, memory_mb: 1}}]\n",
        "phases[0].tasks: must be positive",
    ),
    (
        "name: x\nphases: [{name: a, tasks: 1, command: ['true'], resources: {cpu: 1, memory_mb: 1}, after: [b]}]\n",
        "phases[0].after: unknown phase 'b'",
    ),
    (
        "name: x\nphases:\n"
        "  - {name: a, tasks: 1, command: ['true'], resources: {cpu: 1, memory_mb: 1}, after: [b]}\n"
        "  - {name: b, tasks: 1, command: ['true'], resources: {cpu: 1, memory_mb: 1}, after: [a]}\n",
        "phases: dependency cycle",
    ),
    (
        "name: x\nphases: [{name: a, tasks: 1, command: ['true'], resources: {cpu: 64, memory_mb: 1}}]\n",
        "phases[0].resources: 64 cpu",
    ),
    (
        "name: x\nphases: [{name: a, tasks: 1, command: ['true'], resources: {cpu: 1, memory_mb: 999999}}]\n",
        "fits on no node",
    ),
    ("name: [unclosed\n", "not valid YAML"),
]


@pytest.mark.parametrize(("spec", "message"), BAD_SPECS)
def test_invalid_spec_is_refused_over_grpc_and_nothing_is_created(
    cluster: Cluster, spec: str, message: str
) -> None:
    before = len(cluster.client.jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=10).jobs)
    with pytest.raises(grpc.RpcError) as raised:
        cluster.client.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=spec), timeout=10)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in raised.value.details()
    assert len(cluster.client.jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=10).jobs) == before


def test_structured_spec_is_validated_like_yaml(cluster: Cluster) -> None:
    spec = pb.JobSpec(name="s", phases=[pb.PhaseSpec(name="a", tasks=1, command=["true"])])
    with pytest.raises(grpc.RpcError) as raised:
        cluster.client.jobs.SubmitJob(rm_pb.SubmitJobRequest(spec=spec), timeout=10)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "phases[0].resources.cpu: must be positive" in raised.value.details()


@pytest.mark.parametrize("rpc", ["GetJob", "KillJob"])
def test_unknown_job_is_not_found(cluster: Cluster, rpc: str) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        getattr(cluster.client.jobs, rpc)(rm_pb.GetJobRequest(job_id="job-999999"), timeout=10)
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND


def _sluice(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # --dir: the CLI finds the cluster's client certificate there (TLS is on by default)
        [
            sys.executable,
            "-m",
            "sluice",
            "--rm",
            cluster.info["rm"],
            "--dir",
            str(cluster.directory),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["job", "job-999999"], "job 'job-999999' not found"),
        (["kill", "job-999999"], "job 'job-999999' not found"),
        (["submit", "/nonexistent.yaml"], "/nonexistent.yaml: No such file or directory"),
    ],
)
def test_cli_prints_one_line_and_fails(cluster: Cluster, args: list[str], message: str) -> None:
    result = _sluice(cluster, *args)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [f"sluice: error: {message}"]
    assert "Traceback" not in result.stderr


def test_cli_submit_of_bad_file_names_file_and_field(cluster: Cluster, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\nphases: [{name: a, tasks: -1, command: ['true'], resources: {cpu: 1, memory_mb: 1}}]\n"
    )
    result = _sluice(cluster, "submit", str(bad))
    assert result.returncode == 2
    assert (
        result.stderr.strip() == f"sluice: error: {bad}: phases[0].tasks: must be positive, got -1"
    )


def test_cli_submit_wait_json_and_listing(cluster: Cluster, tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(job_spec("cli-ok", [phase("only", 1, "echo hello from sluice")]))
    result = _sluice(cluster, "submit", str(good), "--wait", "--json")
    assert result.returncode == 0, result.stderr
    import json

    summary = json.loads(result.stdout)
    assert summary["state"] == "succeeded"
    logs = _sluice(cluster, "logs", summary["job_id"], "only-0")
    assert logs.stdout == "hello from sluice\n"
    listing = json.loads(_sluice(cluster, "jobs", "--json").stdout)
    assert summary["job_id"] in {job["job_id"] for job in listing}
    nodes = json.loads(_sluice(cluster, "nodes", "--json").stdout)
    assert [n["state"] for n in nodes] == ["ready"]


def test_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sluice", "--rm", "127.0.0.1:1", "jobs"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("sluice: error: cannot reach 127.0.0.1:1")
    assert len(result.stderr.strip().splitlines()) == 1


def test_rm_and_agents_serve_health_and_reflection(cluster: Cluster) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    from plumbing.rpc import channel

    for address, service in [
        (cluster.info["rm"], "sluice.v1.JobService"),
        (cluster.info["nodes"][0]["address"], "sluice.v1.AgentService"),
    ]:
        ch = channel(address, cluster.client.tls)
        try:
            health = health_pb2_grpc.HealthStub(ch)
            for name in ("", service):
                answer = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING
            reflection = reflection_pb2_grpc.ServerReflectionStub(ch)
            replies = reflection.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
            )
            listed = {s.name for reply in replies for s in reply.list_services_response.service}
            assert service in listed
        finally:
            ch.close()


def test_cli_run_drives_the_job_from_the_client(cluster: Cluster, tmp_path: Path) -> None:
    spec = tmp_path / "client.yaml"
    spec.write_text(
        job_spec("client-mode", [phase("a", 2, "echo a"), phase("b", 1, "echo b", after=["a"])])
    )
    result = _sluice(cluster, "run", str(spec))
    assert result.returncode == 0, result.stderr
    job_id = result.stderr.split()[1].rstrip(";")
    detail = cluster.job(job_id)
    assert detail.summary.client_mode
    assert detail.summary.state == pb.JOB_SUCCEEDED
    assert not detail.summary.master_node  # no job master was started on a node


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["local", "up", "--kafka", "bad"], "--kafka: expected host:port, got 'bad'"),
        (
            ["local", "up", "--mqtt", "tcp://x"],
            "--mqtt: expected mqtt://HOST[:PORT] or mqtts://HOST[:PORT] (TLS), got 'tcp://x'",
        ),
        (["local", "up", "--period", "0"], "--period: must be positive"),
        (["aggregator"], "--kafka: required (the broker agents publish metrics to)"),
        (["aggregator", "--kafka", "h:1", "--window", "1"], "--window: must be at least 2 samples"),
        (
            ["aggregator", "--kafka", "h:1", "--influx-url", "ftp://x"],
            "--influx-url: 'ftp://x': expected http(s)://[user:pass@]host:port[/database]",
        ),
        (["rm", "--kafka", "h:x"], "--kafka: expected host:port, got 'h:x'"),
        (
            ["agent", "--rm", "h:1", "--metrics-interval", "0", "--insecure"],
            "--metrics-interval: must be positive",
        ),
    ],
)
def test_data_plane_flags_are_refused_in_one_line_before_anything_starts(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sluice", "--dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"sluice: error: {message}"
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cluster.json").exists()
    assert not (tmp_path / "logs").exists()  # nothing was started
