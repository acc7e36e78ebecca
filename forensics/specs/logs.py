"""``logs.*``: the settings of workload logs, which two sources collect (``docker`` from the
engine, ``kubernetes`` from the API server), declared once as a :class:`SettingsGroup`.

Not a source of its own: a collector of its own would need both clients and the containers and
pods the docker and kubernetes collectors already listed (collectors may not import each other),
so each of those two takes the logs of its own containers, bounded by these settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import SettingsGroup, setting

__all__ = ["LOGS", "LogsSettings"]


@dataclass(frozen=True)
class LogsSettings:
    max_bytes: int = setting("positive-int", "bytes of log kept per container (the newest lines)", 256 * 1024)


LOGS = SettingsGroup("logs", LogsSettings)
