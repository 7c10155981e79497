"""The RM signs each grant for the node's agent, with the key it gives that agent alone."""

from __future__ import annotations

from plumbing import grants
from policies.scheduling.resources import Resources
from resource_manager.service import RMState
from sluice_pb import resource_manager_pb2 as rm_pb
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
