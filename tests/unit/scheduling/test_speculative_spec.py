"""A job spec's ``speculative`` block (ROSE Alg. 5): defaults, round trips through the document
and the wire, and one-line refusals."""

from __future__ import annotations

import pytest

from plumbing.wire import spec_document_from_pb, spec_to_pb
from policies.scheduling.jobspec import SpecError, job_spec_to_document, parse_job_spec
from policies.scheduling.speculative_spec import SpeculativeSpec
from tests.builders import job_doc, phase_doc


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (None, None),  # no block: never speculative
        (False, None),
        (True, SpeculativeSpec()),
        ({}, SpeculativeSpec()),
        ({"after_s": 0}, SpeculativeSpec(after_s=0.0)),
        (
            {"after_s": 5, "queue_timeout_s": 10, "upgrade_progress": 0.8, "max_tasks": 40},
            SpeculativeSpec(5.0, 10.0, 0.8, 40),
        ),
        ({"max_tasks": 0, "upgrade_progress": 0}, SpeculativeSpec(upgrade_progress=0.0)),
    ],
)
def test_a_speculative_block_and_its_defaults(block: object, expected: object) -> None:
    document = job_doc() if block is None else job_doc(speculative=block)
    spec = parse_job_spec(document)
    assert spec.speculative == expected
    assert parse_job_spec(job_spec_to_document(spec)) == spec
    assert parse_job_spec(spec_document_from_pb(spec_to_pb(spec))) == spec


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("yes", "speculative: must be true, false or a mapping, not a string"),
        ({"after": 1}, "speculative.after: unknown field (allowed: after_s, queue_timeout_s,"),
        ({"after_s": -1}, "speculative.after_s: must be positive, got -1"),
        ({"after_s": "2"}, "speculative.after_s: must be a number, not a string"),
        ({"queue_timeout_s": 0}, "speculative.queue_timeout_s: must be positive, got 0"),
        ({"upgrade_progress": 1.5}, "speculative.upgrade_progress: must be in [0, 1], got 1.5"),
        ({"max_tasks": -2}, "speculative.max_tasks: must be at least 0, got -2"),
        ({"max_tasks": 1.5}, "speculative.max_tasks: must be an integer, not a number"),
    ],
)
def test_a_bad_speculative_block_is_refused_in_one_line(block: object, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job_spec(job_doc(speculative=block))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_service_is_never_speculative() -> None:
    with pytest.raises(SpecError) as caught:
        parse_job_spec(job_doc(phase_doc("web"), kind="service", speculative=True))
    assert str(caught.value) == (
        "speculative: a service runs in containers of its own, never speculatively"
    )
