"""The RM's configuration files read into domain values: the queue file (``sluice rm --queues
FILE``, a :class:`QueueConfig`), the cluster's default slot reservation (``sluice rm
--reservation FILE``, a :class:`ReservationSpec`) and its DiAS settings (``sluice rm
--dias-config FILE``, a :class:`DiasConfig`, with the model output it names).

The text goes through the same bounded YAML loader as job specs (:mod:`plumbing.spec_text`:
size, nesting, aliases, duplicate keys), then the domain's parser.  Every problem is one line
naming the file and the field, e.g.
``queues.yaml: queues.long.share: must be a number in (0, 1], got 1.5``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from plumbing.spec_text import load_yaml_document, read_spec_file
from policies.scheduling.jobspec import ReservationSpec, SpecError, parse_reservation

if TYPE_CHECKING:  # imported by the loaders that need them: the queues' vectors and DiAS's
    # accuracy curves need numpy and scipy, which the CLI's other commands and the node agent
    # never load (they start fast; tests/unit/node_agent/test_start_imports.py)
    from policies.approximation.dias_config import DiasConfig
    from policies.preemption.queues import QueueConfig

__all__ = ["QueueFileError", "load_dias_config", "load_queue_file", "load_reservation_file"]

T = TypeVar("T")


class QueueFileError(ValueError):
    """A configuration file that cannot be used: ``FILE: field: problem`` on one line."""


def load_queue_file(path: Path) -> QueueConfig:
    """The queues of the file at ``path``; QueueFileError on the first problem."""
    from policies.preemption.queues import QueueError, parse_queue_config

    return _load(path, "queue file", parse_queue_config, QueueError)


def load_reservation_file(path: Path) -> ReservationSpec:
    """A ``reservation`` block, as in a job spec (docs/jobspec.md), given as the whole file."""
    return _load(path, "reservation file", lambda doc: parse_reservation(doc, "reservation"))


def load_dias_config(path: Path) -> DiasConfig:
    """The DiAS settings; a ``drop_ratios_from`` file (``sluice model dias --json`` output) is
    read relative to the settings file."""
    from policies.approximation.dias_config import parse_dias_config

    def parse(document: object) -> DiasConfig:
        named = document.get("drop_ratios_from") if isinstance(document, dict) else None
        if named is None:
            return parse_dias_config(document)
        if not isinstance(named, str) or not named:
            raise SpecError("drop_ratios_from", "must name a file")
        model_path = path.parent / named
        try:
            output = json.loads(model_path.read_text())
        except OSError as error:
            raise SpecError(
                "drop_ratios_from", f"{model_path} cannot be read: {error.strerror or error}"
            ) from None
        except ValueError as error:
            raise SpecError("drop_ratios_from", f"{model_path} is not JSON: {error}") from None
        if not isinstance(output, dict):
            raise SpecError("drop_ratios_from", f"{model_path} is not a model's output")
        return parse_dias_config(document, output)

    return _load(path, "DiAS settings file", parse)


def _load(
    path: Path, what: str, parse: Callable[[object], T], error_type: type[Exception] = SpecError
) -> T:
    """``parse`` the file's YAML document; its SpecError or ``error_type`` becomes one line."""
    try:
        data = read_spec_file(path, field=what)
        return parse(load_yaml_document(data, field=what))
    except FileNotFoundError:
        raise QueueFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise QueueFileError(f"{path}: is a directory, not a {what}") from None
    except OSError as error:
        raise QueueFileError(f"{path}: cannot be read: {error.strerror or error}") from None
    except (SpecError, error_type) as error:
        raise QueueFileError(f"{path}: {error}") from None
