"""Triggers: the flight recorder captures by itself when a rule fires (``record --trigger RULE``).

- :mod:`forensics.record.triggers.grammar`: the rule grammar (``gpu.util>90%:5m``, ``oom``,
  ``xid:79``, ...), parsed before anything runs (a bad rule is a usage error, exit 2);
- :mod:`forensics.record.triggers.evaluate`: rules over the live state
  (:mod:`forensics.record.live`), once per recorder tick;
- :mod:`forensics.record.triggers.engine`: cooldown, one capture at a time, the capture child,
  rotation of ``--bundles``, ``--on-capture``;
- :mod:`forensics.capture.triggered`: the capture itself, in its own process.

Documented for users in docs/triggers.md; the manifest's ``trigger`` entry in docs/bundle-format.md.
"""

from forensics.record.triggers.config import load_trigger_config
from forensics.record.triggers.engine import (
           TriggerEngine,
           TriggerOptions,
           parse_on_capture,
           rotate_bundles,
)
from forensics.record.triggers.evaluate import Evaluator, Firing
from forensics.record.triggers.grammar import (
           EVENTS,
           METRICS,
           Rule,
           parse_duration,
           parse_rule,
           parse_rules,
)

__all__ = ["EVENTS", "METRICS", "Evaluator", "Firing", "Rule", "TriggerEngine", "TriggerOptions",
           "load_trigger_config", "parse_duration", "parse_on_capture", "parse_rule", "parse_rules",
           "rotate_bundles"]
