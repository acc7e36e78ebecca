"""The capture a fired trigger runs: ``python -m forensics.capture.triggered``.

Started by the flight recorder's trigger engine (forensics.record.triggers.engine) by module name,
as capture loads collectors (the recorder never imports capture), with ``PR_SET_PDEATHSIG`` armed
and in its own process group, so it dies with the recorder. Reads one JSON object on stdin::

    {"out": DIR, "trigger": {...manifest trigger entry...},
     "options": {"duration_s": 30, "interval_s": 1, "timeout_s": 120, "since_unix": T,
                 "redact": true, "nvml_library": null, "extra": {"ring.dir": RING}, "argv": [...]}}

runs capture's own :func:`forensics.capture.run_capture` (every collector, as ``gpuforensics
capture --duration D --since T --ring RING``) and prints one JSON line on stdout:
``{"path": BUNDLE, "interrupted": bool, "incomplete": [collector status, ...]}`` or
``{"error": TEXT}`` (exit 1).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from forensics.capture import CaptureOptions, run_capture, validate_settings

_FIELDS = {"duration_s", "interval_s", "timeout_s", "redact", "nvml_library", "extra", "argv",
           "only", "skip", "node_name", "kubeconfig", "kube_context", "all_processes"}


def main() -> int:
    try:
        spec: dict[str, Any] = json.loads(sys.stdin.read())
        opts = dict(spec["options"])
        since = datetime.fromtimestamp(float(opts.pop("since_unix")), UTC)
        kwargs = {k: v for k, v in opts.items() if k in _FIELDS}
        for key in ("argv", "only", "skip"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        validate_settings(kwargs.get("extra") or {})
        options = CaptureOptions(since=since, trigger=spec.get("trigger"), **kwargs)
        result = run_capture(options, spec["out"], notice=lambda msg: print(f"gpuforensics: {msg}", file=sys.stderr))
    except Exception as exc:  # noqa: BLE001 - reported to the recorder, which logs it
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    incomplete = [f"{c['name']} {c['status']}" for c in result.manifest["collectors"]
                  if c["status"] in ("failed", "partial")]
    print(json.dumps({"path": str(result.path), "interrupted": result.interrupted, "incomplete": incomplete}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
