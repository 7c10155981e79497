"""Field checkers shared by every spec parser (job specs, their ``reservation`` and ``service``
blocks): each refusal is a :class:`SpecError` naming the field and the problem on one line."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

MAX_NAME_LENGTH = 63
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SIMPLE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SHOWN_CHARACTERS = 64


class SpecError(ValueError):
    """An invalid job specification; ``field`` is a path such as ``phases[0].resources.cpu``
    (``job`` for the document as a whole).  The message is one line."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


# ------------------------------------------------------------------------------ messages


def quoted(text: str) -> str:
    """``text`` as it may appear in a one-line message: quoted, escaped (a newline cannot end the
    line) and cut after 64 characters (a key of a megabyte must not make a megabyte of error)."""
    if len(text) > _SHOWN_CHARACTERS:
        return repr(text[:_SHOWN_CHARACTERS]) + "..."
    return repr(text)


def join_field(prefix: str, key: object) -> str:
    """The path of ``key`` inside the mapping at ``prefix`` (``""`` for the document), as messages
    name it: ``phases[0].resources``; a key that is not a plain name is quoted."""
    text = key if isinstance(key, str) and _SIMPLE_KEY.fullmatch(key) else key_text(key)
    return f"{prefix}.{text}" if prefix else text


def key_text(key: object) -> str:
    if isinstance(key, str):
        return quoted(key)
    if isinstance(key, bool | int | float) or key is None:
        return shown_scalar(key)
    return f"<{type(key).__name__}>"


def shown_scalar(value: bool | int | float | None) -> str:
    # str() of an int of more than 4300 digits raises; such a number is only "huge" to a user.
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return "a huge negative number" if value < 0 else "a huge number"
    return "null" if value is None else str(value)


def document_field(field: str) -> str:
    return field or "job"


def describe(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), f"a {type(value).__name__}"
    )


# ------------------------------------------------------------------------------ field checkers


def name_field(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(field, "must be a non-empty string")
    if len(value) > MAX_NAME_LENGTH or not _NAME.fullmatch(value):
        # The first character is a letter or digit so that no name can collide with a marker
        # of the system's own (such as "__master__") or read as an option ("-x").
        raise SpecError(
            field,
            f"must be at most {MAX_NAME_LENGTH} letters, digits, '-', '_' or '.', "
            "starting with a letter or digit",
        )
    return value


def integer_field(value: object, field: str, *, minimum: int, maximum: int) -> int:
    """An integer within [minimum, maximum]; booleans and integral floats are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, f"must be an integer, not {describe(value)}")
    if value < minimum:
        word = "positive" if minimum == 1 else f"at least {minimum}"
        raise SpecError(field, f"must be {word}, got {shown_scalar(value)}")
    if value > maximum:
        raise SpecError(field, f"must be at most {maximum}, got {shown_scalar(value)}")
    return value


def number_field(value: object, field: str, *, minimum: float, maximum: float) -> float:
    """A finite, positive number within [minimum, maximum], as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(field, f"must be a number, not {describe(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(field, f"must be a finite number, got {value}")
    # Compared before float(): an integer beyond any float would raise OverflowError there.
    if value <= 0:
        raise SpecError(field, f"must be positive, got {shown_scalar(value)}")
    if value < minimum:
        raise SpecError(field, f"must be at least {minimum:g}, got {shown_scalar(value)}")
    if value > maximum:
        raise SpecError(field, f"must be at most {maximum:g}, got {shown_scalar(value)}")
    return float(value)


def utf8_size(text: str, field: str) -> int:
    """The size of ``text`` in UTF-8; a lone surrogate (YAML's ``"\\ud800"``) has none and could
    neither be sent as protobuf nor passed to a program."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise SpecError(
            field, f"is not valid Unicode (a lone surrogate at character {error.start})"
        ) from None


def string_list(value: object, field: str, *, non_empty: bool, max_items: int) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise SpecError(field, f"must be a list of strings, not {describe(value)}")
    if non_empty and not value:
        raise SpecError(field, "must not be empty")
    if len(value) > max_items:  # before looking at the items: there may be millions
        raise SpecError(field, f"has {len(value)} items; at most {max_items}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise SpecError(f"{field}[{index}]", f"must be a string, not {describe(item)}")
    return tuple(value)


def mapping_field(value: object, field: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise SpecError(document_field(field), f"must be a mapping, not {describe(value)}")
    for key in value:
        if not isinstance(key, str):
            raise SpecError(document_field(field), f"keys must be strings, not {describe(key)}")
    return value


def check_keys(value: object, field: str, schema: Mapping[str, bool]) -> Mapping[str, object]:
    """Refuse a non-mapping, unknown keys and missing required keys."""
    doc = mapping_field(value, field)
    for key in doc:
        if key not in schema:
            raise SpecError(join_field(field, key), f"unknown field (allowed: {', '.join(schema)})")
    for key, required in schema.items():
        if required and key not in doc:
            raise SpecError(join_field(field, key), "is required")
    return doc


def fraction_field(value: object, field: str) -> float:
    """A number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(field, f"must be a number in [0, 1], not {describe(value)}")
    if not 0 <= value <= 1:  # NaN fails too
        raise SpecError(field, f"must be in [0, 1], got {shown_scalar(value)}")
    return float(value)
