"""Reading the JSON snapshots of ``sluice model preempt`` and ``sluice model filter``: the file, and
the checks of its fields, each refusal a ``UserError`` of one line naming the field.

Both commands read the same kind of document (objects, lists, numbers, non-empty strings, no
unknown keys), so they share these words; docs/model/preempt.md and docs/model/filter.md describe
the formats.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from plumbing.errors import UserError

_SIMPLE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SHOWN_CHARACTERS = 64


def read_json_file(path: Path) -> Any:
    """The decoded JSON document in ``path``; UserError naming the file and the problem (with its
    line for malformed JSON), never a traceback."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}: not UTF-8: byte offset {exc.start} (line {line})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON: {exc.msg} at line {exc.lineno}") from None
    except ValueError:  # an integer of more than 4300 digits: Python will not read it
        raise UserError(f"{path}: holds an integer of more than 4300 digits") from None
    except RecursionError:  # json's C scanner checks its depth itself; nothing is left half-done
        raise UserError(f"{path}: not JSON this command can read: nested too deeply") from None


def as_object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"{field}: expected an object")
    return value


def as_list(value: Any, field: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise UserError(f"{field}: expected a list")
    return value


def as_number(value: Any, field: str, *, minimum: float = 0.0) -> float:
    """A finite number at least ``minimum`` (pass ``-math.inf`` for any finite number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{field}: expected a number, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float (math.isfinite would raise the same)
        raise UserError(f"{field}: expected a number, got an integer beyond any float") from None
    if not math.isfinite(number):
        raise UserError(f"{field}: expected a number, got {_shown(value)}")
    if number < minimum:
        raise UserError(f"{field}: must be >= {minimum:g}, got {value}")
    return number


def as_text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise UserError(f"{field}: expected a non-empty string")
    return value


def as_flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{field}: expected true or false")
    return value


def check_known_keys(obj: Mapping[str, Any], field: str, allowed: set[str]) -> None:
    """Refuse the first (in sorted order) key of ``obj`` that is not in ``allowed``."""
    unknown = sorted(set(obj) - allowed)
    if unknown:
        key = unknown[0]
        shown = key if _SIMPLE_KEY.fullmatch(key) else _shown(key)
        raise UserError(f"{field}.{shown}: unknown field")


def _shown(value: Any) -> str:
    """``value`` as JSON, cut to fit in a one-line message."""
    text = json.dumps(value)
    return text if len(text) <= _SHOWN_CHARACTERS else text[:_SHOWN_CHARACTERS] + "..."
