"""A job spec's ``speculative`` block: when its job master places speculative tasks straight
into node agents' queues (ROSE Alg. 5 and Sec. 6.3; docs/oversubscription.md).

A batch job opts in; without the block its job master only ever asks the RM::

    speculative: true            # the defaults below
    speculative:
      after_s: 2.0               # a phase's asks unfulfilled this long: dispatch (Alg. 5 l. 1-3)
      queue_timeout_s: 30.0      # queued longer on a node: rescheduled elsewhere (Sec. 6.3)
      upgrade_progress: 0.6      # tau of Alg. 5 line 12
      max_tasks: 0               # live speculative attempts at most; 0: no bound

``after_s`` is the issue's "configurable time"; the paper dispatches as soon as requests cannot
be satisfied, which ``after_s: 0`` reproduces.  ``queue_timeout_s`` is the paper's "finite
timing-out bound", which it does not give.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policies.scheduling.spec_fields import (
    SpecError,
    check_keys,
    describe,
    fraction_field,
    integer_field,
    join_field,
    number_field,
)

SPECULATIVE_FIELDS: Mapping[str, bool] = {
    "after_s": False,
    "queue_timeout_s": False,
    "upgrade_progress": False,
    "max_tasks": False,
}
DEFAULT_AFTER_S = 2.0
DEFAULT_QUEUE_TIMEOUT_S = 30.0
DEFAULT_UPGRADE_PROGRESS = 0.6  # "e.g., 60 percent" (ROSE Sec. 6.3)
MAX_SECONDS = 86_400.0
MAX_TASKS = 1_000_000


@dataclass(frozen=True)
class SpeculativeSpec:
    """See the module docstring; ``max_tasks`` None: no bound."""

    after_s: float = DEFAULT_AFTER_S
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    upgrade_progress: float = DEFAULT_UPGRADE_PROGRESS
    max_tasks: int | None = None


def parse_speculative(value: object, field: str) -> SpeculativeSpec | None:
    """A ``speculative`` block (``true``: the defaults, ``false``: none); raise SpecError."""
    if value is True:
        return SpeculativeSpec()
    if value is False:
        return None
    if not isinstance(value, Mapping):
        raise SpecError(field, f"must be true, false or a mapping, not {describe(value)}")
    doc = check_keys(value, field, SPECULATIVE_FIELDS)
    after_value = doc.get("after_s", DEFAULT_AFTER_S)
    after = (
        0.0  # dispatch at once, as the paper does
        if after_value == 0 and not isinstance(after_value, bool)
        else number_field(
            after_value, join_field(field, "after_s"), minimum=0.0, maximum=MAX_SECONDS
        )
    )
    timeout = number_field(
        doc.get("queue_timeout_s", DEFAULT_QUEUE_TIMEOUT_S),
        join_field(field, "queue_timeout_s"),
        minimum=0.1,
        maximum=MAX_SECONDS,
    )
    progress = fraction_field(
        doc.get("upgrade_progress", DEFAULT_UPGRADE_PROGRESS), join_field(field, "upgrade_progress")
    )
    limit = integer_field(
        doc.get("max_tasks", 0), join_field(field, "max_tasks"), minimum=0, maximum=MAX_TASKS
    )
    return SpeculativeSpec(after, timeout, progress, limit or None)


def speculative_to_document(spec: SpeculativeSpec) -> dict[str, object]:
    """The inverse of :func:`parse_speculative`."""
    return {
        "after_s": spec.after_s,
        "queue_timeout_s": spec.queue_timeout_s,
        "upgrade_progress": spec.upgrade_progress,
        "max_tasks": spec.max_tasks or 0,
    }
