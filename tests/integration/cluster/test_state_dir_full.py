"""The RM on a state directory that fills up, on a real small tmpfs (issue 27, item 6).

A unit of work whose commit the full directory refuses is rolled back in memory too (``ListJobs``
never shows the refused job), its caller gets RESOURCE_EXHAUSTED naming the cause, later units
are refused alike (never "a unit of work is already open"), and once the filesystem is grown the
RM takes changes again by itself, no restart.  Started on a full or a read-only state directory,
the RM says so in one line and exits with status 2.  Mounting needs root."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from sluice import local_cluster
from sluice_pb import common_pb2 as pb
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import (
    Cluster,
    job_spec,
    phase,
    start_cluster,
    unavailable,
    wait_until,
)

pytestmark = pytest.mark.integration

CLIENT_MODE_SPEC = job_spec("parked", [phase("p", 1, "true", cpu=0.1)])


@contextlib.contextmanager
def tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``directory`` (made), unmounted afterwards."""
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root")
    directory.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory))
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False, capture_output=True)


def _mount(*argv: str) -> None:
    done = subprocess.run(["mount", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        unavailable(f"mount {' '.join(argv)}: {done.stderr.strip()}")


def fill(directory: Path) -> None:
    """Take every free byte of the filesystem holding ``directory``."""
    chunk = b"\0" * 65536
    with (directory / "filler").open("ab", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
                break
    with contextlib.suppress(OSError), (directory / "filler-tail").open("ab", buffering=0) as out:
        while True:
            out.write(b"\0" * 512)  # the last partial chunk


@pytest.fixture
def cluster_on_tmpfs(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    directory = tmp_path / "cluster"
    with tmpfs(directory / "rm", "4m") as state:
        cluster = start_cluster(directory, "process", nodes=1)
        try:
            yield cluster, state
        finally:
            cluster.close()
            local_cluster.down(directory, lambda _: None)


def test_a_full_state_directory_refuses_changes_cleanly_and_the_rm_recovers_when_grown(
    cluster_on_tmpfs: tuple[Cluster, Path],
) -> None:
    cluster, state = cluster_on_tmpfs
    jobs = cluster.client.jobs
    before = [j.job_id for j in jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=20).jobs]
    fill(state)
    accepted: list[str] = []
    refused: grpc.RpcError | None = None
    for _ in range(1000):  # a few pages a job; the WAL has room for some at most
        request = rm_pb.SubmitJobRequest(spec_yaml=CLIENT_MODE_SPEC, client_mode=True)
        try:
            accepted.append(jobs.SubmitJob(request, timeout=30).job.job_id)
        except grpc.RpcError as error:
            refused = error
            break
    assert refused is not None, "the full state directory took every job"
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.details()
    details = refused.details() or ""
    assert details.startswith(f"state directory full: {state.resolve()}: "), details
    assert details.endswith("; nothing was changed")
    listed = [j.job_id for j in jobs.ListJobs(rm_pb.ListJobsRequest(), timeout=20).jobs]
    assert listed == before + accepted  # the refused job is nowhere: memory rolled back
    for _ in range(3):  # refused alike every time: the RM is not wedged
        with pytest.raises(grpc.RpcError) as again:
            jobs.SubmitJob(rm_pb.SubmitJobRequest(spec_yaml=CLIENT_MODE_SPEC), timeout=30)
        assert again.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, again.value.details()
    nodes = jobs.ListNodes(rm_pb.ListNodesRequest(), timeout=20).nodes
    assert [n.node_id for n in nodes] == ["node-1"]  # still serving its agent

    _mount("-o", "remount,size=64m", str(state))  # room again: no restart
    spec = job_spec("after", [phase("p", 1, "true", cpu=0.2)])
    job_id = wait_until(lambda: _submitted(cluster, spec), 30, "a submission taken again")
    final = cluster.wait_final(job_id, timeout=120)
    assert final.summary.state == pb.JOB_SUCCEEDED, final.summary.message
    log = (cluster.directory / "logs" / "rm.log").read_text(errors="replace")
    assert log.count("changes are refused until it can take them") == 1
    assert "Traceback" not in log
    assert "a unit of work is already open" not in log


def _submitted(cluster: Cluster, spec: str) -> str | None:
    try:
        return cluster.submit(spec)
    except grpc.RpcError as error:
        # (a scheduling pass may have been refused too: it comes again with the next change)
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
        return None


def _start_rm(state_dir: Path, address_file: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "sluice", "rm", "--insecure", "--listen", "127.0.0.1:0"]
    argv += ["--state-dir", str(state_dir), "--address-file", str(address_file)]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _refused_start(state_dir: Path, address_file: Path) -> str:
    """Start an RM that must refuse to start; its one error line."""
    process = _start_rm(state_dir, address_file)
    try:
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 2, stderr
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, stderr
    return errors[0]


def test_an_rm_started_on_a_full_or_read_only_state_directory_says_so_in_one_line(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "fs", "2m") as fs:
        state, address = fs / "rm", tmp_path / "rm.addr"
        rm = _start_rm(state, address)  # a state directory in use before
        try:
            wait_until(lambda: address.exists() or rm.poll() is not None, 60, "the RM up")
            assert rm.poll() is None, rm.communicate()[1]
        finally:
            os.killpg(rm.pid, signal.SIGTERM)
            rm.communicate(timeout=60)
        fill(fs)
        for directory in (state, fs / "fresh"):
            line = _refused_start(directory, tmp_path / "refused.addr")
            assert line.startswith(f"sluice: error: --state-dir: state directory full: {directory}")
        _mount("-o", "remount,ro", str(fs))
        line = _refused_start(state, tmp_path / "refused.addr")
        assert line.startswith(f"sluice: error: --state-dir: state directory read-only: {state}")
        line = _refused_start(fs / "new", tmp_path / "refused.addr")
        assert (
            line == f"sluice: error: --state-dir: cannot create {fs / 'new'}: Read-only file system"
        )
