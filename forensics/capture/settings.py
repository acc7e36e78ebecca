"""The collector settings ``capture --set KEY=VALUE`` accepts, checked before anything runs.

Derived from the source specs (:mod:`forensics.specs`): each declares its settings (name, kind,
default, one-line help) once, and collectors read them as a typed object
(``SPEC.read_settings(ctx.options.extra)``). A typo (``podresources.sockt=``) or a bad value
(``kernel.max_bytes=-5``) is a usage error instead of a silently ignored or absurd setting.
"""

from __future__ import annotations

from collections.abc import Mapping

from forensics.errors import UsageError
from forensics.specs import Setting, all_specs

__all__ = ["SETTINGS", "Setting", "validate_settings"]

SETTINGS: dict[str, Setting] = {
    key: s for spec in all_specs()
    for table in (spec.setting_table(), *(group.setting_table() for group in spec.shared))
    for key, s in table.items()}


def validate_settings(extra: Mapping[str, str]) -> None:
    """Raise :class:`UsageError` for an unknown key or a value of the wrong kind."""
    for key, value in extra.items():
        setting = SETTINGS.get(key)
        if setting is None:
            raise UsageError(f"--set: unknown setting {key!r} (known: {', '.join(sorted(SETTINGS))})")
        problem = setting.problem(value)
        if problem:
            raise UsageError(f"--set {key}={value!r}: {problem}")
