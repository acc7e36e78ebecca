"""The evidence bundle: format constants, atomic writer, hostile-input reader, verification, redaction.

The public entry points for reading (what :mod:`forensics.cli` calls): :func:`open_bundle` under
:class:`ReadLimits`, and :func:`verify_bundle`.
"""

from __future__ import annotations

from forensics.bundle.reader import ReadLimits, open_bundle
from forensics.bundle.verify import verify_bundle

__all__ = ["ReadLimits", "open_bundle", "verify_bundle"]
