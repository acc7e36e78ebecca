"""``gpuforensics capture``: this node into an evidence bundle (a directory, or ``-o -`` a stream)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from forensics.cli.common import (
    EXIT_INTERRUPTED,
    RING_HELP,
    finite,
    live_printer,
    names,
    parse_since,
    progress_printer,
    settings_map,
)
from forensics.errors import UsageError

__all__ = ["capture"]


@click.command()
@click.option("-o", "--output", "output", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Directory to write the bundle into; '-' writes the bundle's bytes to stdout.")
@click.option("--duration", type=click.FloatRange(min=0), default=0.0, show_default=True, callback=finite,
              help="Seconds to sample GPU, process and cgroup figures (0: one snapshot).")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True, callback=finite,
              help="Seconds between samples within --duration.")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True, callback=finite,
              help="Time budget for collection beyond the sampling window; a hung source is killed.")
@click.option("--only", help="Comma-separated collectors to run (see `gpuforensics collectors`).")
@click.option("--skip", help="Comma-separated collectors not to run.")
@click.option("--all-processes", is_flag=True, help="Record every process on the host, not only GPU and container processes.")
@click.option("--since", help="Start of the history window for everything (kernel log, events, exited "
              "containers, the flight recorder's ring): ISO time or a duration (30m, 2h). Overrides --lookback.")
@click.option("--lookback", type=click.FloatRange(min=0), default=3600.0, show_default=True, callback=finite,
              help="Seconds of history when --since is not given (the window is capture start minus this).")
@click.option("--ring", "ring_dir", type=click.Path(file_okay=False),
              help=f"Flight recorder ring to fold in, as --set ring.dir=DIR {RING_HELP}.")
@click.option("--no-redact", is_flag=True, help="Keep secrets (env values, passwords in command lines) verbatim.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Kubeconfig file (default: in-cluster, then $KUBECONFIG, ~/.kube/config).")
@click.option("--context", "kube_context", help="Kubeconfig context to use.")
@click.option("--node", "node_name", help="Kubernetes node name of this host (default: $NODE_NAME, then the host name).")
@click.option("--nvml-library", type=click.Path(dir_okay=False), help="Path of libnvidia-ml.so.1 when it is not on the loader's path.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="Collector-specific setting, e.g. podresources.socket=/path.")
@click.option("--prometheus", "prometheus_url", metavar="URL", help="Prometheus to fold this node's exporter history from (dcgm-exporter, cAdvisor, node-exporter, kube-state-metrics).")
@click.option("--prometheus-token-file", type=click.Path(dir_okay=False), help="File holding a bearer token for --prometheus.")
@click.option("--prometheus-ca", type=click.Path(dir_okay=False), help="CA bundle to trust for an https --prometheus.")
@click.option("--until", help="End of the --prometheus history window: ISO time, clock time (15:30, UTC) or a duration ago (default: now).")
@click.option("--progress/--quiet", default=None, help="Progress on stderr (default: when stderr is a terminal).")
def capture(output: Path, duration: float, interval: float, timeout: float, only: str | None, skip: str | None,
            all_processes: bool, since: str | None, lookback: float, no_redact: bool, kubeconfig: str | None,
            kube_context: str | None, node_name: str | None, nvml_library: str | None,
            settings: tuple[str, ...], prometheus_url: str | None, prometheus_token_file: str | None,
            prometheus_ca: str | None, until: str | None, progress: bool | None, ring_dir: str | None) -> None:
    """Snapshot (and optionally sample) this node into an evidence bundle.

    Collects NVML GPU state and processes, Docker containers, /proc and cgroup counters, the kernel
    log and Kubernetes pods, each under its own deadline; one dead source never costs the rest.
    Prints the bundle's path on stdout (progress goes to stderr). Run as root for full evidence.
    With `-o -` the bundle itself goes to stdout (its name, size and SHA-256 to stderr): this is
    how `cluster capture` streams bundles back through `exec`.

    With --prometheus, the node's exporter history between --since and --until is folded in; with
    --only prometheus it is a bundle of history alone, which can be made from any machine.

    \b
    Example:
      sudo gpuforensics capture --duration 60 --interval 1 -o /var/tmp
      gpuforensics capture --only prometheus --prometheus http://prom:9090 --node gpu-07 --since 14:00 --until 15:30
      kubectl exec POD -- gpuforensics capture -o - > node.tgz
    """
    from forensics.capture import CaptureOptions, run_capture, validate_settings

    extra = settings_map(settings)
    if ring_dir is not None:
        extra["ring.dir"] = ring_dir
    for key, given in (("prometheus.url", prometheus_url), ("prometheus.token_file", prometheus_token_file),
                       ("prometheus.ca_file", prometheus_ca)):
        if given:
            extra[key] = given
    validate_settings(extra)
    if duration and interval > duration:
        raise UsageError(f"--interval ({interval:g} s) is longer than --duration ({duration:g} s)")
    to_stdout = str(output) == "-"
    if to_stdout and sys.stdout.isatty():
        raise UsageError("--output -: refusing to write a bundle to a terminal; redirect stdout to a file or pipe")
    try:
        is_dir = to_stdout or output.is_dir()
    except OSError as exc:  # a name over NAME_MAX, a directory we may not search
        raise UsageError(f"--output: {output}: {exc.strerror or exc}") from None
    if not is_dir:
        raise UsageError(f"--output: directory does not exist: {output}")
    options = CaptureOptions(
        duration_s=duration, interval_s=interval, timeout_s=timeout, redact=not no_redact,
        all_processes=all_processes, since=parse_since(since), until=parse_since(until, "--until"),
        lookback_s=lookback,
        kubeconfig=kubeconfig, kube_context=kube_context, node_name=node_name,
        nvml_library=nvml_library, only=names(only), skip=names(skip), extra=extra,
        argv=tuple(["gpuforensics", *sys.argv[1:]]),
    )
    if options.until is not None and options.since is not None and options.until <= options.since:
        raise UsageError(f"--until ({until}) is not after --since ({since})")
    show = sys.stderr.isatty() if progress is None else progress
    if to_stdout:
        from forensics.capture import capture_to_stream

        streamed = capture_to_stream(options, sys.stdout.buffer, progress=progress_printer(show))
        manifest, interrupted = streamed.manifest, streamed.interrupted
        where = f"streamed {streamed.name} to stdout: {streamed.size} bytes, sha256 {streamed.sha256}"
    else:
        result = run_capture(options, output, progress=progress_printer(show), live=live_printer(show))
        manifest, interrupted, where = result.manifest, result.interrupted, str(result.path)
    failed = [c for c in manifest["collectors"] if c["status"] in ("failed", "partial")]
    if failed and progress is not False:  # also in cron and DaemonSet logs; --quiet silences it
        click.echo("gpuforensics: incomplete: " + ", ".join(f"{c['name']} {c['status']}" for c in failed), err=True)
    click.echo(f"gpuforensics: {where}" if to_stdout else where, err=to_stdout)
    if interrupted:
        click.echo("gpuforensics: capture interrupted; the bundle holds what was collected", err=True)
        sys.exit(EXIT_INTERRUPTED)
