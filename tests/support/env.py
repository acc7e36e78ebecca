"""Skip-or-fail: a test that needs something absent skips with a reason, except in CI (CI=true),
where the thing is expected and its absence is a failure."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (in CI) unless ``condition`` holds."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


def is_root() -> bool:
    return os.geteuid() == 0
