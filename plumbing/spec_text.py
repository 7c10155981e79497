"""YAML text to a document, bounded at the edge: the one loader of the CLI and the resource manager.

:func:`load_job_document` turns a job spec's text (``str`` from the wire, ``bytes`` from a file)
into the plain document that :func:`policies.scheduling.jobspec.parse_job_spec` validates.  It
holds the text to limits before it can cost anything: its size (:data:`MAX_SPEC_BYTES`), UTF-8,
the characters YAML allows, how deeply collections nest (:data:`MAX_SPEC_DEPTH`, checked before
the composer recurses), and what aliases expand to (:data:`MAX_SPEC_NODES` nodes and
:data:`MAX_SPEC_BYTES` characters of scalars, every alias counted as a copy of what it names, so a
"billion laughs" stops at its first expensive alias).  It refuses what PyYAML lets through
silently: a duplicate key (PyYAML keeps the last) and an alias inside the collection it names.

Every refusal is a one-line :class:`SpecError` naming where and what, with the line number, e.g.
``phases[0].tasks: duplicate key (line 9; first at line 5)``; problems of the text as a whole
name ``job``.  Nothing else escapes: not a RecursionError, a UnicodeDecodeError or the ValueError
PyYAML raises for an integer of 5000 digits or the 40th of a month.

Events come from libyaml when PyYAML has it (four times faster than the pure-Python parser, which
matters because the resource manager reads specs on its event loop) and from PyYAML's own parser
otherwise; composition and construction are PyYAML's, with the checks above added.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, cast

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from policies.scheduling.jobspec import (
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    MAX_SPEC_NODES,
    SpecError,
    join_field,
    quoted,
)

__all__ = [
    "DOCUMENT_FIELD",
    "MAX_SPEC_BYTES",
    "MAX_SPEC_DEPTH",
    "MAX_SPEC_NODES",
    "decode_spec_text",
    "load_job_document",
    "load_yaml_document",
    "read_spec_file",
]

DOCUMENT_FIELD = "job"
"""The field that refusals of a job spec's text as a whole name."""

_MERGE_TAG = "tag:yaml.org,2002:merge"  # the "<<" key
_VALUE_TAG = "tag:yaml.org,2002:value"  # the "=" key
_MERGE_KEY = object()  # stands for "<<" among a mapping's keys: it constructs to nothing
_MAX_PROBLEM = 160  # characters of a YAML library's own message kept in ours


# ------------------------------------------------------------------------------ entry points


def load_job_document(text: str | bytes) -> object:
    """The document of a job spec's YAML text; :class:`SpecError` (field ``job`` or the path of
    the offending node, one line, with its line number) for anything over the limits or not YAML.

    ``str`` is the text as the resource manager receives it (``SubmitJobRequest.spec_yaml``),
    ``bytes`` a file as read.  The result still has to pass ``parse_job_spec``."""
    return load_yaml_document(text, field=DOCUMENT_FIELD)


def load_yaml_document(text: str | bytes, *, field: str) -> object:
    """Like :func:`load_job_document` for any YAML file given to Sluice (e.g. a model's
    configuration); ``field`` names the text as a whole in refusals."""
    decoded = decode_spec_text(text, field=field)
    loader = _LOADER(decoded, field)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as error:
        raise SpecError(field, _yaml_problem(error)) from None
    except yaml.YAMLError as error:  # a ReaderError: the checks in decode_spec_text come first
        raise SpecError(field, f"not valid YAML: {_one_line(str(error))}") from None
    finally:
        loader.dispose()


def decode_spec_text(text: str | bytes, *, field: str = DOCUMENT_FIELD) -> str:
    """``text`` as a ``str`` once it is at most :data:`MAX_SPEC_BYTES` of UTF-8 and holds only
    characters YAML allows; otherwise :class:`SpecError` naming the byte offset or line."""
    if isinstance(text, bytes):
        if len(text) > MAX_SPEC_BYTES:
            raise SpecError(field, f"is {len(text)} bytes; at most {MAX_SPEC_BYTES}")
        try:
            decoded = text.decode("utf-8")
        except UnicodeDecodeError as error:
            line = text.count(b"\n", 0, error.start) + 1
            raise SpecError(
                field,
                f"is not valid UTF-8: byte 0x{text[error.start]:02x} at offset {error.start} "
                f"(line {line})",
            ) from None
    else:
        if len(text) > MAX_SPEC_BYTES:  # every character is at least one byte: no need to encode
            raise SpecError(field, f"is {len(text)} characters; at most {MAX_SPEC_BYTES} bytes")
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as error:  # a lone surrogate: no UTF-8 for it exists
            line = text.count("\n", 0, error.start) + 1
            raise SpecError(
                field,
                f"is not valid Unicode: a lone surrogate at character {error.start} (line {line})",
            ) from None
        if size > MAX_SPEC_BYTES:
            raise SpecError(field, f"is {size} bytes; at most {MAX_SPEC_BYTES}")
        decoded = text
    # Found here rather than by the YAML reader, whose position libyaml counts in bytes.
    bad = Reader.NON_PRINTABLE.search(decoded)
    if bad is not None:
        line = decoded.count("\n", 0, bad.start()) + 1
        column = bad.start() - (decoded.rfind("\n", 0, bad.start()) + 1) + 1
        raise SpecError(
            field,
            f"holds the character U+{ord(bad.group()):04X}, which YAML does not allow "
            f"(line {line}, column {column})",
        )
    return decoded


def read_spec_file(path: Path, *, field: str = DOCUMENT_FIELD) -> bytes:
    """The bytes of the file at ``path``; :class:`SpecError` when it is larger than
    :data:`MAX_SPEC_BYTES`, found from its size before reading it, and by reading at most one
    byte more (a file growing meanwhile, or a device such as /dev/zero that has no size).
    ``OSError`` when it cannot be read: the caller words that."""
    with path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(field, f"is {size} bytes; at most {MAX_SPEC_BYTES}")
        data = file.read(MAX_SPEC_BYTES + 1)
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(field, f"is more than {MAX_SPEC_BYTES} bytes; at most {MAX_SPEC_BYTES}")
    return data


# ------------------------------------------------------------------------------ messages


class _Mark(Protocol):
    """A position in the text, as PyYAML's and libyaml's marks both give it (0-based)."""

    line: int
    column: int


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_PROBLEM else flat[:_MAX_PROBLEM] + "..."


def _line(mark: _Mark | None) -> str:
    return f"line {mark.line + 1}" if mark is not None else "line unknown"


def _yaml_problem(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    # PyYAML splits its message in two: "while parsing a flow sequence" (the context) and
    # "did not find expected ',' or ']'" (the problem); the problem's mark is the one to fix.
    parts = [part for part in (error.context, error.problem) if part]
    problem = _one_line(", ".join(parts) or "malformed")
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"not valid YAML: {problem}{where}"


def _anchor(name: str) -> str:
    return f"*{name}" if name.isascii() and name.isprintable() and len(name) <= 64 else quoted(name)


# ------------------------------------------------------------------------------ the loader


class _Events(Protocol):
    """What the composer reads events through: libyaml's CParser or PyYAML's Parser."""

    def peek_event(self) -> Any: ...


class _BoundedLoading(Composer, SafeConstructor, Resolver):
    """PyYAML's composer and safe constructor with the limits and refusals of this module; mixed
    with an event source into a loader below.

    Composition keeps, for every node, the path it was written at (for messages) and, for every
    anchor, the size of the node it names with its own aliases expanded, so that each alias is
    charged its full expansion at once and in constant time."""

    def __init__(self, field: str) -> None:
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._field = field
        self._paths: dict[int, str] = {}  # id(node) -> where it was written
        self._open: list[str] = []  # paths of the collections being composed; len() = depth
        self._open_anchors: set[str] = set()  # anchors of those collections
        self._expanded: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, scalar characters)
        self._nodes = 0  # of the document so far, every alias expanded
        self._characters = 0  # of its scalars so far, every alias expanded

    # -- composition: depth and expansion, before any of it is built ---------------------------

    def compose_node(self, parent: Node | None, index: object) -> Node | None:
        """Compose the next node (PyYAML's ``index``: a position in a list, the key node of a
        mapping value, None for a key or the root) after checking it against the limits."""
        path = self._child_path(parent, index)
        event = cast(_Events, self).peek_event()
        # PyYAML's stubs say int; at run time it is whatever compose_*_node passes (see above).
        compose = super().compose_node
        if isinstance(event, AliasEvent):
            anchor = event.anchor or ""
            if anchor in self._open_anchors:
                raise self._refusal(
                    path,
                    f"alias {_anchor(anchor)} is inside the collection it names, "
                    "which would never end",
                    event.start_mark,
                )
            size = self._expanded.get(anchor)
            if size is not None:  # an undefined alias is refused by PyYAML just below
                self._count(path, *size, event.start_mark, alias=anchor)
            return compose(parent, index)  # type: ignore[arg-type]
        if isinstance(event, ScalarEvent):
            self._count(path, 1, len(event.value), event.start_mark)
            node = compose(parent, index)  # type: ignore[arg-type]
            if event.anchor is not None:
                self._expanded[event.anchor] = (1, len(event.value))
        else:  # the start of a list or a mapping
            if len(self._open) >= MAX_SPEC_DEPTH:
                # Refused before composing it: each level is three Python frames deeper.
                raise self._refusal(
                    path, f"nests deeper than {MAX_SPEC_DEPTH} levels", event.start_mark
                )
            self._count(path, 1, 0, event.start_mark)
            nodes, characters = self._nodes - 1, self._characters
            self._open.append(path)
            if event.anchor is not None:
                self._open_anchors.add(event.anchor)
            node = compose(parent, index)  # type: ignore[arg-type]
            self._open.pop()
            if event.anchor is not None:
                self._open_anchors.discard(event.anchor)
                self._expanded[event.anchor] = (
                    self._nodes - nodes,
                    self._characters - characters,
                )
        self._paths[id(node)] = path
        return node

    def _child_path(self, parent: Node | None, index: object) -> str:
        if parent is None:
            return ""
        base = self._open[-1]
        if isinstance(index, int):
            return f"{base}[{index}]"
        if isinstance(index, ScalarNode):  # a mapping's value, by its key as written
            return join_field(base, index.value)
        return base  # a key, or the value of a key that is itself a collection

    def _count(
        self, path: str, nodes: int, characters: int, mark: _Mark | None, alias: str | None = None
    ) -> None:
        self._nodes += nodes
        self._characters += characters
        expands = f"alias {_anchor(alias)} expands the spec to" if alias is not None else None
        if self._nodes > MAX_SPEC_NODES:
            if expands is None:
                raise self._refusal("", f"has more than {MAX_SPEC_NODES} nodes", mark)
            raise self._refusal(path, f"{expands} more than {MAX_SPEC_NODES} nodes", mark)
        if self._characters > MAX_SPEC_BYTES:
            if expands is None:
                raise self._refusal("", f"has more than {MAX_SPEC_BYTES} characters", mark)
            raise self._refusal(
                path, f"{expands} more than {MAX_SPEC_BYTES} characters of scalars", mark
            )

    def _refusal(self, path: str, problem: str, mark: _Mark | None) -> SpecError:
        return SpecError(path or self._field, f"{problem} ({_line(mark)})")

    # -- construction: duplicate keys, merges, and scalars Python cannot make -----------------

    def construct_document(self, node: Node) -> Any:
        self._prepare_mappings(node)
        return super().construct_document(node)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """Construct ``node``; a scalar that PyYAML resolved to a type but that Python cannot
        make (``2001-13-40``, an int of 5000 digits, ``!!bool maybe``) is a SpecError."""
        try:
            return super().construct_object(node, deep)
        except SpecError:
            raise
        except (ValueError, LookupError, ArithmeticError, TypeError) as error:
            kind = node.tag.rsplit(":", 1)[-1]
            value = node.value if isinstance(node, ScalarNode) else ""
            # Python's own words for an int of 5000 digits are about sys.set_int_max_str_digits.
            detail = f"{len(value)} characters" if len(value) > 64 else _one_line(str(error))
            raise self._refusal(
                self._paths.get(id(node), ""), f"is not a valid {kind}: {detail}", node.start_mark
            ) from None

    def _prepare_mappings(self, root: Node) -> None:
        """Refuse duplicate keys, then apply merge keys (``<<``), in every mapping, children
        before parents and without recursion.

        Before merging: a key given by a merge and again by the mapping itself is an override,
        not a duplicate.  Children first: PyYAML's ``flatten_mapping`` recurses into what it
        merges, and a chain of merges could otherwise go as deep as there are aliases."""
        done: set[int] = set()
        stack: list[tuple[Node, bool]] = [(root, False)]
        while stack:
            node, children_done = stack.pop()
            if children_done:
                if isinstance(node, MappingNode):
                    self._refuse_duplicate_keys(node)
                    self.flatten_mapping(node)
                continue
            if id(node) in done:  # an aliased node, prepared where it was first written
                continue
            done.add(id(node))
            stack.append((node, True))
            if isinstance(node, SequenceNode):
                children: list[Node] = list(node.value)
            elif isinstance(node, MappingNode):
                children = [child for pair in node.value for child in pair]
            else:
                continue
            stack.extend((child, False) for child in reversed(children) if id(child) not in done)

    def _refuse_duplicate_keys(self, node: MappingNode) -> None:
        first: dict[object, Node] = {}
        for key_node, _ in node.value:
            key: object
            if key_node.tag == _MERGE_TAG:
                key = _MERGE_KEY
            elif key_node.tag == _VALUE_TAG:
                key = "="
            elif isinstance(key_node, ScalarNode):
                # Constructed, so that 1 and 0x1, or true and True, are one key as in the dict.
                key = self.construct_object(key_node, deep=True)
            else:
                continue  # a list or mapping as a key: refused by the constructor as unhashable
            earlier = first.get(key)
            if earlier is not None:
                path = join_field(self._paths.get(id(node), ""), "<<" if key is _MERGE_KEY else key)
                raise SpecError(
                    path,
                    f"duplicate key ({_line(key_node.start_mark)}; "
                    f"first at {_line(earlier.start_mark)})",
                )
            first[key] = key_node


class _PythonLoader(_BoundedLoading, Reader, Scanner, Parser):
    """Events from PyYAML's own parser: for a PyYAML built without libyaml."""

    def __init__(self, text: str, field: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        _BoundedLoading.__init__(self, field)


class _Loader(Protocol):
    def get_single_data(self) -> Any: ...
    def dispose(self) -> None: ...


_LOADER: Callable[[str, str], _Loader] = _PythonLoader

try:
    from yaml._yaml import CParser
except ImportError:  # pragma: no cover - PyYAML without libyaml: the pure-Python parser above
    pass
else:

    class _LibyamlLoader(_BoundedLoading, CParser):
        """Events from libyaml; the composer above comes first in the MRO, so CParser's own
        (unbounded, C) composition is never used."""

        def __init__(self, text: str, field: str) -> None:
            CParser.__init__(self, text)
            _BoundedLoading.__init__(self, field)

    _LOADER = _LibyamlLoader
