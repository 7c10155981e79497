"""``sluice examples [--copy DIR]`` and ``sluice docs [TOPIC]``: what the README, ``--help`` and
the CLI's messages point to (``examples/queues/bigc.yaml``, ``docs/preemption.md``), reachable
from an installed Sluice, not only from a checkout.

Both are package data of ``sluice``: ``sluice/examples/`` (the demo's job files, and in a
checkout links to ``examples/queues``, ``examples/dias`` and ``examples/model``) and
``sluice/docs/`` (in a checkout a link to ``docs/``), read through ``importlib.resources``.  A
name relative to ``examples/`` or ``docs/`` is the same in the checkout, in the package and in
a copy made with ``--copy``.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TypeAlias

from plumbing.errors import UserError

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

EXAMPLE_SUFFIXES = (".yaml", ".json")
# What each example is for, by its name under examples/ (the first comment line says the rest).
EXAMPLE_USES = {
    "analytics.yaml": "sluice submit FILE",
    "batch.yaml": "sluice submit FILE",
    "queues/bigc.yaml": "sluice local up --queues FILE",
    "dias/dias.yaml": "sluice local up --dispatch dias --dias-config FILE",
    "model/dias.yaml": "sluice model dias FILE",
    "model/preempt_snapshot.json": "sluice model preempt FILE",
    "model/filter_snapshot.json": "sluice model filter FILE",
}


def examples_root() -> Traversable:
    """The examples shipped with Sluice (``sluice/examples/``), wherever it is installed."""
    return resources.files("sluice") / "examples"


def docs_root() -> Traversable:
    """The documentation shipped with Sluice (``sluice/docs/``, the checkout's ``docs/``)."""
    return resources.files("sluice") / "docs"


def _walk(root: Traversable, suffixes: tuple[str, ...], prefix: str = "") -> list[str]:
    """Names of the files under ``root`` ending in one of ``suffixes``, relative to it, sorted."""
    if not root.is_dir():
        return []
    names: list[str] = []
    for entry in root.iterdir():
        if entry.name.startswith((".", "__")):
            continue
        if entry.is_dir():
            names += _walk(entry, suffixes, f"{prefix}{entry.name}/")
        elif entry.name.endswith(suffixes):
            names.append(prefix + entry.name)
    return sorted(names, key=lambda n: (n.count("/"), n))


def example_names() -> list[str]:
    """Every example's name relative to ``examples/`` (``queues/bigc.yaml``...)."""
    return _walk(examples_root(), EXAMPLE_SUFFIXES)


def doc_names() -> list[str]:
    """Every page's name relative to ``docs/`` (``preemption.md``, ``model/dias.md``...)."""
    return _walk(docs_root(), (".md",))


def _resource(root: Traversable, name: str) -> Traversable:
    node = root
    for part in name.split("/"):
        node = node / part
    return node


def _summary(text: str) -> str:
    """A file's first comment line, or its first heading, as a one-line description."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            return stripped.lstrip("#").strip()
        if stripped:
            break
    return ""


def cmd_examples(args: argparse.Namespace) -> int:
    names = example_names()
    if not names:
        raise UserError(f"no examples in {examples_root()} (a broken installation?)")
    if args.copy is None:
        print(f"examples shipped with Sluice, in {examples_root()}:")
        for name in names:
            use = EXAMPLE_USES.get(name, "")
            print(f"  examples/{name:<30} {use}")
        print("copy them out with `sluice examples --copy DIR` (DIR/queues/bigc.yaml...)")
        return 0
    target: Path = args.copy
    if target.exists() and not target.is_dir():
        raise UserError(f"--copy: {target} exists and is not a directory")
    copied = kept = 0
    for name in names:
        destination = target / name
        if destination.exists():
            print(f"{destination}: exists, left as it is", file=sys.stderr)
            kept += 1
            continue
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(_resource(examples_root(), name).read_bytes())
        except OSError as error:
            raise UserError(f"--copy: {destination}: {error.strerror or error}") from None
        print(destination)
        copied += 1
    print(
        f"copied {copied} examples to {target}" + (f" ({kept} kept)" if kept else ""),
        file=sys.stderr,
    )
    return 0


def find_doc(topic: str) -> str | None:
    """The page ``topic`` names: ``preemption``, ``preemption.md``, ``docs/preemption.md``,
    ``model/dias``... (None: no such page)."""
    wanted = topic.strip().removeprefix("./").removeprefix("docs/").removesuffix(".md")
    names = doc_names()
    for name in names:
        if name.removesuffix(".md") == wanted:
            return name
    return None


def cmd_docs(args: argparse.Namespace) -> int:
    names = doc_names()
    if not names:
        raise UserError(f"no documentation in {docs_root()} (a broken installation?)")
    if args.topic is None:
        print(f"documentation shipped with Sluice, in {docs_root()}:")
        for name in names:
            text = _resource(docs_root(), name).read_bytes().decode(errors="replace")
            print(f"  {name.removesuffix('.md'):<44} {_summary(text)}")
        print("read one with `sluice docs TOPIC` (messages citing docs/X.md: `sluice docs X`)")
        return 0
    found = find_doc(args.topic)
    if found is None:
        topics = ", ".join(n.removesuffix(".md") for n in names if "/" not in n)
        raise UserError(f"docs: no page {args.topic!r} (pages: {topics}; `sluice docs` lists all)")
    page = _resource(docs_root(), found)
    if args.path:
        print(page)
    else:
        sys.stdout.write(page.read_bytes().decode(errors="replace"))
    return 0


def register_examples(sub: Subparsers, help_text: str) -> None:
    """``sluice examples [--copy DIR]``."""
    p = sub.add_parser("examples", help=help_text)
    p.add_argument(
        "--copy",
        type=Path,
        metavar="DIR",
        help="copy every example into DIR (DIR/queues/bigc.yaml...), keeping files already there",
    )
    p.set_defaults(handler=cmd_examples)


def register_docs(sub: Subparsers, help_text: str) -> None:
    """``sluice docs [TOPIC] [--path]``."""
    p = sub.add_parser("docs", help=help_text)
    p.add_argument(
        "topic",
        nargs="?",
        help="a page: preemption, security, model/dias... (docs/X.md as messages cite it works)",
    )
    p.add_argument("--path", action="store_true", help="print the page's file name, not the page")
    p.set_defaults(handler=cmd_docs)
