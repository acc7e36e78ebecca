"""Meta-tests of the command line: every command documented (help with an example, a README
section), every library error mapped to its exit code, --help fast because heavy imports are lazy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from forensics import errors
from forensics.cli import cli, main

ROOT = Path(__file__).resolve().parents[2]


def _commands() -> list[str]:
    return sorted(cli.commands)


def test_there_are_commands() -> None:
    assert {"capture", "analyze", "verify", "inspect"} <= set(_commands())


@pytest.mark.parametrize("name", _commands())
def test_every_command_has_help_with_an_example(name: str) -> None:
    res = CliRunner().invoke(cli, [name, "--help"])
    assert res.exit_code == 0, res.output
    assert "Example:" in res.output, f"`gpuforensics {name} --help` has no example"
    example = res.output.split("Example:", 1)[1]
    assert f"gpuforensics {name}" in example or (name == "capture" and "gpuforensics capture" in example)
    cmd = cli.commands[name]
    assert cmd.help and cmd.help.strip().splitlines()[0].strip(), f"{name}: no one-line summary"


def test_group_help_has_an_example_and_lists_every_command() -> None:
    res = CliRunner().invoke(cli, ["--help"])
    assert res.exit_code == 0 and "Example:" in res.output
    for name in _commands():
        assert re.search(rf"^\s+{name}\b", res.output, re.M), name


@pytest.mark.parametrize("name", _commands())
def test_every_command_appears_in_the_readme(name: str) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(rf"^#+ .*\b{name}\b", readme, re.M), f"README.md has no section for `{name}`"
    assert f"gpuforensics {name}" in readme, f"README.md shows no `gpuforensics {name}` usage"


@pytest.mark.parametrize("name", _commands())
def test_every_option_in_help_appears_in_the_readme(name: str) -> None:
    """Options a user can pass are documented where the user looks (capture's list, analyze's text)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    cmd = cli.commands[name]
    missing = [
        opt for p in cmd.params if isinstance(p, click.Option) and not p.hidden
        for opt in p.opts if opt.startswith("--") and opt not in ("--help",)
        if opt not in readme and not any(o in readme for o in p.opts + p.secondary_opts if o != opt)
    ]
    assert not missing, f"`{name}` options not in README.md: {missing}"


def test_version() -> None:
    from forensics._version import __version__
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0 and __version__ in res.output


def _leaf_errors() -> list[type[errors.ForensicsError]]:
    return [getattr(errors, n) for n in errors.__all__
            if isinstance(getattr(errors, n), type) and issubclass(getattr(errors, n), errors.ForensicsError)]


@pytest.mark.parametrize("exc_type", _leaf_errors(), ids=lambda t: t.__name__)
def test_every_library_error_maps_to_its_exit_code_in_one_line(
        exc_type: type[errors.ForensicsError], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    expected = (1 if issubclass(exc_type, errors.BundleIntegrityError)
                else 4 if issubclass(exc_type, errors.OutputNotWritten) else 2)  # README: exit codes

    @cli.command("raise-for-test")
    def _raise() -> None:
        raise exc_type("first line\n  second   line")

    try:
        with pytest.raises(SystemExit) as ei:
            main(["raise-for-test"])
    finally:
        del cli.commands["raise-for-test"]
    assert ei.value.code == expected
    err = capsys.readouterr().err
    assert err == "gpuforensics: error: first line second line\n"


def test_an_unmapped_error_is_reported_as_a_bug_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    @cli.command("bug-for-test")
    def _bug() -> None:
        raise KeyError("oops")

    try:
        with pytest.raises(SystemExit) as ei:
            main(["bug-for-test"])
    finally:
        del cli.commands["bug-for-test"]
    assert ei.value.code == 70
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" in err and "Traceback" not in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["nope"], ["verify"], ["capture", "--timeout", "0"], ["analyze", "x.tgz", "-f", "docx"]):
        with pytest.raises(SystemExit) as ei:
            main(argv)
        assert ei.value.code == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("gpuforensics: error: ") and err.count("\n") == 1, (argv, err)


def test_help_imports_no_heavy_library() -> None:
    """``gpuforensics --help`` stays fast: docker, kubernetes, NVML, weasyprint, matplotlib, grpc are lazy."""
    code = ("import sys; from forensics.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = ('docker', 'kubernetes', 'pynvml', 'weasyprint', 'matplotlib', 'grpc', 'jinja2')\n"
            "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0
    assert res.stderr.strip() == "[]", res.stderr
