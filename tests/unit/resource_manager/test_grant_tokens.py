"""The RM signs each grant for the node's agent, with the key it gives that agent alone."""

from __future__ import annotations

import pytest

from plumbing import grants
from plumbing.tls import Identity, Role
from policies.scheduling.jobspec import parse_job_spec
from policies.scheduling.resources import Resources
from resource_manager.rm_state import RMState
from sluice_pb import resource_manager_pb2 as rm_pb
from tests.builders import job_doc, phase_doc
from tests.unit.resource_manager.harness import add_node, at, new_core, running_job, want

SECRET = grants.grant_secret(b"the RM's key")


def _granted(secret: bytes | None) -> tuple[RMState, list[rm_pb.Allocation]]:
    driver = new_core()
    add_node(driver, "n1")
    job_id = running_job(driver)
    driver.allocate(job_id, [want(2)], [], [], 0, now=2.0)
    driver.schedule(now=2.5)
    state = RMState(driver.core, lambda: at(3.0), advertise_address="rm:1", grant_secret=secret)
    allocations = driver.core.tables.allocations_of_job(job_id)
    return state, [state.allocation_to_pb(a) for a in allocations]


def test_every_grant_carries_a_token_the_nodes_agent_verifies() -> None:
    state, granted = _granted(SECRET)
    assert granted
    key = state.node_grant_key("n1")
    assert key == grants.node_key(SECRET, "n1")
    for message in granted:
        assert grants.verify(
            key,
            message.grant_token,
            message.job_id,
            message.allocation_id,
            Resources(message.resources.cpu, message.resources.memory_mb),
        )
    assert not grants.verify(
        state.node_grant_key("n2"),
        granted[0].grant_token,
        granted[0].job_id,
        granted[0].allocation_id,
        Resources(granted[0].resources.cpu, granted[0].resources.memory_mb),
    )


def test_without_tls_there_are_no_tokens_and_no_keys() -> None:
    state, granted = _granted(None)
    assert granted and all(m.grant_token == b"" for m in granted)
    assert state.node_grant_key("n1") == b""


# Job passes (issue 27 item 1): speculative passes only for a job with a speculative block; log
# passes only to the job's owner and admins.


def _state(secret: bytes | None, speculative: bool) -> tuple[RMState, str]:
    driver = new_core()
    add_node(driver, "n1")
    extra = {"speculative": {"after_s": 0}} if speculative else {}
    spec = parse_job_spec(job_doc(phase_doc("p", 2), **extra))
    job = driver.submit(spec, client_mode=True, now=1.0, owner="alice")
    state = RMState(driver.core, lambda: at(3.0), advertise_address="rm:1", grant_secret=secret)
    return state, str(job.job_id)


@pytest.mark.parametrize(
    ("secret", "speculative", "issued"),
    [(SECRET, True, True), (SECRET, False, False), (None, True, False)],
    ids=["speculative job", "job without a speculative block", "without TLS"],
)
def test_speculative_passes_only_for_a_speculative_job(
    secret: bytes | None, speculative: bool, issued: bool
) -> None:
    state, job_id = _state(secret, speculative)
    passes = state.speculative_passes(job_id, ["n1", "n2"])
    if not issued:
        assert passes == {}
        return
    assert set(passes) == {"n1", "n2"}
    for node_id, token in passes.items():
        key = grants.node_key(SECRET, node_id)
        assert grants.verify_pass(key, token, grants.Purpose.SPECULATIVE, job_id)
    assert state.speculative_passes(job_id, []) == {}


@pytest.mark.parametrize(
    ("identity", "readable"),
    [
        (Identity(Role.CLIENT, "alice"), True),
        (Identity(Role.ADMIN, "carol"), True),
        (Identity(Role.CLIENT, "bob"), False),
        (Identity(Role.JOB_MASTER, "job-000001"), False),
        (None, False),
    ],
)
def test_log_passes_only_to_the_owner_and_admins(identity: Identity | None, readable: bool) -> None:
    state, job_id = _state(SECRET, False)
    tasks = [rm_pb.TaskInfo(task_id="p-0", node_id="n1"), rm_pb.TaskInfo(task_id="p-1")]
    state.add_log_passes(state.core.job(job_id), identity, tasks)
    if not readable:
        assert all(t.log_pass == b"" for t in tasks)
        return
    key = grants.node_key(SECRET, "n1")
    assert grants.verify_pass(key, tasks[0].log_pass, grants.Purpose.LOGS, job_id)
    assert tasks[1].log_pass == b""  # not run anywhere yet
