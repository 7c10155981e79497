"""``sluice submit`` / ``sluice run`` refuse a bad job file with one line, ``sluice: error: ...``,
and exit status 2: no traceback, and no resource manager contacted (the file is validated, by the
loader and rules the RM uses, before the CLI connects)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from plumbing.errors import UserError
from policies.scheduling.jobspec import MAX_SPEC_BYTES, MAX_SPEC_DEPTH, MAX_SPEC_NODES
from sluice import cli
from sluice.demo import example
from tests.builders import same_refusal

EXAMPLE = example("analytics.yaml")
GOOD = EXAMPLE.read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reaching the RM means validation passed; say so with a UserError the test can tell."""

    def connect(_: object) -> object:
        raise UserError("would connect now")

    monkeypatch.setattr(cli, "_client", connect)


def lol() -> bytes:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)
    ]
    return ("\n".join(lines) + "\n").encode()


# (file content, the message after "sluice: error: <file>: ")
BAD_FILES: list[tuple[bytes, str]] = [
    (lol(), f"f[0]: alias *e expands the spec to more than {MAX_SPEC_NODES} nodes (line 6)"),
    (
        ("a: " + "[" * 5000 + "]" * 5000 + "\n").encode(),
        f"a{'[0]' * (MAX_SPEC_DEPTH - 1)}: nests deeper than {MAX_SPEC_DEPTH} levels (line 1)",
    ),
    (
        GOOD.encode().replace(b"name: analytics", b"name: analytics\xff"),
        f"job: is not valid UTF-8: byte 0xff at offset {GOOD.index('name: analytics') + 15} "
        f"(line {GOOD[: GOOD.index('name: analytics')].count(chr(10)) + 1})",
    ),
    (
        GOOD.replace("priority: 10", "priority: 10\npriority: 11").encode(),
        "priority: duplicate key (line 5; first at line 4)",
    ),
    (
        GOOD.replace("priority: 10", "priority: 2147483648").encode(),
        "priority: must be at most 2147483647, got 2147483648",
    ),
    (
        GOOD.replace("memory_mb: 64", "memory_mb: -1", 1).encode(),
        "phases[0].resources.memory_mb: must be positive, got -1",
    ),
    (
        GOOD.replace("cpu: 0.5", "cpu: .nan", 1).encode(),
        "phases[0].resources.cpu: must be a finite number, got nan",
    ),
    (
        GOOD.replace("cpu: 0.5", "cpu: .inf", 1).encode(),
        "phases[0].resources.cpu: must be a finite number, got inf",
    ),
    (
        GOOD.replace('"sh", "-c"', '"sh", "' + "x" * 200 * 1024 + '"', 1).encode(),
        "phases[0].command[1]: is 204800 bytes; at most 131071",
    ),
    (
        GOOD.replace("name: extract", "name: __master__").encode(),
        "phases[0].name: must be at most 63 letters, digits, '-', '_' or '.', starting with a "
        "letter or digit",
    ),
    (b"phases: [1, 2\n", "job: not valid YAML: "),
    (b"x" * (MAX_SPEC_BYTES + 1), f"job: is {MAX_SPEC_BYTES + 1} bytes; at most {MAX_SPEC_BYTES}"),
]


@pytest.mark.parametrize("command", ["submit", "run"])
@pytest.mark.parametrize(("content", "message"), BAD_FILES, ids=range(len(BAD_FILES)))
def test_a_bad_file_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, content: bytes, message: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    assert cli.main([command, str(path)]) == cli.EXIT_USER_ERROR
    out, err = capsys.readouterr()
    assert out == ""
    assert same_refusal(err, f"sluice: error: {path}: {message}")
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and "would connect" not in err


def test_a_file_over_the_limit_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:
        file.truncate(1 << 40)  # a sparse terabyte: reading it would not end
    assert cli.main(["submit", str(path)]) == cli.EXIT_USER_ERROR
    assert capsys.readouterr().err == (
        f"sluice: error: {path}: job: is {1 << 40} bytes; at most {MAX_SPEC_BYTES}\n"
    )


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["submit", str(tmp_path / "nope.yaml")]) == cli.EXIT_USER_ERROR
    assert capsys.readouterr().err == (
        f"sluice: error: {tmp_path / 'nope.yaml'}: No such file or directory\n"
    )


@pytest.mark.parametrize("command", ["submit", "run"])
def test_a_good_file_gets_as_far_as_the_cluster(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with resources.as_file(EXAMPLE) as path:
        assert cli.main([command, str(path)]) == cli.EXIT_USER_ERROR
    assert capsys.readouterr().err == "sluice: error: would connect now\n"


def test_the_text_sent_is_the_file_as_written(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(("\ufeff# ✓\r\n" + GOOD).encode())
    text, spec = cli.load_spec_file(path)
    assert text == "\ufeff# ✓\r\n" + GOOD
    assert spec.name == "analytics"
