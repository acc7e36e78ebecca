"""Integration-test fixtures: a real Docker engine for the whole suite (tests/support/docker_engine.py).

``docker_engine`` (session scope) is the ``DOCKER_HOST`` engine when it answers, else a private
dockerd with the nvidia runtime as its default; it skips when none can be had, and fails under
``CI=true``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:  # plain `pytest` (not `python -m pytest`) does not put the root on sys.path
    sys.path.insert(0, _ROOT)

from tests.support.docker_engine import docker_engine  # noqa: E402,F401 - the fixture

__all__ = ["docker_engine"]
