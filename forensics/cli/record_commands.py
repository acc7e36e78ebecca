"""``gpuforensics record`` (the flight recorder, in the foreground) and ``gpuforensics ring`` (what
its ring holds)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from forensics.cli.common import RING_HELP, finite, names, parse_bytes, parse_seconds, settings_map

__all__ = ["record", "ring"]


@click.command()
@click.option("--ring", "ring_dir", type=click.Path(file_okay=False, path_type=Path),
              help=f"Ring directory, created 0700, files 0600 {RING_HELP}.")
@click.option("--interval", type=click.FloatRange(min=0.05, max=3600), default=1.0, show_default=True,
              callback=finite, help="Seconds between samples.")
@click.option("--max-bytes", default="512M", show_default=True, help="Cap of the ring on disk (oldest data dropped first).")
@click.option("--retention", default="24h", show_default=True, help="How long records are kept (oldest dropped first).")
@click.option("--sources", help="Comma-separated sources to record (default: every one the recorder knows: "
              "nvml, procfs, cgroups, kernel, docker).")
@click.option("--no-redact", is_flag=True, help="Keep secrets verbatim in the ring (not recommended).")
@click.option("--nvml-library", type=click.Path(dir_okay=False), help="Path of libnvidia-ml.so.1 when it is not on the loader's path.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="Collector setting, as for capture.")
@click.option("--status", is_flag=True, help="Show the ring's span, size, gaps and writer, and exit (as `gpuforensics ring`).")
def record(ring_dir: Path | None, interval: float, max_bytes: str, retention: str, sources: str | None,
           no_redact: bool, nvml_library: str | None, settings: tuple[str, ...], status: bool) -> None:
    """Run the flight recorder: sample this node into a bounded, crash-safe ring, in the foreground.

    Samples what capture samples (NVML devices and processes, per-process utilisation, cgroup
    CPU/memory/PSI of containers and GPU processes, the kernel log, Docker events) every
    --interval at nice 10, records each GPU process and container when first seen, and keeps
    --retention of it within --max-bytes. Stop it with SIGTERM. `capture --since 30m` folds it in.

    \b
    Example:
      sudo gpuforensics record --ring /var/lib/gpuforensics/ring --interval 1
    """
    if status:
        _print_ring_status(ring_dir, verify=False, as_json=False)
        return
    from forensics.capture import validate_settings
    from forensics.record import SOURCE_NAMES, RecordOptions, run_recorder
    from forensics.ring import resolve_ring_dir

    extra = settings_map(settings)
    validate_settings(extra)
    options = RecordOptions(ring=resolve_ring_dir(ring_dir), interval_s=interval,
                            max_bytes=parse_bytes("--max-bytes", max_bytes), retention_s=parse_seconds("--retention", retention),
                            sources=names(sources) or SOURCE_NAMES, redact=not no_redact,
                            nvml_library=nvml_library, extra=extra,
                            argv=tuple(["gpuforensics", *sys.argv[1:]]))
    result = run_recorder(options)
    click.echo(json.dumps(result, sort_keys=True))


def _print_ring_status(ring_dir: Path | None, verify: bool, as_json: bool) -> None:
    from forensics.record import format_status, ring_status
    from forensics.ring import resolve_ring_dir

    doc = ring_status(resolve_ring_dir(ring_dir), verify=verify)
    click.echo(json.dumps(doc, sort_keys=True, indent=2) if as_json else format_status(doc))


@click.command()
@click.argument("ring_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--verify", is_flag=True, help="Read every segment (SHA-256 of sealed ones) and list gaps and clock jumps.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")
def ring(ring_dir: Path | None, verify: bool, as_json: bool) -> None:
    """Show the flight recorder ring's span, size, gaps and writer (RING_DIR default:
    $GPUFORENSICS_RING, then /var/lib/gpuforensics/ring).

    \b
    Example:
      gpuforensics ring /var/lib/gpuforensics/ring --verify
    """
    _print_ring_status(ring_dir, verify, as_json)
