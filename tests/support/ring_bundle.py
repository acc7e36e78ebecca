"""A bundle's flight-recorder members as the analysis reads them: ``ring/<member>`` rebuilt from
the ring segments the bundle carries (forensics.analysis.ring_view), or stored whole by a capture
of an earlier version."""

from __future__ import annotations

from pathlib import Path

from forensics.analysis.ring_view import ring_view
from forensics.analysis.source import Source
from forensics.bundle.reader import open_bundle

__all__ = ["ring_member"]


def ring_member(bundle: Path, member: str) -> bytes:
    """``member`` (``ring/...``) of ``bundle``; AssertionError when the bundle has no such member."""
    opened = open_bundle(bundle)
    if member in opened.members:
        return bytes(opened.members[member])
    view = ring_view(Source(opened, bundle.name, opened.members))
    data = view.real_bytes(member) if view is not None else None
    assert data is not None, f"{member} not in {bundle} (nor rebuilt from its ring segments)"
    return bytes(data)
