"""What the finders read: a log's text with each line's timestamp blanked out.

Docker (``timestamps=1``) and the kubelet (``timestamps=true``) prefix every line of a log with its
RFC 3339 time. A secret printed over several lines (a Kubernetes Secret's YAML, a netrc file, a
PEM block) is then broken by those prefixes, and the rules that know its shape no longer match.
The finders read a copy where each prefix is replaced by as many blanks: the same length, so every
offset found in the copy is the same in the log, and the YAML's indentation moves by the same
amount on every line (its structure is kept). The log itself is not changed.
"""

from __future__ import annotations

import re2

__all__ = ["finder_view"]

_OPTIONS = re2.Options()
_LINE_TIME_RE = re2.compile(
    rb"(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) ", options=_OPTIONS)
_PREFIX_LEN = len(b"2006-01-02T15:04:05Z ")


def finder_view(data: bytes) -> bytes:
    """``data`` with every line's leading timestamp blanked (the same object where its first line
    has none: a text that is not a timestamped log)."""
    if len(data) < _PREFIX_LEN or not _LINE_TIME_RE.match(data):
        return data
    return _LINE_TIME_RE.sub(lambda m: b" " * (m.end() - m.start()), data)  # type: ignore[no-any-return]
