"""Capture orchestration: collectors in child processes under hard deadlines, sampling, the bundle.

The public entry points (what :mod:`forensics.cli` calls): :func:`run_capture` with
:class:`CaptureOptions`, :func:`validate_settings` and :data:`SETTINGS` for ``--set``, and
:func:`load_collectors` for ``gpuforensics collectors``.
"""

from __future__ import annotations

from forensics.capture.context import CaptureOptions
from forensics.capture.registry import load_collectors
from forensics.capture.runner import CaptureResult, run_capture
from forensics.capture.settings import SETTINGS, validate_settings

__all__ = ["SETTINGS", "CaptureOptions", "CaptureResult", "load_collectors", "run_capture", "validate_settings"]
