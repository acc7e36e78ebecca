"""Fixtures of the report tests: analysis documents (tests/support/report_docs.py) and renders.

Rendering a PDF takes a second or two, so each document is rendered once per session and the
tests read the cached bytes. External tools (pdftotext, pdftoppm, pdfinfo from poppler-utils)
skip their tests when absent, except in CI (tests/support/env.py) where they must be present.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support import report_docs as report_docs_module
from tests.support.env import need

docs = report_docs_module

_BUILDERS: dict[str, Callable[[], dict[str, Any]]] = {
    "incident": lambda: docs.build_incident_doc(),
    "hostile": lambda: docs.build_incident_doc(hostile=True),
    "clean": docs.build_clean_doc,
    "snapshot": docs.build_snapshot_doc,
    "large": docs.build_large_doc,
}


@pytest.fixture(scope="session")
def report_docs() -> ModuleType:
    """The builder module (constants such as HOSTILE_IMG, and the build_* functions)."""
    return docs


@pytest.fixture(scope="session")
def _doc_cache() -> dict[str, dict[str, Any]]:
    return {}


@pytest.fixture
def make_doc(_doc_cache: dict[str, dict[str, Any]]) -> Callable[[str], dict[str, Any]]:
    """``make_doc("incident")`` -> a fresh deep copy of that document (tests may mutate it)."""

    def make(name: str) -> dict[str, Any]:
        if name not in _doc_cache:
            _doc_cache[name] = _BUILDERS[name]()
        return copy.deepcopy(_doc_cache[name])

    return make


class Render(dict[str, Any]):
    """One document's renders, made on first access: ``r["html"]``, ``r["pdf"]``, ``r["md"]``, ``r["refused"]``."""

    def __init__(self, name: str, paper: str) -> None:
        super().__init__()
        self.doc = _BUILDERS[name]()
        self.paper = paper

    def __missing__(self, key: str) -> Any:
        from forensics.report.html import render_html
        from forensics.report.markdown import render_markdown
        from forensics.report.pdf import NoFetch, render_pdf

        if key == "html":
            self["html"] = render_html(self.doc, self.paper)
        elif key in ("pdf", "refused"):
            fetcher = NoFetch()
            self["pdf"] = render_pdf(self["html"], fetcher)
            self["refused"] = list(fetcher.refused)
        elif key == "md":
            self["md"] = render_markdown(self.doc)
        else:
            raise KeyError(key)
        return self[key]


@pytest.fixture(scope="session")
def rendered() -> Callable[..., Render]:
    """``rendered("incident", "a4")`` -> its :class:`Render` (cached for the session)."""
    cache: dict[tuple[str, str], Render] = {}

    def get(name: str, paper: str = "a4") -> Render:
        if (name, paper) not in cache:
            cache[(name, paper)] = Render(name, paper)
        return cache[(name, paper)]

    return get


def require_tool(name: str) -> str:
    """The path of an external tool; skip (or fail under CI=true) when it is missing."""
    path = shutil.which(name)
    need(path is not None, f"{name} not installed (apt-get install poppler-utils)")
    assert path is not None
    return path


def pdf_text(pdf: bytes, tmp_path: Path, layout: bool = False) -> str:
    """The PDF's text through pdftotext (poppler)."""
    tool = require_tool("pdftotext")
    source = tmp_path / "report.pdf"
    source.write_bytes(pdf)
    args = [tool, "-enc", "UTF-8"] + (["-layout"] if layout else []) + [str(source), "-"]
    return subprocess.run(args, check=True, capture_output=True, timeout=60).stdout.decode("utf-8")


def pdf_info(pdf: bytes, tmp_path: Path) -> dict[str, str]:
    """pdfinfo's key/value lines (Pages, Page size, ...)."""
    tool = require_tool("pdfinfo")
    source = tmp_path / "info.pdf"
    source.write_bytes(pdf)
    out = subprocess.run(
        [tool, str(source)], check=True, capture_output=True, timeout=60
    ).stdout.decode()
    return {
        k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if v
    }


@pytest.fixture
def pdftext(tmp_path: Path) -> Callable[..., str]:
    """``pdftext(pdf_bytes, layout=False)`` -> text (pdftotext)."""
    return lambda pdf, layout=False: pdf_text(pdf, tmp_path, layout)


@pytest.fixture
def pdfinfo(tmp_path: Path) -> Callable[[bytes], dict[str, str]]:
    """``pdfinfo(pdf_bytes)`` -> pdfinfo's fields."""
    return lambda pdf: pdf_info(pdf, tmp_path)


@pytest.fixture
def tool() -> Callable[[str], str]:
    """``tool("pdftoppm")`` -> its path, or skip (fail under CI=true)."""
    return require_tool
