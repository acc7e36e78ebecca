"""Writing reports: format names, output paths, atomic writes, and :func:`render`.

``out`` is a file path when one format is asked for and ``out`` is not an existing directory;
otherwise it is a directory and each file is named after the first bundle's stem
(``gpuforensics-gpu-07-20261129T140500Z.report.html``, ``.report.pdf``, ``.report.md``,
``.report.json``). Files are written atomically (temporary file in the same directory, fsync,
rename), mode 0600 like the bundles they describe.
"""

from __future__ import annotations

import json
import os
import posixpath
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from forensics.document_format import REPORT_FORMATS, split_formats
from forensics.errors import ReportError, ReportNotWritten, write_failure

__all__ = ["FORMATS", "output_paths", "render", "report_stem"]

#: format name -> file suffix (``.report.html`` ...), for the formats of the document contract
FORMATS: dict[str, str] = {name: f".report.{name}" for name in REPORT_FORMATS}


def normalise_formats(formats: Sequence[str]) -> list[str]:
    """``["html", "PDF", "markdown"]`` -> ``["html", "pdf", "md"]`` (order kept, duplicates dropped)."""
    out = split_formats(formats)
    bad = [name for name in out if name not in FORMATS]
    if bad:
        raise ReportError(f"unknown report format {bad[0]!r} (use: {', '.join(FORMATS)})")
    if not out:
        raise ReportError("no report format requested")
    return out


def report_stem(doc: Mapping[str, Any], bundle_paths: Sequence[str | os.PathLike[str]] = ()) -> str:
    """The first bundle's file name without ``.tgz`` (``report`` when none is known)."""
    candidates: list[str] = [os.fspath(p) for p in bundle_paths]
    bundles = doc.get("bundles")
    if isinstance(bundles, list):
        candidates += [
            b["path"] for b in bundles if isinstance(b, dict) and isinstance(b.get("path"), str)
        ]
    for candidate in candidates:
        name = posixpath.basename(candidate.replace("\\", "/"))
        for suffix in (".tar.gz", ".tgz", ".tar"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        name = "".join(c if c.isalnum() or c in "-_.+" else "_" for c in name).strip("._")
        if name:
            return name
    return "report"


def output_paths(
    doc: Mapping[str, Any],
    formats: Sequence[str],
    out: Path | str,
    bundle_paths: Sequence[str | os.PathLike[str]] = (),
) -> dict[str, Path]:
    """format -> the path it will be written to (see the module docstring)."""
    names = normalise_formats(formats)
    # "-o reports/" names a directory even before it exists (Path() would drop the slash)
    wants_dir = isinstance(out, str) and out.endswith(("/", os.sep))
    out = Path(out)
    try:  # probing a path under a directory we may not search raises PermissionError
        if len(names) == 1 and not out.is_dir() and not wants_dir:
            _refuse_evidence(out, bundle_paths)
            return {names[0]: out}
        if out.exists() and not out.is_dir():
            raise ReportError(f"{out} is a file; several formats need an output directory")
        stem = report_stem(doc, bundle_paths)
        targets = {name: out / (stem + FORMATS[name]) for name in names}
        for path in targets.values():
            _refuse_evidence(path, bundle_paths)
    except OSError as exc:
        raise write_failure(f"cannot write reports to {out}", exc, ReportNotWritten, ReportError) from exc
    return targets


def _refuse_evidence(path: Path, bundle_paths: Sequence[str | os.PathLike[str]]) -> None:
    """A report never replaces evidence: neither a bundle being analyzed nor any other gzip file
    (``-o bundle.tgz`` by mistake would otherwise destroy the only copy)."""
    if not path.is_file():
        return
    for bundle in bundle_paths:
        try:
            same = os.path.samefile(path, bundle)
        except OSError:
            continue
        if same:
            raise ReportError(f"refusing to write the report over the bundle it reads: {path}")
    try:
        with open(path, "rb") as handle:
            magic = handle.read(2)
    except OSError:
        return
    if magic == b"\x1f\x8b":
        raise ReportError(f"refusing to overwrite {path}: it is a gzip file (a bundle?), not a report")


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def render(
    doc: Mapping[str, Any],
    formats: Sequence[str],
    out: Path | str,
    bundle_paths: Sequence[str | os.PathLike[str]] = (),
    paper: str = "a4",
) -> list[Path]:
    """Write ``doc`` in each of ``formats`` (``html``, ``pdf``, ``md``, ``json``); return the paths.

    The HTML is made once and shared by the PDF. Everything is rendered before anything is
    written, so a failing format leaves no partial set of files behind.
    """
    from forensics.report.html import page_size, render_html_view
    from forensics.report.view import build_view

    targets = output_paths(doc, formats, out, bundle_paths)
    page_size(paper)  # validate before any work
    view = build_view(doc)
    payloads: dict[str, bytes] = {}
    html: str | None = None
    if "html" in targets or "pdf" in targets:
        html = render_html_view(view, paper)
    for name in targets:
        if name == "html":
            assert html is not None
            payloads[name] = html.encode("utf-8")
        elif name == "pdf":
            from forensics.report.pdf import render_pdf

            assert html is not None
            payloads[name] = render_pdf(html)
        elif name == "md":
            from forensics.report.markdown import render_markdown_view

            payloads[name] = render_markdown_view(view).encode("utf-8")
        else:
            try:
                text = json.dumps(
                    doc, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False
                )
            except (TypeError, ValueError) as exc:
                raise ReportError(f"analysis document is not JSON-serialisable: {exc}") from exc
            payloads[name] = (text + "\n").encode("utf-8")
    written = []
    for name, path in targets.items():
        try:
            _write_atomic(path, payloads[name])
        except OSError as exc:
            raise write_failure(f"cannot write {path}", exc, ReportNotWritten, ReportError) from exc
        written.append(path)
    return written

