"""The RM's configuration files read into domain values: the queue file (``sluice rm --queues
FILE``, a :class:`QueueConfig`) and the cluster's default slot reservation (``sluice rm
--reservation FILE``, a :class:`ReservationSpec`).

The text goes through the same bounded YAML loader as job specs (:mod:`plumbing.spec_text`:
size, nesting, aliases, duplicate keys), then the domain's parser.  Every problem is one line
naming the file and the field, e.g.
``queues.yaml: queues.long.share: must be a number in (0, 1], got 1.5``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from plumbing.spec_text import load_yaml_document, read_spec_file
from policies.preemption.queues import QueueConfig, QueueError, parse_queue_config
from policies.scheduling.jobspec import ReservationSpec, SpecError, parse_reservation

__all__ = ["QueueFileError", "load_queue_file", "load_reservation_file"]

T = TypeVar("T")


class QueueFileError(ValueError):
    """A configuration file that cannot be used: ``FILE: field: problem`` on one line."""


def load_queue_file(path: Path) -> QueueConfig:
    """The queues of the file at ``path``; QueueFileError on the first problem."""
    return _load(path, "queue file", parse_queue_config)


def load_reservation_file(path: Path) -> ReservationSpec:
    """A ``reservation`` block, as in a job spec (docs/jobspec.md), given as the whole file."""
    return _load(path, "reservation file", lambda doc: parse_reservation(doc, "reservation"))


def _load(path: Path, what: str, parse: Callable[[object], T]) -> T:
    try:
        data = read_spec_file(path, field=what)
        return parse(load_yaml_document(data, field=what))
    except FileNotFoundError:
        raise QueueFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise QueueFileError(f"{path}: is a directory, not a {what}") from None
    except OSError as error:
        raise QueueFileError(f"{path}: cannot be read: {error.strerror or error}") from None
    except (SpecError, QueueError) as error:
        raise QueueFileError(f"{path}: {error}") from None
