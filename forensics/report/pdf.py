"""PDF report: the HTML report laid out by weasyprint with the print rules of ``report.css``.

A4 or Letter (``@page size``), running header (host and capture time), footer (bundle SHA-256,
page X of Y), repeated table headers. weasyprint gets :class:`NoFetch` as its URL fetcher: a
string from a bundle (``<img src=file:///etc/passwd>``) is escaped text anyway, and even a
resource reference that reached the layout engine would be refused, never read.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from forensics.errors import ReportError

__all__ = ["NoFetch", "render_pdf"]


def _fetcher_base() -> type:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from weasyprint.urls import URLFetcher

    base: type = URLFetcher
    return base


class NoFetch:
    """A weasyprint URL fetcher that fetches nothing and records what it was asked for."""

    def __init__(self) -> None:
        self.refused: list[str] = []

    def make(self) -> Any:
        """A ``weasyprint.urls.URLFetcher`` whose every fetch is refused (recorded in ``refused``)."""
        refused = self.refused
        base = _fetcher_base()

        class _Refuse(base):  # type: ignore[misc, valid-type]
            def fetch(self, url: str, headers: Any = None) -> Any:
                refused.append(url)
                raise ValueError(f"gpuforensics reports fetch nothing (refused {url[:80]!r})")

        return _Refuse(allowed_protocols=(), allow_redirects=False, fail_on_errors=False)


def render_pdf(html: str, fetcher: NoFetch | None = None) -> bytes:
    """Lay out ``html`` (from :mod:`forensics.report.html`) as PDF bytes."""
    try:
        with warnings.catch_warnings():
            # weasyprint warns (DeprecationWarning) at import when libharfbuzz-subset is missing;
            # it still works (fontTools subsets the fonts), so keep that out of the user's output.
            warnings.simplefilter("ignore", DeprecationWarning)
            import weasyprint
    except (ImportError, OSError) as exc:
        raise ReportError(
            f"PDF output needs weasyprint and its system libraries (pango): {exc}; "
            "install them (pip install weasyprint; apt-get install libpango-1.0-0) or use --format html"
        ) from exc
    fetcher = fetcher or NoFetch()
    # weasyprint logs every refused fetch and unsupported CSS as warnings: keep them out of the CLI.
    logger = logging.getLogger("weasyprint")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        document = weasyprint.HTML(string=html, base_url=None, url_fetcher=fetcher.make())
        pdf = document.write_pdf()
    except ReportError:
        raise
    except Exception as exc:
        raise ReportError(f"PDF report could not be laid out: {type(exc).__name__}: {exc}") from exc
    finally:
        logger.setLevel(previous)
    if not isinstance(pdf, bytes) or not pdf.startswith(b"%PDF"):
        raise ReportError("PDF report could not be laid out: weasyprint returned no PDF")
    return pdf
