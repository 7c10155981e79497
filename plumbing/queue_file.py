"""A queue file (``sluice rm --queues FILE``) read into a :class:`QueueConfig`.

The text goes through the same bounded YAML loader as job specs (:mod:`plumbing.spec_text`:
size, nesting, aliases, duplicate keys), then :func:`policies.preemption.queues.parse_queue_config`.
Every problem is one line naming the file and the field, e.g.
``queues.yaml: queues.long.share: must be a number in (0, 1], got 1.5``.
"""

from __future__ import annotations

from pathlib import Path

from plumbing.spec_text import load_yaml_document, read_spec_file
from policies.preemption.queues import QueueConfig, QueueError, parse_queue_config
from policies.scheduling.jobspec import SpecError

__all__ = ["QueueFileError", "load_queue_file"]


class QueueFileError(ValueError):
    """A queue file that cannot be used: ``FILE: field: problem`` on one line."""


def load_queue_file(path: Path) -> QueueConfig:
    """The queues of the file at ``path``; QueueFileError on the first problem."""
    try:
        data = read_spec_file(path, field="queue file")
        document = load_yaml_document(data, field="queue file")
        return parse_queue_config(document)
    except FileNotFoundError:
        raise QueueFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise QueueFileError(f"{path}: is a directory, not a queue file") from None
    except OSError as error:
        raise QueueFileError(f"{path}: cannot be read: {error.strerror or error}") from None
    except (SpecError, QueueError) as error:
        raise QueueFileError(f"{path}: {error}") from None
