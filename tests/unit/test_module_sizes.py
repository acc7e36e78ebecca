"""No module of forensics/ grows past 500 lines without saying why: a long module either splits along
its seams or gives, in its docstring, a paragraph starting "Why this module is long:"."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "forensics"
LIMIT = 500  # lines
MARK = "Why this module is long:"

#: Generated code: nobody reads or edits it, the generator's layout is its reason.
GENERATED = {
    "collectors/cri/api_pb2.py": "protoc output for the CRI API (collectors/cri/api.proto)",
    "collectors/cri/api_pb2_grpc.py": "grpcio-tools output for the CRI API (collectors/cri/api.proto)",
}

#: Over the limit while another branch is changing them (issue 11 leaves them to their owners, so
#: the merges stay clean): each owner splits the module or writes its reason. An entry that is no
#: longer over the limit, or has its reason now, must go.
PENDING: dict[str, str] = {}


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _gives_a_reason(path: Path) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    at = doc.find(MARK)
    return at >= 0 and len(doc[at + len(MARK):].split()) >= 8  # a reason, not just the heading


def _modules() -> dict[str, Path]:
    return {p.relative_to(PACKAGE).as_posix(): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_long_module_says_why_it_is_long() -> None:
    unexplained = [
        f"forensics/{name} ({_lines(path)} lines)"
        for name, path in _modules().items()
        if name not in GENERATED and name not in PENDING and _lines(path) > LIMIT and not _gives_a_reason(path)
    ]
    assert not unexplained, (
        f"over {LIMIT} lines without a {MARK!r} paragraph in the module docstring; split the module "
        f"along its seams or give the reason: {', '.join(unexplained)}"
    )


def test_the_exceptions_are_current() -> None:
    modules = _modules()
    stale = [name for name in (*GENERATED, *PENDING) if name not in modules]
    stale += [name for name in PENDING
              if name in modules and (_lines(modules[name]) <= LIMIT or _gives_a_reason(modules[name]))]
    assert not stale, f"remove from the exceptions of {__file__}: {', '.join(stale)}"


def test_the_check_sees_a_long_module_without_a_reason(tmp_path: Path) -> None:
    short = tmp_path / "short.py"
    short.write_text('"""Why this module is long: it is not."""\n')
    long_without = tmp_path / "long.py"
    long_without.write_text('"""A module."""\n' + "x = 1\n" * (LIMIT + 1))
    long_with = tmp_path / "reasoned.py"
    long_with.write_text(f'"""A module.\n\n{MARK} one table of many rows that reads best in one place."""\n'
                         + "x = 1\n" * (LIMIT + 1))
    assert _lines(long_without) > LIMIT and not _gives_a_reason(long_without)
    assert _gives_a_reason(long_with)
    assert not _gives_a_reason(short)  # the heading alone is not a reason
