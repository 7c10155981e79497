"""The one loader of job spec text (plumbing.spec_text): every input that costs more than it is
worth, or that PyYAML would read silently wrong, is refused with one line naming the field and
the line; good specs still load.  Each case runs against both event sources (libyaml and PyYAML's
pure-Python parser), since the limits live in the composer they share."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from plumbing import spec_text
from plumbing.spec_text import (
    decode_spec_text,
    load_job_document,
    load_yaml_document,
    read_spec_file,
)
from policies.scheduling.jobspec import (
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    MAX_SPEC_NODES,
    SpecError,
    parse_job_spec,
)
from tests.builders import same_refusal

EXAMPLES = Path(__file__).resolve().parents[3] / "sluice" / "examples"
LOADERS = ["_LibyamlLoader", "_PythonLoader"]


@pytest.fixture(params=LOADERS, autouse=True)
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if not hasattr(spec_text, request.param):
        pytest.skip("PyYAML is built without libyaml")
    monkeypatch.setattr(spec_text, "_LOADER", getattr(spec_text, request.param))
    yield request.param


def spec(phase: str = "", **job: str) -> str:
    """A valid job spec's text with fields of the job or of its one phase replaced."""
    fields = {"name": "etl", "priority": "0", **job}
    phase_fields = {
        "name": "map",
        "tasks": "2",
        "command": '["sh", "-c", "true"]',
        "resources": "{cpu: 0.5, memory_mb: 64}",
    }
    top = "".join(f"{key}: {value}\n" for key, value in fields.items())
    body = "".join(f"    {key}: {value}\n" for key, value in phase_fields.items())
    return f"{top}phases:\n  - {body.lstrip()}{phase}"


def refused(text: str | bytes) -> SpecError:
    """The refusal of ``text``, by the loader or else by parse_job_spec; checked to be one line."""
    with pytest.raises(SpecError) as caught:
        parse_job_spec(load_job_document(text))
    message = str(caught.value)
    assert "\n" not in message and len(message) < 600, message
    assert message == f"{caught.value.field}: {caught.value.problem}"
    return caught.value


def billion_laughs(levels: int = 9) -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        name, previous = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + "\n"


def nested(depth: int, *, flow: str = "[]") -> str:
    return "a: " + flow[0] * depth + flow[1] * depth + "\n"


# (text, the exact message)
REFUSALS: list[tuple[str | bytes, str]] = [
    # aliases: every alias is charged what it expands to
    (
        billion_laughs(),
        f"f[0]: alias *e expands the spec to more than {MAX_SPEC_NODES} nodes (line 6)",
    ),
    (
        # the reported case: a 67 KB spec with one anchor aliased 400 times (26 MB)
        "big: &big " + "x" * 65_000 + "\ncopies: [" + ", ".join(["*big"] * 400) + "]\n",
        f"copies[15]: alias *big expands the spec to more than {MAX_SPEC_BYTES} characters of "
        "scalars (line 2)",
    ),
    (
        "x: [" + ", ".join(["0"] * MAX_SPEC_NODES) + "]\n",
        f"job: has more than {MAX_SPEC_NODES} nodes (line 1)",
    ),
    (
        "a: &a [1, *a]\n",
        "a[1]: alias *a is inside the collection it names, which would never end (line 1)",
    ),
    (
        "a: &a {b: *a}\n",
        "a.b: alias *a is inside the collection it names, which would never end (line 1)",
    ),
    # nesting: refused before Python's recursion limit is anywhere near
    # (the root mapping is the first level: "a" holds the second)
    (
        nested(5000),
        f"a{'[0]' * (MAX_SPEC_DEPTH - 1)}: nests deeper than {MAX_SPEC_DEPTH} levels (line 1)",
    ),
    (
        "a: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
        f"a{'.a' * (MAX_SPEC_DEPTH - 1)}: nests deeper than {MAX_SPEC_DEPTH} levels (line 1)",
    ),
    (
        "- " * 5000 + "x\n",  # block style
        f"{'[0]' * MAX_SPEC_DEPTH}: nests deeper than {MAX_SPEC_DEPTH} levels (line 1)",
    ),
    # the text
    (b"x" * (MAX_SPEC_BYTES + 1), f"job: is {MAX_SPEC_BYTES + 1} bytes; at most {MAX_SPEC_BYTES}"),
    (
        "x" * (MAX_SPEC_BYTES + 1),
        f"job: is {MAX_SPEC_BYTES + 1} characters; at most {MAX_SPEC_BYTES} bytes",
    ),
    (
        "é" * (MAX_SPEC_BYTES // 2 + 1),
        f"job: is {MAX_SPEC_BYTES + 2} bytes; at most {MAX_SPEC_BYTES}",
    ),
    (
        spec().encode() + b"x: \xff\xfe\n",
        f"job: is not valid UTF-8: byte 0xff at offset {len(spec()) + 3} (line 8)",
    ),
    (b"name: caf\xc3", "job: is not valid UTF-8: byte 0xc3 at offset 9 (line 1)"),
    ("name: a\ud800b\n", "job: is not valid Unicode: a lone surrogate at character 7 (line 1)"),
    (
        "name: a\0\n",
        "job: holds the character U+0000, which YAML does not allow (line 1, column 8)",
    ),
    (
        "a: 1\nb: \x1b[31m\n",
        "job: holds the character U+001B, which YAML does not allow (line 2, column 4)",
    ),
    # duplicate keys: PyYAML would keep the last
    (spec(priority="1") + "priority: 100\n", "priority: duplicate key (line 8; first at line 2)"),
    (spec(phase="    tasks: 3\n"), "phases[0].tasks: duplicate key (line 8; first at line 5)"),
    (
        spec().replace("memory_mb: 64}", "memory_mb: 64, cpu: 8}"),
        "phases[0].resources.cpu: duplicate key (line 7; first at line 7)",
    ),
    ("1: a\n0x1: b\n", "1: duplicate key (line 2; first at line 1)"),
    ("true: a\nTrue: b\n", "True: duplicate key (line 2; first at line 1)"),
    ("d: &d {x: 1}\ne: {<<: *d, <<: *d}\n", "e.'<<': duplicate key (line 2; first at line 2)"),
    ('"a\\nb": 1\n"a\\nb": 2\n', "'a\\nb': duplicate key (line 2; first at line 1)"),
    # scalars PyYAML resolves to a type Python cannot make: a ValueError or KeyError today
    (spec(priority="1" * 5000), "priority: is not a valid int: 5000 characters (line 2)"),
    (
        spec(priority="2001-13-40"),
        "priority: is not a valid timestamp: month must be in 1..12 (line 2)",
    ),
    (spec(priority="!!bool maybe"), "priority: is not a valid bool: 'maybe' (line 2)"),
    # what parse_job_spec refuses, read from YAML
    (spec(priority="2147483648"), "priority: must be at most 2147483647, got 2147483648"),
    (spec(priority="-2147483649"), "priority: must be at least -2147483648, got -2147483649"),
    (spec(max_retries="2147483648"), "max_retries: must be at most 100, got 2147483648"),
    (
        spec().replace("tasks: 2", "tasks: 2147483648"),
        "phases[0].tasks: must be at most 100000, got 2147483648",
    ),
    (
        spec().replace("memory_mb: 64", "memory_mb: -1"),
        "phases[0].resources.memory_mb: must be positive, got -1",
    ),
    (spec().replace("cpu: 0.5", "cpu: -1"), "phases[0].resources.cpu: must be positive, got -1"),
    (
        spec().replace("cpu: 0.5", "cpu: .nan"),
        "phases[0].resources.cpu: must be a finite number, got nan",
    ),
    (
        spec().replace("cpu: 0.5", "cpu: .inf"),
        "phases[0].resources.cpu: must be a finite number, got inf",
    ),
    (
        spec().replace("cpu: 0.5", "cpu: 1.0e+999"),
        "phases[0].resources.cpu: must be a finite number, got inf",
    ),
    (
        spec().replace('"true"]', '"' + "x" * 200 * 1024 + '"]'),
        "phases[0].command[2]: is 204800 bytes; at most 131071",
    ),
    (
        spec().replace("name: map", "name: __master__"),
        "phases[0].name: must be at most 63 letters, digits, '-', '_' or '.', starting with a "
        "letter or digit",
    ),
    (
        spec().replace('"true"]', '"a\\0b"]'),
        "phases[0].command[2]: contains a NUL character, which no argument can",
    ),
    ("", "job: must be a mapping, not null"),
    ("- 1\n", "job: must be a mapping, not a list"),
]


@pytest.mark.parametrize(("text", "message"), REFUSALS, ids=range(len(REFUSALS)))
def test_refusal_names_the_field_and_the_line(text: str | bytes, message: str, loader: str) -> None:
    got = str(refused(text))
    assert got == message or (loader == "_LibyamlLoader" and same_refusal(got, message))


# ---------------------------------------------------------------------------- what still loads


def many_phases(count: int) -> str:
    """``count`` phases sharing their command and resources through aliases."""
    phases = [
        "  - name: p0\n    tasks: 1\n"
        '    command: &cmd ["sh", "-c", "echo $SLUICE_TASK_ID"]\n'
        "    resources: &small {cpu: 0.5, memory_mb: 64}\n"
    ]
    phases += [
        f"  - name: p{index}\n    tasks: 1\n    command: *cmd\n    resources: *small\n"
        f"    after: [p{index - 1}]\n"
        for index in range(1, count)
    ]
    return "name: wide\nphases:\n" + "".join(phases)


GOOD: list[str | bytes] = [
    *(path.read_text() for path in sorted(EXAMPLES.glob("*.yaml"))),
    spec(),
    spec().encode(),
    "\ufeff" + spec(),  # a byte order mark
    spec().replace("\n", "\r\n"),
    "\ufeff".encode() + spec().encode(),
    spec(priority="-2147483648", max_retries="100"),
    spec(name="etl  # a comment may say anything: café, 日本, ✓"),
    # a merge key overrides nothing twice: the mapping's own key wins over the merged one
    "defaults: &d {tasks: 1, command: [echo], resources: {cpu: 1, memory_mb: 8}}\n"
    "name: j\nphases:\n  - {<<: *d, name: a, tasks: 3}\n  - {<<: *d, name: b, after: [a]}\n",
    many_phases(1000),
]


@pytest.mark.parametrize("text", GOOD, ids=range(len(GOOD)))
def test_good_specs_load_as_pyyaml_reads_them(text: str | bytes) -> None:
    document = load_job_document(text)
    expected = yaml.safe_load(text.decode("utf-8-sig") if isinstance(text, bytes) else text)
    if isinstance(expected, dict) and "defaults" in expected:
        del expected["defaults"]
        assert isinstance(document, dict)
        del document["defaults"]
    assert document == expected
    if isinstance(document, dict) and "defaults" not in document:
        parse_job_spec(document)


def test_a_merged_key_is_overridden_not_duplicated() -> None:
    document = load_job_document(GOOD[-2])
    assert isinstance(document, dict)
    spec = parse_job_spec({key: value for key, value in document.items() if key != "defaults"})
    assert [(phase.name, phase.tasks) for phase in spec.phases] == [("a", 3), ("b", 1)]


def test_nesting_up_to_the_limit_loads() -> None:
    # the root mapping is the first level: "a" may hold MAX_SPEC_DEPTH - 1 more
    document = load_job_document(nested(MAX_SPEC_DEPTH - 1))
    for _ in range(MAX_SPEC_DEPTH - 1):
        document = document["a"] if isinstance(document, dict) else document[0]  # type: ignore[index]
    assert document == []
    with pytest.raises(SpecError, match=f"nests deeper than {MAX_SPEC_DEPTH} levels"):
        load_job_document(nested(MAX_SPEC_DEPTH))


def test_the_node_limit_counts_every_node_and_every_alias_in_full() -> None:
    def text(items: int) -> str:
        # root, "a", a list of ``items``, "b", a list of eleven aliases to the first list
        return f"a: &a [{', '.join(['0'] * items)}]\nb: [{', '.join(['*a'] * 11)}]\n"

    assert MAX_SPEC_NODES == 4 + 12 * (1 + 8332)
    document = load_job_document(text(8332))
    assert isinstance(document, dict) and len(document["b"]) == 11
    with pytest.raises(SpecError) as caught:
        load_job_document(text(8333))
    assert str(caught.value) == (
        f"b[10]: alias *a expands the spec to more than {MAX_SPEC_NODES} nodes (line 2)"
    )


def test_aliases_within_the_limits_load() -> None:
    # nine levels of nine aliases is 10^9 nodes; four levels is 7381, well within the limit
    document = load_job_document(billion_laughs(4))
    assert isinstance(document, dict)
    assert len(document["d"]) == 9 and document["d"][0][0][0] == document["a"]


def test_text_at_the_size_limit_loads() -> None:
    text = "a: " + "x" * (MAX_SPEC_BYTES - 4) + "\n"
    assert len(text.encode()) == MAX_SPEC_BYTES
    assert load_job_document(text) == {"a": "x" * (MAX_SPEC_BYTES - 4)}
    assert load_job_document(text.encode()) == {"a": "x" * (MAX_SPEC_BYTES - 4)}


def test_decode_spec_text_gives_the_text_to_send() -> None:
    assert decode_spec_text(spec().encode()) == spec()
    assert decode_spec_text(spec()) == spec()


def test_other_files_name_themselves() -> None:
    with pytest.raises(SpecError) as caught:
        load_yaml_document("a: [1\n", field="the file")
    assert caught.value.field == "the file"
    assert re.fullmatch(r"not valid YAML: .* \(line 2, column 1\)", caught.value.problem)


# ---------------------------------------------------------------------------- files


def test_a_file_over_the_limit_is_refused_from_its_size(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:
        file.truncate(64 * MAX_SPEC_BYTES)  # sparse: its size is known without reading it
    with pytest.raises(SpecError, match=rf"^job: is {64 * MAX_SPEC_BYTES} bytes; at most"):
        read_spec_file(path)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_file_without_a_size_is_read_no_further_than_the_limit() -> None:
    with pytest.raises(SpecError, match=rf"^job: is more than {MAX_SPEC_BYTES} bytes"):
        read_spec_file(Path("/dev/zero"))


def test_a_file_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "full.yaml"
    path.write_bytes(b"#" * MAX_SPEC_BYTES)
    assert read_spec_file(path) == b"#" * MAX_SPEC_BYTES
    with pytest.raises(IsADirectoryError):
        read_spec_file(tmp_path)


def test_the_bundled_examples_are_among_the_cases() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == ["analytics.yaml", "batch.yaml"]
