"""``gpuforensics record`` (the flight recorder, in the foreground) and ``gpuforensics ring`` (what
its ring holds)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from forensics.cli.common import RING_HELP, finite, names, parse_bytes, parse_seconds, settings_map
from forensics.errors import UsageError

__all__ = ["record", "ring"]


@click.command()
@click.option("--ring", "ring_dir", type=click.Path(file_okay=False, path_type=Path),
              help=f"Ring directory, created 0700, files 0600 {RING_HELP}.")
@click.option("--interval", type=click.FloatRange(min=0.05, max=3600), default=1.0, show_default=True,
              callback=finite, help="Seconds between samples.")
@click.option("--max-bytes", default="512M", show_default=True, help="Cap of the ring on disk (oldest data dropped first).")
@click.option("--retention", default="24h", show_default=True, help="How long records are kept (oldest dropped first).")
@click.option("--sources", help="Comma-separated sources to record (default: every one the recorder knows: "
              "nvml, procfs, cgroups, kernel, docker, kubernetes).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False),
              help="Kubeconfig for the Kubernetes events (default: in-cluster, then $KUBECONFIG, ~/.kube/config; none: not recorded).")
@click.option("--context", "kube_context", help="Kubeconfig context to use.")
@click.option("--node", "node_name", help="Kubernetes node name of this host (default: $NODE_NAME, then the host name).")
@click.option("--no-redact", is_flag=True, help="Keep secrets verbatim in the ring (not recommended; a redacted capture leaves those records out).")
@click.option("--nvml-library", type=click.Path(dir_okay=False), help="Path of libnvidia-ml.so.1 when it is not on the loader's path.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="Collector setting, as for capture.")
@click.option("--status", is_flag=True, help="Show the ring's span, size, gaps and writer, and exit (as `gpuforensics ring`).")
@click.option("--trigger", "triggers", multiple=True, metavar="RULE",
              help="Capture when RULE fires (repeatable): gpu.util>90%:5m, gpu.memory>95%:1m, container.throttled>50%:2m, "
              "psi.memory.some>20%:1m, oom, xid, xid:79, gpu-lost, unallocated-gpu-use; against each subject's own "
              "normal: container.gpu.sm<baseline:5m, gpu.util>baseline+4mad:10m (docs/triggers.md).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Thresholds file as for `analyze --config` (defaults of rules without a threshold), "
              "with an optional `triggers` list of rules.")
@click.option("--bundles", "bundles_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the bundles triggers capture (created 0700; required with --trigger).")
@click.option("--trigger-duration", default="30s", show_default=True, help="Sampling window of a triggered capture.")
@click.option("--cooldown", default="15m", show_default=True, help="At most one capture per trigger within this time.")
@click.option("--keep", type=click.IntRange(min=1), default=10, show_default=True, help="Triggered bundles kept (oldest deleted).")
@click.option("--keep-bytes", default="2G", show_default=True, help="Cap of the triggered bundles together (oldest deleted).")
@click.option("--on-capture", "on_capture", metavar="CMD",
              help="Command run with the bundle path appended after each triggered capture (exit status logged).")
@click.option("--on-capture-timeout", default="5m", show_default=True, help="--on-capture is killed after this.")
@click.option("--metrics-addr", metavar="HOST:PORT", help="Serve Prometheus metrics (GPU processes by container, pod and "
              "grant; per GPU; triggers; the recorder's cost) on HOST:PORT; loopback unless a host is given (docs/metrics.md).")
@click.option("--metrics-tls-cert", type=click.Path(dir_okay=False), help="TLS certificate (PEM) of the metrics endpoint.")
@click.option("--metrics-tls-key", type=click.Path(dir_okay=False), help="Its private key (PEM).")
@click.option("--metrics-client-ca", type=click.Path(dir_okay=False),
              help="Require client certificates signed by this CA (PEM) on the metrics endpoint.")
def record(ring_dir: Path | None, interval: float, max_bytes: str, retention: str, sources: str | None,
           no_redact: bool, nvml_library: str | None, settings: tuple[str, ...], status: bool,
           triggers: tuple[str, ...], config_file: Path | None, bundles_dir: Path | None, trigger_duration: str,
           cooldown: str, keep: int, keep_bytes: str, on_capture: str | None, on_capture_timeout: str,
           metrics_addr: str | None, metrics_tls_cert: str | None, metrics_tls_key: str | None,
           metrics_client_ca: str | None, kubeconfig: str | None, kube_context: str | None,
           node_name: str | None) -> None:
    """Run the flight recorder: sample this node into a bounded, crash-safe ring, in the foreground.

    Samples what capture samples (NVML devices and processes, per-process utilisation, cgroup
    CPU/memory/PSI of containers and GPU processes, the kernel log, Docker events, and the
    Kubernetes events of this node and its pods where a configuration is found) every
    --interval at nice 10, records each GPU process and container when first seen, and keeps
    --retention of it within --max-bytes. Stop it with SIGTERM. `capture --since 30m` folds it in.

    \b
    With --trigger, a rule that fires starts a capture (the same collectors, sampling
    --trigger-duration, --since covering the rule's lead-up) into --bundles, at most one per
    trigger per --cooldown and one at a time; one line with the bundle path is logged. A bad rule
    is a usage error (exit 2) before anything runs.

    \b
    Example:
      sudo gpuforensics record --ring /var/lib/gpuforensics/ring --interval 1
      sudo gpuforensics record --trigger 'gpu.util>90%:5m' --trigger oom --bundles /var/lib/gpuforensics/bundles
      sudo gpuforensics record --metrics-addr 127.0.0.1:9464
    """
    if status:
        _print_ring_status(ring_dir, verify=False, as_json=False)
        return
    from forensics.capture import validate_settings
    from forensics.record import SOURCE_NAMES, RecordOptions, run_recorder
    from forensics.ring import resolve_ring_dir

    extra = settings_map(settings)
    validate_settings(extra)
    kube = {"kubeconfig": kubeconfig, "kube_context": kube_context, "node_name": node_name}
    trigger_options = _trigger_options(triggers, config_file, bundles_dir, trigger_duration, cooldown, keep,
                                       keep_bytes, on_capture, on_capture_timeout,
                                       {k: v for k, v in kube.items() if v})
    from forensics.record.live.metrics import metrics_options

    metrics = metrics_options(metrics_addr, metrics_tls_cert, metrics_tls_key, metrics_client_ca)
    options = RecordOptions(ring=resolve_ring_dir(ring_dir), interval_s=interval, triggers=trigger_options, metrics=metrics,
                            max_bytes=parse_bytes("--max-bytes", max_bytes), retention_s=parse_seconds("--retention", retention),
                            sources=names(sources) or SOURCE_NAMES, redact=not no_redact,
                            nvml_library=nvml_library, extra=extra,
                            argv=tuple(["gpuforensics", *sys.argv[1:]]),
                            kubeconfig=kubeconfig, kube_context=kube_context, node_name=node_name)
    result = run_recorder(options)
    click.echo(json.dumps(result, sort_keys=True))


def _trigger_options(rules: tuple[str, ...], config_file: Path | None, bundles_dir: Path | None, duration: str,
                     cooldown: str, keep: int, keep_bytes: str, on_capture: str | None, on_timeout: str,
                     capture_args: dict[str, Any] | None = None) -> Any:
    """``record --trigger`` and its bounds, checked before anything runs (None: no trigger);
    ``capture_args``: more capture options of the triggered captures (``--kubeconfig``...)."""
    from forensics.record.triggers import (
        TriggerOptions,
        load_trigger_config,
        parse_on_capture,
        parse_rules,
    )

    cfg, from_file = load_trigger_config(config_file)
    texts = (*from_file, *rules)
    if not texts:
        return None
    if bundles_dir is None:
        raise UsageError("--trigger needs --bundles DIR (where triggered captures go)")
    options = TriggerOptions(
        rules=parse_rules(texts, cfg), bundles=bundles_dir,
        trigger_duration_s=parse_seconds("--trigger-duration", duration),
        cooldown_s=parse_seconds("--cooldown", cooldown), keep=keep, keep_bytes=parse_bytes("--keep-bytes", keep_bytes),
        on_capture=parse_on_capture(on_capture), on_capture_timeout_s=parse_seconds("--on-capture-timeout", on_timeout),
        active_sm_pct=cfg.process_active_sm_pct, capture_args=dict(capture_args or {}))
    options.check()
    return options


def _print_ring_status(ring_dir: Path | None, verify: bool, as_json: bool) -> None:
    from forensics.record import format_status, ring_status
    from forensics.ring import resolve_ring_dir

    doc = ring_status(resolve_ring_dir(ring_dir), verify=verify)
    click.echo(json.dumps(doc, sort_keys=True, indent=2) if as_json else format_status(doc))


@click.command()
@click.argument("ring_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--ring", "ring_option", type=click.Path(file_okay=False, path_type=Path),
              help="The ring directory, as `record --ring` and `capture --ring` name it (or give it as RING_DIR).")
@click.option("--verify", is_flag=True, help="Read every segment (SHA-256 of sealed ones) and list gaps and clock jumps.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")
def ring(ring_dir: Path | None, ring_option: Path | None, verify: bool, as_json: bool) -> None:
    """Show the flight recorder ring's span, size, gaps and writer (RING_DIR or --ring; default:
    $GPUFORENSICS_RING, then /var/lib/gpuforensics/ring).

    \b
    Example:
      gpuforensics ring /var/lib/gpuforensics/ring --verify
    """
    if ring_dir is not None and ring_option is not None and ring_dir != ring_option:
        raise click.UsageError(f"two rings named: RING_DIR {ring_dir} and --ring {ring_option}")
    _print_ring_status(ring_dir or ring_option, verify, as_json)
