"""The RM's one shell (resource_manager/shell.py): a unit of work is whole or nothing, and its
effects say what its driver must carry out (who must hear, whether a pass is due, what was
decided)."""

from __future__ import annotations

import pytest

from policies.scheduling.framework import AllocationKind
from resource_manager.core import CoreSettings, ResourceManagerCore
from resource_manager.records import Now
from resource_manager.shell import PassDue, RMShell
from resource_manager.store import MemoryStore
from resource_manager.tables import Tables
from tests.builders import res
from tests.unit.resource_manager.harness import at, spec_of


def new_shell() -> RMShell:
    return RMShell(ResourceManagerCore(Tables(MemoryStore()), CoreSettings(node_timeout=10.0)))


def register(shell: RMShell, node_id: str, now: Now) -> None:
    shell.run(
        lambda core, t: core.register_node(
            node_id, f"{node_id}:7", "process", res(4, 4096), [], now=t
        ),
        now,
    )


def test_a_submission_makes_a_pass_due_and_the_pass_places_its_job_master() -> None:
    shell = new_shell()
    register(shell, "n1", at(0.0))
    submitted = shell.run(
        lambda core, t: core.submit(spec_of(2), client_mode=False, now=t), at(1.0)
    )
    job_id = submitted.result.job_id
    assert job_id in submitted.effects.changed_jobs
    assert submitted.effects.pass_due is PassDue.SOON
    assert submitted.effects.placed == () and submitted.effects.plans == ()

    passed = shell.schedule(at(1.02))
    effects = passed.effects
    assert effects.masters_placed == ("n1",)
    assert effects.jobs_granted == ()
    (plan,) = effects.plans  # the decision, as applied
    assert [(p.job_id, p.node_id, p.kind) for p in plan.placements] == [
        (job_id, "n1", AllocationKind.JOB_MASTER)
    ]
    assert effects.pass_due is PassDue.NO
    assert shell.schedule(at(1.04)).effects.plans == ()  # nothing left to decide


def test_a_unit_that_raises_leaves_nothing_and_reports_nothing() -> None:
    shell = new_shell()
    register(shell, "n1", at(0.0))
    before = dict(shell.core.jobs)

    def half_done(core: ResourceManagerCore, now: Now) -> None:
        core.submit(spec_of(2), client_mode=False, now=now)
        raise ZeroDivisionError("a bug after a change")

    with pytest.raises(ZeroDivisionError):
        shell.run(half_done, at(1.0))
    assert shell.core.jobs == before
    assert shell.pass_due() is PassDue.NO
    # What the failed unit placed or decided is gone with it: the next unit reports only its own.
    assert shell.run(lambda core, t: None, at(2.0)).effects.changed_jobs == frozenset()


def test_settle_runs_passes_until_none_is_due() -> None:
    shell = new_shell()
    register(shell, "n1", at(0.0))
    outcome = shell.run(lambda core, t: core.submit(spec_of(2), client_mode=False, now=t), at(1.0))
    last = shell.settle(at(1.0), outcome.effects)
    assert last.pass_due is PassDue.NO
    assert shell.core.job(outcome.result.job_id).master_allocation
