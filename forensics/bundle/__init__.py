"""The evidence bundle: format constants, atomic writer, hostile-input reader, verification, redaction.

The public entry points for reading (what :mod:`forensics.cli` calls): :func:`open_bundle` under
:class:`ReadLimits`, and :func:`verify_bundle`. They are imported when first asked for (PEP 562):
``capture`` imports this package for its format and writer, and the reader's and verifier's
imports (tarfile readers, the timestamp and attribution parsers) were a tenth of its start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forensics.bundle.reader import ReadLimits, open_bundle
    from forensics.bundle.verify import verify_bundle

__all__ = ["ReadLimits", "open_bundle", "verify_bundle"]

_LAZY = {"ReadLimits": "forensics.bundle.reader", "open_bundle": "forensics.bundle.reader",
         "verify_bundle": "forensics.bundle.verify"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
