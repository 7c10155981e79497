"""Who may call what, against a real local cluster (TLS on): every RPC of the RM, the agents and
the aggregator, called with a certificate of every role; and the remote code execution of issue
10 reproduced, which must run nothing."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from aggregator.access import ACCESS as AGGREGATOR_ACCESS
from node_agent.access import ACCESS as AGENT_ACCESS
from plumbing import bearer, grants, tls
from plumbing.grants import Purpose
from plumbing.rpc import channel
from plumbing.tls import ClientTls, Identity, Role
from policies.scheduling.resources import Resources
from resource_manager.access import ACCESS as RM_ACCESS
from sluice.client import RMClient
from sluice_pb import aggregator_pb2 as apb
from sluice_pb import common_pb2 as pb
from sluice_pb import node_agent_pb2 as agent_pb
from sluice_pb import node_agent_pb2_grpc as agent_grpc
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.integration.cluster.harness import (
    Cluster,
    job_spec,
    phase,
    running_cluster,
    wait_until,
)

pytestmark = pytest.mark.integration

REFUSALS = {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}

# Every caller: one certificate per role, from the cluster's own CA.
CALLERS = {
    "rm": Identity(Role.RM, "rm"),
    "agent": Identity(Role.AGENT, "node-1"),
    "aggregator": Identity(Role.AGGREGATOR, "aggregator"),
    "client": Identity(Role.CLIENT, "bob"),
    "admin": Identity(Role.ADMIN, "carol"),
    "jobmaster": Identity(Role.JOB_MASTER, "job-999999"),  # issued by the RM, as to a job master
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory, "cluster-access")


@pytest.fixture(scope="module")
def credentials(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, ClientTls]:
    authority = tls.load_ca(cluster.directory / "tls" / "ca")
    out = tmp_path_factory.mktemp("callers")
    found = {}
    for name, identity in CALLERS.items():
        if identity.role is Role.JOB_MASTER:
            _job_master_dir(cluster, identity.name, out / name)
        else:
            tls.issue(authority, identity, out / name)
        found[name] = ClientTls.of(tls.load_tls_dir(out / name))
    return found


def _job_master_dir(cluster: Cluster, job_id: str, out: Path) -> Path:
    """A TLS directory as an agent writes one for the job master of ``job_id``."""
    tls_root = cluster.directory / "tls"
    chain, key = tls.issue_job_master(tls.load_job_master_ca(tls_root / "rm"), job_id)
    tls.write_tls_dir(out, (tls_root / "ca" / tls.CA_CERT).read_bytes(), chain, key)
    return out


# (server, method, request, kind): harmless requests, refused by the handler when allowed (unknown
# jobs, invalid specs, another agent instance), so no call changes the cluster.
RM_CALLS: list[tuple[str, str, Message, str]] = [
    ("rm", "JobService/SubmitJob", rm_pb.SubmitJobRequest(spec_yaml="name: x\nphases: []\n"), "uu"),
    ("rm", "JobService/ListJobs", rm_pb.ListJobsRequest(), "uu"),
    ("rm", "JobService/GetJob", rm_pb.GetJobRequest(job_id="job-999999"), "uu"),
    ("rm", "JobService/WatchJob", rm_pb.GetJobRequest(job_id="job-999999"), "us"),
    ("rm", "JobService/KillJob", rm_pb.GetJobRequest(job_id="job-999999"), "uu"),
    (
        "rm",
        "JobService/ChangeTask",
        rm_pb.ChangeTaskRequest(job_id="job-999999", task_id="t"),
        "uu",
    ),
    ("rm", "JobService/ListNodes", rm_pb.ListNodesRequest(), "uu"),
    ("rm", "JobService/ListQueues", rm_pb.ListQueuesRequest(), "uu"),
    ("rm", "JobService/GetClusterInfo", rm_pb.GetClusterInfoRequest(), "uu"),
    ("rm", "JobService/GetSprint", rm_pb.GetSprintRequest(), "uu"),
    (
        "rm",
        "NodeService/RegisterNode",
        rm_pb.RegisterNodeRequest(node_id="node-1", instance_id="x"),
        "uu",
    ),
    (
        "rm",
        "NodeService/Heartbeat",
        rm_pb.HeartbeatRequest(node_id="node-1", instance_id="x"),
        "uu",
    ),
    (
        "rm",
        "NodeService/HeartbeatStream",
        rm_pb.HeartbeatRequest(node_id="node-1", instance_id="x"),
        "ss",
    ),
    ("rm", "NodeService/ReportTaskEvents", rm_pb.ReportTaskEventsRequest(node_id="node-1"), "uu"),
    ("rm", "MasterService/RegisterMaster", rm_pb.RegisterMasterRequest(job_id="job-999999"), "uu"),
    ("rm", "MasterService/Allocate", rm_pb.AllocateRequest(job_id="job-999999"), "uu"),
    ("rm", "MasterService/FinishJob", rm_pb.FinishJobRequest(job_id="job-999999"), "uu"),
]
AGENT_CALLS: list[tuple[str, str, Message, str]] = [
    # no command: refused by the handler when the caller may start tasks
    ("agent", "AgentService/StartTask", agent_pb.StartTaskRequest(job_id="job-999999"), "uu"),
    (
        "agent",
        "AgentService/StopTask",
        agent_pb.TaskRef(job_id="job-999999", task_id="t", attempt=1),
        "uu",
    ),
    ("agent", "AgentService/SuspendTask", agent_pb.TaskRef(job_id="job-999999", task_id="t"), "uu"),
    ("agent", "AgentService/ResumeTask", agent_pb.TaskRef(job_id="job-999999", task_id="t"), "uu"),
    ("agent", "AgentService/ResizeTask", agent_pb.ResizeTaskRequest(), "uu"),
    ("agent", "AgentService/ListTasks", agent_pb.ListTasksRequest(), "uu"),
    ("agent", "AgentService/GetTaskLogs", agent_pb.TaskRef(job_id="job-999999", task_id="t"), "us"),
    ("agent", "AgentService/Drain", agent_pb.DrainRequest(), "uu"),
    # no command: refused by the handler when the caller may queue speculative tasks
    (
        "agent",
        "AgentService/EnqueueSpeculative",
        agent_pb.EnqueueSpeculativeRequest(task=agent_pb.StartTaskRequest(job_id="job-999999")),
        "uu",
    ),
    (  # no resources: refused by the handler
        "agent",
        "AgentService/UpgradeSpeculative",
        agent_pb.UpgradeSpeculativeRequest(task=agent_pb.TaskRef(job_id="job-999999")),
        "uu",
    ),
    (  # lists nothing: the job has no task there
        "agent",
        "AgentService/ListSpeculative",
        agent_pb.ListSpeculativeRequest(job_id="job-999999"),
        "uu",
    ),
]
AGGREGATOR_CALLS: list[tuple[str, str, Message, str]] = [
    ("aggregator", "AggregatorService/GetMachineList", apb.GetMachineListRequest(), "uu"),
    ("aggregator", "AggregatorService/GetCandidates", apb.GetCandidatesRequest(), "uu"),
    ("aggregator", "AggregatorService/ListMachines", apb.ListMachinesRequest(), "uu"),
]
PACKAGES = {"rm": "sluice.v1", "agent": "sluice.v1", "aggregator": "sluice.v1"}
ALL_ACCESS = {**RM_ACCESS, **AGENT_ACCESS, **AGGREGATOR_ACCESS}


def _method_name(package: str, method: str) -> str:
    return f"/{package}.{method}"


def _address(cluster: Cluster, server: str) -> str:
    if server == "rm":
        return str(cluster.info["rm"])
    if server == "agent":
        return str(cluster.info["nodes"][0]["address"])
    return str(cluster.info["data_plane"]["aggregator"])


def _call(address: str, method: str, request: Message, kind: str, caller: ClientTls | None) -> None:
    """Make the call; raise its RpcError, if any."""
    ch = channel(address, caller)
    try:
        serialize: Any = type(request).SerializeToString
        if kind == "uu":
            ch.unary_unary(method, request_serializer=serialize)(request, timeout=20)
        elif kind == "us":
            for _ in ch.unary_stream(method, request_serializer=serialize)(request, timeout=20):
                break
        else:
            answers = ch.stream_stream(method, request_serializer=serialize)(
                iter([request]), timeout=20
            )
            for _ in answers:
                break
    finally:
        ch.close()


def _cases() -> list[Any]:
    """Every (role, call), but an allowed Drain: it would stop the test's agent (an admin's
    Drain is exercised by every `sluice local down`)."""
    cases = []
    for server, method, request, kind in RM_CALLS + AGENT_CALLS + AGGREGATOR_CALLS:
        full = _method_name(PACKAGES[server], method)
        for role in sorted(CALLERS):
            if method == "AgentService/Drain" and CALLERS[role].role in ALL_ACCESS[full]:
                continue
            cases.append(pytest.param(role, server, method, request, kind, id=f"{method}-{role}"))
    return cases


@pytest.mark.parametrize(("role", "server", "method", "request_message", "kind"), _cases())
def test_every_rpc_admits_exactly_the_roles_its_table_names(
    cluster: Cluster,
    credentials: dict[str, ClientTls],
    role: str,
    server: str,
    method: str,
    request_message: Message,
    kind: str,
) -> None:
    full = _method_name(PACKAGES[server], method)
    allowed = CALLERS[role].role in ALL_ACCESS[full]
    request_message = _with_passes(cluster, request_message)
    try:
        _call(_address(cluster, server), full, request_message, kind, credentials[role])
    except grpc.RpcError as error:
        refused = error.code() in REFUSALS
        assert refused != allowed, f"{role} on {method}: {error.code()} {error.details()}"
        if refused:
            assert error.code() is grpc.StatusCode.PERMISSION_DENIED
            assert error.details() == (
                f"{method.split('/')[1]}: {'an' if role[0] in 'aeiou' else 'a'} "
                f"{CALLERS[role].role.value} may not call it "
                f"(allowed: {', '.join(sorted(r.value for r in ALL_ACCESS[full])) or 'no one: the RM acts on its own'})"
            )
        return
    assert allowed, f"{role} on {method}: not refused"


def test_every_rpc_of_every_service_has_an_access_rule() -> None:
    from google.protobuf.descriptor import FileDescriptor

    files: list[FileDescriptor] = [
        rm_pb.DESCRIPTOR,
        agent_pb.DESCRIPTOR,
        apb.DESCRIPTOR,
        pb.DESCRIPTOR,
    ]
    methods = {
        f"/{service.full_name}/{method.name}"
        for file in files
        for service in file.services_by_name.values()
        for method in service.methods
    }
    assert methods == set(ALL_ACCESS)
    tested = {
        _method_name(PACKAGES[s], m) for s, m, _, _ in RM_CALLS + AGENT_CALLS + AGGREGATOR_CALLS
    }
    assert tested == methods  # and the table above calls each of them


def test_an_agent_speaks_only_for_its_own_node(cluster: Cluster, tmp_path: Path) -> None:
    authority = tls.load_ca(cluster.directory / "tls" / "ca")
    tls.issue(authority, Identity(Role.AGENT, "node-9"), tmp_path / "node-9")
    intruder = ClientTls.of(tls.load_tls_dir(tmp_path / "node-9"))
    request = rm_pb.HeartbeatRequest(node_id="node-1", instance_id="x")
    with pytest.raises(grpc.RpcError) as caught:
        _call(str(cluster.info["rm"]), "/sluice.v1.NodeService/Heartbeat", request, "uu", intruder)
    assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert caught.value.details() == (
        "node_id: agent 'node-9' may speak only for its own node, not 'node-1'"
    )


@pytest.mark.parametrize(
    ("server", "method", "request_message"),
    [
        ("rm", "MasterService/RegisterMaster", rm_pb.RegisterMasterRequest(job_id="job-000002")),
        ("rm", "MasterService/Allocate", rm_pb.AllocateRequest(job_id="job-000002")),
        ("rm", "MasterService/FinishJob", rm_pb.FinishJobRequest(job_id="job-000002")),
        (
            "agent",
            "AgentService/StartTask",
            agent_pb.StartTaskRequest(job_id="job-000002", task_id="t", command=["true"]),
        ),
        ("agent", "AgentService/StopTask", agent_pb.TaskRef(job_id="job-000002", task_id="t")),
        (
            "agent",
            "AgentService/EnqueueSpeculative",
            agent_pb.EnqueueSpeculativeRequest(
                task=agent_pb.StartTaskRequest(job_id="job-000002", task_id="t-0", command=["true"])
            ),
        ),
        (
            "agent",
            "AgentService/UpgradeSpeculative",
            agent_pb.UpgradeSpeculativeRequest(task=agent_pb.TaskRef(job_id="job-000002")),
        ),
        (
            "agent",
            "AgentService/ListSpeculative",
            agent_pb.ListSpeculativeRequest(job_id="job-000002"),
        ),
    ],
)
def test_the_job_master_of_job_a_cannot_touch_job_b(
    cluster: Cluster, tmp_path: Path, server: str, method: str, request_message: Message
) -> None:
    job_a = ClientTls.of(tls.load_tls_dir(_job_master_dir(cluster, "job-000001", tmp_path / "a")))
    with pytest.raises(grpc.RpcError) as caught:
        _call(_address(cluster, server), f"/sluice.v1.{method}", request_message, "uu", job_a)
    assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert caught.value.details() == (
        "job_id: the job master of job-000001 may act only for its own job, not 'job-000002'"
    )


def test_the_remote_code_execution_of_issue_10_runs_nothing(
    cluster: Cluster, credentials: dict[str, ClientTls], tmp_path: Path
) -> None:
    """A caller that is neither the RM nor a job master asks an agent to run a shell command."""
    target = Path(f"/tmp/sluice-rce-{uuid.uuid4().hex[:12]}")
    request = agent_pb.StartTaskRequest(
        job_id="evil",
        task_id="pwn",
        attempt=1,
        allocation_id="none",
        command=["/bin/sh", "-c", f"id > {target}"],
        resources=pb.Resources(cpu=0.1, memory_mb=16),
    )
    tls.init_ca(tmp_path / "other", "elsewhere")
    tls.issue(tls.load_ca(tmp_path / "other"), Identity(Role.ADMIN, "eve"), tmp_path / "eve")
    foreign = ClientTls.of(tls.load_tls_dir(tmp_path / "eve"))
    agent = str(cluster.info["nodes"][0]["address"])
    callers = (None, foreign, credentials["aggregator"], credentials["rm"], credentials["agent"])
    for caller in callers:
        with pytest.raises(grpc.RpcError) as caught:
            _call(agent, "/sluice.v1.AgentService/StartTask", request, "uu", caller)
        assert caught.value.code() in {*REFUSALS, grpc.StatusCode.UNAVAILABLE}
    live = cluster.agent_tasks(agent)
    assert not [t for t in live if t.task.job_id == "evil"]  # the agent started nothing
    assert not target.exists()


def test_a_client_kills_only_their_own_jobs_and_an_admin_any(
    cluster: Cluster, credentials: dict[str, ClientTls], tmp_path: Path
) -> None:
    authority = tls.load_ca(cluster.directory / "tls" / "ca")
    tls.issue(authority, Identity(Role.CLIENT, "alice"), tmp_path / "alice")
    alice = RMClient.connect(
        str(cluster.info["rm"]), ClientTls.of(tls.load_tls_dir(tmp_path / "alice"))
    )
    bob = RMClient.connect(str(cluster.info["rm"]), credentials["client"])
    carol = RMClient.connect(str(cluster.info["rm"]), credentials["admin"])
    try:
        spec = job_spec("alices", [phase("wait", 1, "sleep 600")])
        mine, theirs = (str(alice.submit(spec).job_id) for _ in range(2))
        assert (
            alice.jobs.GetJob(rm_pb.GetJobRequest(job_id=mine), timeout=10).summary.owner == "alice"
        )
        with pytest.raises(grpc.RpcError) as caught:
            bob.jobs.KillJob(rm_pb.GetJobRequest(job_id=mine), timeout=10)
        assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert caught.value.details() == (
            f"job_id: {mine} belongs to alice; a client may act only on their own jobs"
        )
        with pytest.raises(grpc.RpcError) as caught:  # nor drive it as its job master
            bob_master = rm_pb.AllocateRequest(job_id=mine)
            _call(
                str(cluster.info["rm"]),
                "/sluice.v1.MasterService/Allocate",
                bob_master,
                "uu",
                credentials["client"],
            )
        assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert alice.jobs.KillJob(rm_pb.GetJobRequest(job_id=mine), timeout=10).kill_requested
        assert carol.jobs.KillJob(rm_pb.GetJobRequest(job_id=theirs), timeout=10).kill_requested
    finally:
        for client in (alice, bob, carol):
            client.close()


def _node_key(cluster: Cluster, node_id: str) -> bytes:
    """A node's grant key, as the cluster's RM derives it (its key is in the cluster's files)."""
    rm_key = (cluster.directory / "tls" / "rm" / tls.KEY).read_bytes()
    return grants.node_key(grants.grant_secret(rm_key), node_id)


def _grant(cluster: Cluster, node_id: str, job_id: str, allocation_id: str, cpu: float) -> bytes:
    """A grant token exactly as the cluster's RM signs one."""
    return grants.sign(_node_key(cluster, node_id), job_id, allocation_id, Resources(cpu, 16))


def _pass(
    cluster: Cluster, job_id: str, node_id: str = "", purpose: Purpose = Purpose.SPECULATIVE
) -> bytes:
    """A job pass exactly as the cluster's RM signs one (for the first node by default)."""
    node_id = node_id or str(cluster.info["nodes"][0]["node_id"])
    return grants.sign_pass(_node_key(cluster, node_id), purpose, job_id)


def _with_passes(cluster: Cluster, request: Message) -> Message:
    """The table's request with the RM's pass for its job where it takes one, so that a caller
    the table admits gets past the pass check to the handler's own answer."""
    copy = type(request)()
    copy.CopyFrom(request)
    if isinstance(copy, agent_pb.ListSpeculativeRequest):
        copy.speculative_pass = _pass(cluster, copy.job_id)
    elif isinstance(copy, agent_pb.TaskRef):
        copy.log_pass = _pass(cluster, copy.job_id, purpose=Purpose.LOGS)
    return copy


def _start(job_id: str, target: Path, token: bytes, cpu: float = 0.1) -> agent_pb.StartTaskRequest:
    return agent_pb.StartTaskRequest(
        job_id=job_id,
        task_id="work-0",
        attempt=1,
        allocation_id="granted-1",
        command=["/bin/sh", "-c", f"id > {target}; sleep 600"],
        resources=pb.Resources(cpu=cpu, memory_mb=16),
        grant_token=token,
    )


# (what is wrong, token's node, token's job, token's cpu, request's cpu, the refusal's start)
FORGED_GRANTS = [
    ("no token", None, "", 0.1, 0.1, "grant_token: missing"),
    ("another node's", "node-2", "job-000777", 0.1, 0.1, "grant_token: not the resource manager's"),
    ("another job's", "node-1", "job-000778", 0.1, 0.1, "grant_token: not the resource manager's"),
    (
        "a smaller grant",
        "node-1",
        "job-000777",
        0.1,
        2.0,
        "grant_token: not the resource manager's",
    ),
]


@pytest.mark.parametrize(
    ("node", "token_job", "token_cpu", "cpu", "refusal"),
    [pytest.param(*case[1:], id=case[0]) for case in FORGED_GRANTS],
)
def test_a_task_starts_only_in_a_container_granted_to_its_job(
    cluster: Cluster,
    tmp_path: Path,
    node: str | None,
    token_job: str,
    token_cpu: float,
    cpu: float,
    refusal: str,
) -> None:
    """The job master of job-000777 may start its own job's tasks, but only with the RM's grant
    of that very container, on this node, at that size."""
    master = ClientTls.of(tls.load_tls_dir(_job_master_dir(cluster, "job-000777", tmp_path / "m")))
    agent = str(cluster.info["nodes"][0]["address"])
    token = b"" if node is None else _grant(cluster, node, token_job, "granted-1", token_cpu)
    target = Path(f"/tmp/sluice-grant-{uuid.uuid4().hex[:12]}")
    with pytest.raises(grpc.RpcError) as caught:
        request = _start("job-000777", target, token, cpu)
        _call(agent, "/sluice.v1.AgentService/StartTask", request, "uu", master)
    assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert caught.value.details().startswith(refusal)
    assert not target.exists()


def test_a_granted_task_starts_and_only_its_grant_holder_stops_it(
    cluster: Cluster, credentials: dict[str, ClientTls]
) -> None:
    """A person's client-mode job master starts a task with a real grant; another person cannot
    stop it without the container's token."""
    agent = str(cluster.info["nodes"][0]["address"])
    node_id = str(cluster.info["nodes"][0]["node_id"])
    token = _grant(cluster, node_id, "job-000779", "granted-1", 0.1)
    target = Path(f"/tmp/sluice-grant-{uuid.uuid4().hex[:12]}")
    bob = credentials["client"]
    ch = channel(agent, bob)
    try:
        start = ch.unary_unary(
            "/sluice.v1.AgentService/StartTask",
            request_serializer=agent_pb.StartTaskRequest.SerializeToString,
            response_deserializer=agent_pb.StartTaskResponse.FromString,
        )
        started = start(_start("job-000779", target, token), timeout=20)
    finally:
        ch.close()
    try:
        # Judged by the agent's answer, not by the task's output: the RM knows no job-000779,
        # so the agent stops the task at its next heartbeat, which on a loaded host can come
        # before the task's first instruction (it did, in a CI run at load 9).
        assert started.status.state == pb.TASK_RUNNING, started
        assert started.status.allocation_id == "granted-1"
        ref = agent_pb.TaskRef(job_id="job-000779", task_id="work-0", attempt=1)
        with pytest.raises(grpc.RpcError) as caught:
            _call(agent, "/sluice.v1.AgentService/StopTask", ref, "uu", bob)
        assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert caught.value.details() == (
            "grant_token: a person stops a task of job job-000779 only with the grant token of "
            "its container granted-1"
        )
    finally:
        ref = agent_pb.TaskRef(job_id="job-000779", task_id="work-0", attempt=1, grant_token=token)
        _call(agent, "/sluice.v1.AgentService/StopTask", ref, "uu", bob)
        target.unlink(missing_ok=True)


def _token_dir(authority: tls.Authority, ca_pem: bytes, name: str, out: Path) -> Path:
    token, _ = bearer.issue_token(authority, Identity(Role.CLIENT, name))
    bearer.write_token_dir(out, ca_pem, token)
    return out


def test_a_person_with_a_bearer_token_acts_as_themselves_on_the_token_port(
    cluster: Cluster, tmp_path: Path
) -> None:
    ca_dir = cluster.directory / "tls" / "ca"
    ca_pem = (ca_dir / tls.CA_CERT).read_bytes()
    dana = bearer.load_token_dir(_token_dir(tls.load_ca(ca_dir), ca_pem, "dana", tmp_path / "d"))
    address = str(cluster.info["rm_tokens"])
    client = RMClient.connect(address, dana)
    try:
        job_id = str(client.submit(job_spec("danas", [phase("wait", 1, "sleep 600")])).job_id)
        assert client.jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10).summary.owner == (
            "dana"
        )
        client.jobs.KillJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10)
    finally:
        client.close()
    # A token names a person: nothing a node or a job master does.
    with pytest.raises(grpc.RpcError) as caught:
        request = rm_pb.HeartbeatRequest(node_id="node-1", instance_id="x")
        _call(address, "/sluice.v1.NodeService/Heartbeat", request, "uu", dana)
    assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED


def test_the_token_port_refuses_no_token_and_a_foreign_one(
    cluster: Cluster, tmp_path: Path
) -> None:
    ca_pem = (cluster.directory / "tls" / "ca" / tls.CA_CERT).read_bytes()
    other = tls.init_ca(tmp_path / "other", "elsewhere")
    forged = bearer.load_token_dir(_token_dir(other, ca_pem, "mallory", tmp_path / "m"))
    address = str(cluster.info["rm_tokens"])
    request = rm_pb.ListJobsRequest()
    for credentials, refusal in [
        (ClientTls(ca_pem), "ListJobs: no sluice:// identity"),
        (forged, "authorization: bearer token: not signed by this cluster's CA"),
    ]:
        with pytest.raises(grpc.RpcError) as caught:
            _call(address, "/sluice.v1.JobService/ListJobs", request, "uu", credentials)
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert caught.value.details().startswith(refusal)


# ---------------------------------------------------------------- issue 27 item 1: speculative work
# needs the RM's speculative pass for its job on that node, whoever calls; logs a log pass.

VICTIM = "job-000880"  # someone else's job (the agent knows no owners: the pass is the proof)


def _speculative(job_id: str, target: Path, cpu: float = 0.1) -> agent_pb.StartTaskRequest:
    return agent_pb.StartTaskRequest(
        job_id=job_id,
        task_id="work-0",
        attempt=1,
        command=["/bin/sh", "-c", f"id > {target}; sleep 600"],
        resources=pb.Resources(cpu=cpu, memory_mb=16),
    )


def _listed(cluster: Cluster, agent: str, job_id: str, admin: ClientTls) -> list[Any]:
    """The job's speculative tasks on the agent, asked with the job's real pass."""
    ch = channel(agent, admin)
    try:
        request = agent_pb.ListSpeculativeRequest(
            job_id=job_id, speculative_pass=_pass(cluster, job_id)
        )
        return list(agent_grpc.AgentServiceStub(ch).ListSpeculative(request, timeout=20).tasks)
    finally:
        ch.close()


# (who calls, with what pass): every role's certificate, none with the victim's pass for this node
STRANGERS = [
    ("client", "none"),
    ("client", "own job"),  # bob's pass for a job of his own
    ("client", "other node"),  # the victim's pass, but for another node
    ("client", "logs"),  # the victim's log pass, not a speculative one
    ("client", "grant"),  # a grant token of the victim's, not a pass
    ("admin", "none"),  # an admin's speculative work is bounded like everyone's: no pass, no queue
    ("jobmaster-other", "own job"),  # another job's job master, with its own job's real pass
    ("jobmaster-victim", "none"),  # the job's own job master, without the RM's pass
    ("agent", "victim"),
    ("aggregator", "victim"),
    ("rm", "victim"),
    ("broker", "victim"),
]


def _stranger_pass(cluster: Cluster, kind: str) -> bytes:
    return {
        "none": b"",
        "own job": _pass(cluster, "job-000881"),
        "other node": _pass(cluster, VICTIM, "node-2"),
        "logs": _pass(cluster, VICTIM, purpose=Purpose.LOGS),
        "grant": _grant(cluster, str(cluster.info["nodes"][0]["node_id"]), VICTIM, "", 0.1),
        "victim": _pass(cluster, VICTIM),
    }[kind]


def _stranger(
    cluster: Cluster, credentials: dict[str, ClientTls], who: str, out: Path
) -> ClientTls:
    if who == "jobmaster-other":
        return ClientTls.of(tls.load_tls_dir(_job_master_dir(cluster, "job-000881", out)))
    if who == "jobmaster-victim":
        return ClientTls.of(tls.load_tls_dir(_job_master_dir(cluster, VICTIM, out)))
    if who == "broker":
        authority = tls.load_ca(cluster.directory / "tls" / "ca")
        tls.issue(authority, Identity(Role.BROKER, "mosquitto"), out)
        return ClientTls.of(tls.load_tls_dir(out))
    return credentials[who]


@pytest.mark.parametrize(
    ("who", "kind"), [pytest.param(*c, id=f"{c[0]}-{c[1]}") for c in STRANGERS]
)
def test_a_stranger_queues_no_speculative_task_for_someone_elses_job(
    cluster: Cluster, credentials: dict[str, ClientTls], tmp_path: Path, who: str, kind: str
) -> None:
    """Issue 27 item 1: a client certificate of a user who owns nothing queued a task under
    another user's job, and it ran as root.  Now, whoever calls, nothing is queued or run."""
    agent = str(cluster.info["nodes"][0]["address"])
    target = Path(f"/tmp/sluice-speculative-{uuid.uuid4().hex[:12]}")
    request = agent_pb.EnqueueSpeculativeRequest(
        task=_speculative(VICTIM, target), speculative_pass=_stranger_pass(cluster, kind)
    )
    caller = _stranger(cluster, credentials, who, tmp_path / "caller")
    with pytest.raises(grpc.RpcError) as caught:
        _call(agent, "/sluice.v1.AgentService/EnqueueSpeculative", request, "uu", caller)
    assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED, caught.value.details()
    assert not _listed(cluster, agent, VICTIM, credentials["admin"])  # nothing queued
    assert not [t for t in cluster.agent_tasks(agent) if t.task.job_id == VICTIM]  # nor run
    assert not target.exists()


def test_a_stranger_cannot_cancel_or_list_a_queued_speculative_task(
    cluster: Cluster, credentials: dict[str, ClientTls], tmp_path: Path
) -> None:
    """The pass holder (here alice, whose client-mode job master the RM gave it) queues a task
    too big to start, so it stays queued; bob and another job's job master cannot cancel it
    (the agent used to cancel a queued task before any check) nor list it; alice can."""
    agent = str(cluster.info["nodes"][0]["address"])
    authority = tls.load_ca(cluster.directory / "tls" / "ca")
    tls.issue(authority, Identity(Role.CLIENT, "alice"), tmp_path / "alice")
    alice = ClientTls.of(tls.load_tls_dir(tmp_path / "alice"))
    job_id = "job-000882"
    target = Path(f"/tmp/sluice-speculative-{uuid.uuid4().hex[:12]}")
    enqueue = agent_pb.EnqueueSpeculativeRequest(
        task=_speculative(job_id, target, cpu=64.0), speculative_pass=_pass(cluster, job_id)
    )
    ch = channel(agent, alice)
    stub = agent_grpc.AgentServiceStub(ch)
    ref = agent_pb.TaskRef(job_id=job_id, task_id="work-0", attempt=1)
    try:
        answer = stub.EnqueueSpeculative(enqueue, timeout=20)
        assert answer.accepted and answer.task.state == pb.TASK_PENDING, answer
        other = ClientTls.of(
            tls.load_tls_dir(_job_master_dir(cluster, "job-000881", tmp_path / "j"))
        )
        for caller, proof in [
            (credentials["client"], b""),
            (credentials["client"], _pass(cluster, "job-000881")),
            (credentials["client"], _pass(cluster, job_id, purpose=Purpose.LOGS)),
            (other, _pass(cluster, "job-000881")),
        ]:
            stop = agent_pb.TaskRef(
                job_id=job_id, task_id="work-0", attempt=1, speculative_pass=proof
            )
            with pytest.raises(grpc.RpcError) as caught:
                _call(agent, "/sluice.v1.AgentService/StopTask", stop, "uu", caller)
            assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
            listing = agent_pb.ListSpeculativeRequest(job_id=job_id, speculative_pass=proof)
            with pytest.raises(grpc.RpcError) as caught:
                _call(agent, "/sluice.v1.AgentService/ListSpeculative", listing, "uu", caller)
            assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert [t.state for t in _listed(cluster, agent, job_id, alice)] == [pb.TASK_PENDING]
        ref.speculative_pass = _pass(cluster, job_id)
        assert stub.StopTask(ref, timeout=20).state == pb.TASK_KILLED
        assert [t.state for t in _listed(cluster, agent, job_id, alice)] == [pb.TASK_KILLED]
    finally:
        ref.speculative_pass = _pass(cluster, job_id)
        with contextlib.suppress(grpc.RpcError):  # (cancelled above already)
            stub.StopTask(ref, timeout=20)
        ch.close()
    assert not target.exists()


def test_only_the_owner_and_admins_read_a_tasks_logs(
    cluster: Cluster, credentials: dict[str, ClientTls], tmp_path: Path
) -> None:
    """GetTaskLogs was open to every person, whatever the job: now it needs the job's log
    pass, which GetJob gives the job's owner and admins only (`sluice logs` passes it on)."""
    authority = tls.load_ca(cluster.directory / "tls" / "ca")
    tls.issue(authority, Identity(Role.CLIENT, "alice"), tmp_path / "alice")
    alice = RMClient.connect(
        str(cluster.info["rm"]), ClientTls.of(tls.load_tls_dir(tmp_path / "alice"))
    )
    people = {
        "alice": alice,
        "bob": RMClient.connect(str(cluster.info["rm"]), credentials["client"]),
        "carol": RMClient.connect(str(cluster.info["rm"]), credentials["admin"]),
    }
    secret = uuid.uuid4().hex
    try:
        job_id = str(alice.submit(job_spec("secrets", [phase("say", 1, f"echo {secret}")])).job_id)
        wait_until(
            lambda: (
                alice.jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10).summary.state
                == pb.JOB_SUCCEEDED
            ),
            timeout=60,
            what="alice's job to succeed",
        )

        def read(person: str, log_pass: bytes | None = None) -> bytes:
            client = people[person]
            detail = client.jobs.GetJob(rm_pb.GetJobRequest(job_id=job_id), timeout=10)
            task = detail.tasks[0]
            ref = agent_pb.TaskRef(
                job_id=job_id,
                task_id=task.task_id,
                attempt=task.attempt,
                log_pass=task.log_pass if log_pass is None else log_pass,
            )
            ch = channel(task.node_address, client.tls)
            try:
                stub = agent_grpc.AgentServiceStub(ch)
                return b"".join(c.data for c in stub.GetTaskLogs(ref, timeout=20))
            finally:
                ch.close()

        assert secret.encode() in read("alice")
        assert secret.encode() in read("carol")
        for person, log_pass in [
            ("bob", None),  # GetJob gives a stranger no pass
            ("bob", _pass(cluster, "job-000881", purpose=Purpose.LOGS)),  # another job's
            ("bob", _pass(cluster, job_id)),  # a speculative pass is no log pass
        ]:
            with pytest.raises(grpc.RpcError) as caught:
                read(person, log_pass)
            assert caught.value.code() is grpc.StatusCode.PERMISSION_DENIED
            assert caught.value.details().startswith("log_pass: ")
    finally:
        for client in people.values():
            client.close()
