"""Capture orchestration: collectors in child processes under hard deadlines, sampling, the bundle.

The public entry points (what :mod:`forensics.cli` calls): :func:`run_capture` with
:class:`CaptureOptions`, :func:`validate_settings` and :data:`SETTINGS` for ``--set``, and
:func:`load_collectors` for ``gpuforensics collectors``; :func:`capture_to_stream` for
``capture -o -`` (the bundle's bytes on stdout, how ``cluster capture`` brings bundles back).
"""

from __future__ import annotations

from forensics.capture.registry import load_collectors
from forensics.capture.runner import CaptureResult, run_capture
from forensics.capture.settings import SETTINGS, validate_settings
from forensics.capture.spool import StreamedBundle, capture_to_stream
from forensics.collect.context import CaptureOptions

__all__ = ["SETTINGS", "CaptureOptions", "CaptureResult", "StreamedBundle", "capture_to_stream", "load_collectors",
           "run_capture", "validate_settings"]
