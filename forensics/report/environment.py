"""The jinja2 environment of the HTML report: templates from ``report_templates/``, autoescape on.

Autoescaping is always on (every string in the analysis document comes from a bundle), undefined
names are errors (a template typo fails the tests instead of printing nothing), and the only
values marked safe are our own: the stylesheet read from ``report_templates/report.css`` and the
SVG charts produced by :mod:`forensics.report.charts`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import ReportError
from forensics.report import formatting

if TYPE_CHECKING:
    import jinja2

__all__ = ["make_environment", "read_stylesheet", "templates_dir"]

_TEMPLATES_DIRNAME = "report_templates"


def templates_dir() -> Path:
    """``report_templates/`` beside the ``forensics`` package (repository root or install prefix)."""
    package_root = Path(__file__).resolve().parent.parent.parent
    candidate = package_root / _TEMPLATES_DIRNAME
    if not (candidate / "report.html.j2").is_file():
        raise ReportError(
            f"report templates not found in {candidate} (is the package installed completely?)"
        )
    return candidate


def read_stylesheet() -> str:
    """The report's CSS (``report_templates/report.css``), inlined into every HTML report."""
    path = templates_dir() / "report.css"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot read the report stylesheet {path}: {exc}") from exc


@lru_cache(maxsize=1)
def make_environment() -> jinja2.Environment:
    """A jinja2 environment with autoescape, strict undefined and the report's filters."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        bytes=formatting.fmt_bytes,
        pct=formatting.fmt_pct,
        ratio=formatting.fmt_ratio,
        confidence=formatting.fmt_confidence,
        duration=formatting.fmt_duration,
        time=formatting.fmt_time,
        date=formatting.fmt_date,
        time_short=formatting.fmt_time_short,
        unix_clock=formatting.fmt_unix_clock,
        short_id=formatting.short_id,
    )
    return env
