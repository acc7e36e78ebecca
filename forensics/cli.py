"""The ``gpuforensics`` command line: parses options, calls the library, maps errors to exit codes.

It calls the library only through its public entry points: :mod:`forensics.capture`,
:mod:`forensics.bundle`, :mod:`forensics.inventory`, :mod:`forensics.analysis`,
:mod:`forensics.report`, :mod:`forensics.cluster` and the document contract
:mod:`forensics.document_format`; each is imported inside the command that needs it, so ``--help``
stays instant. The ``cluster`` group lives in :mod:`forensics.cli_cluster`.

Exit codes: 0 success; 1 ``verify`` integrity failure, ``analyze --fail-on`` threshold reached, or
a ``cluster capture`` node without a verified bundle; 2 usage error, an unreadable/invalid bundle,
or a cluster that cannot be asked; 3 capture interrupted (a bundle was still written);
4 the bundle or the output could not be written (disk full, quota, I/O error, read-only file system);
70 internal error (a bug: please report it with ``--debug`` output).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from forensics._version import __version__
from forensics.cli_cluster import cluster as cluster_group
from forensics.document_format import OUTPUT_FORMATS, SEVERITIES, severity_rank, split_formats
from forensics.errors import STORAGE_ERRNOS, ForensicsError, UsageError

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_NOT_WRITTEN, EXIT_BUG = 0, 1, 2, 3, 4, 70


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (value or "").split(",") if n.strip())


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RING_HELP = "(default: $GPUFORENSICS_RING, then /var/lib/gpuforensics/ring)"


def _settings_map(settings: tuple[str, ...]) -> dict[str, str]:
    """``--set KEY=VALUE`` options as a dict (checked later by ``validate_settings``)."""
    extra: dict[str, str] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        extra[key.strip()] = value
    return extra


def _parse_since(value: str | None, opt: str = "--since") -> datetime | None:
    """``--since``/``--until``: an ISO 8601 time (UTC if no zone), a UTC clock time (14:00) or a
    duration ago such as 30m, 2h, 1d (:func:`forensics.parsing.timestamps.parse_moment`)."""
    if not value:
        return None
    from forensics.parsing.timestamps import parse_moment

    try:
        return parse_moment(value, datetime.now(UTC))
    except ValueError as exc:
        raise UsageError(f"{opt}: {exc}") from None


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Refuse nan and inf (click's FloatRange lets them through): they would sample forever or
    land in the manifest as JSON no strict reader accepts."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number")
    return value


def _progress_printer(enabled: bool) -> Any:
    if not enabled:
        return None

    def show(msg: str) -> None:
        click.echo(f"gpuforensics: {msg}", err=True)

    return show


def _live_printer(enabled: bool) -> Any:
    """The one status line capture rewrites in place while it runs (a terminal only: in a log
    file the carriage returns would be noise); ``""`` clears it."""
    if not enabled or not sys.stderr.isatty():
        return None

    def show(msg: str) -> None:
        sys.stderr.write("\r\x1b[K" + (f"gpuforensics: {msg}" if msg else ""))
        sys.stderr.flush()

    return show


_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def _plain(doc: str | None, name: str) -> str:
    """A docstring's first line as plain text: no ``literal`` or :role:`x` markup, and no
    leading repeat of the collector's name."""
    line = (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""
    line = _RST_ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], line).replace("``", "")
    return line[len(name) + 2:] if line.startswith(f"{name}: ") else line


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="gpuforensics")
@click.option("--debug", is_flag=True, help="Show a traceback on errors (for bug reports).")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """GPU-node incident forensics.

    Run `capture` on the node during the incident; run `analyze` on the bundle afterwards, on any
    machine, to get the evidence chain and HTML/PDF reports.

    \b
    Example:
      b=$(sudo gpuforensics capture --duration 30 --interval 1)
      gpuforensics analyze "$b" --format html,pdf -o reports/
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


@cli.command()
@click.option("-o", "--output", "output", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Directory to write the bundle into; '-' writes the bundle's bytes to stdout.")
@click.option("--duration", type=click.FloatRange(min=0), default=0.0, show_default=True, callback=_finite,
              help="Seconds to sample GPU, process and cgroup figures (0: one snapshot).")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True, callback=_finite,
              help="Seconds between samples within --duration.")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True, callback=_finite,
              help="Time budget for collection beyond the sampling window; a hung source is killed.")
@click.option("--only", help="Comma-separated collectors to run (see `gpuforensics collectors`).")
@click.option("--skip", help="Comma-separated collectors not to run.")
@click.option("--all-processes", is_flag=True, help="Record every process on the host, not only GPU and container processes.")
@click.option("--since", help="Start of the history window for everything (kernel log, events, exited "
              "containers, the flight recorder's ring): ISO time or a duration (30m, 2h). Overrides --lookback.")
@click.option("--lookback", type=click.FloatRange(min=0), default=3600.0, show_default=True, callback=_finite,
              help="Seconds of history when --since is not given (the window is capture start minus this).")
@click.option("--ring", "ring_dir", type=click.Path(file_okay=False),
              help=f"Flight recorder ring to fold in, as --set ring.dir=DIR {_RING_HELP}.")
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

    extra = _settings_map(settings)
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
        all_processes=all_processes, since=_parse_since(since), until=_parse_since(until, "--until"),
        lookback_s=lookback,
        kubeconfig=kubeconfig, kube_context=kube_context, node_name=node_name,
        nvml_library=nvml_library, only=_names(only), skip=_names(skip), extra=extra,
        argv=tuple(["gpuforensics", *sys.argv[1:]]),
    )
    if options.until is not None and options.since is not None and options.until <= options.since:
        raise UsageError(f"--until ({until}) is not after --since ({since})")
    show = sys.stderr.isatty() if progress is None else progress
    if to_stdout:
        from forensics.capture import capture_to_stream

        streamed = capture_to_stream(options, sys.stdout.buffer, progress=_progress_printer(show))
        manifest, interrupted = streamed.manifest, streamed.interrupted
        where = f"streamed {streamed.name} to stdout: {streamed.size} bytes, sha256 {streamed.sha256}"
    else:
        result = run_capture(options, output, progress=_progress_printer(show), live=_live_printer(show))
        manifest, interrupted, where = result.manifest, result.interrupted, str(result.path)
    failed = [c for c in manifest["collectors"] if c["status"] in ("failed", "partial")]
    if failed and progress is not False:  # also in cron and DaemonSet logs; --quiet silences it
        click.echo("gpuforensics: incomplete: " + ", ".join(f"{c['name']} {c['status']}" for c in failed), err=True)
    click.echo(f"gpuforensics: {where}" if to_stdout else where, err=to_stdout)
    if interrupted:
        click.echo("gpuforensics: capture interrupted; the bundle holds what was collected", err=True)
        sys.exit(EXIT_INTERRUPTED)


def _seconds(option: str, value: str) -> float:
    """A duration: plain seconds or a number with s, m, h or d."""
    units = _UNITS
    number, unit = (value[:-1], units[value[-1]]) if value[-1:] in units else (value, 1)
    try:
        seconds = float(number) * unit
    except ValueError:
        raise UsageError(f"{option}: not a duration like 90, 30m or 24h: {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{option}: must be a positive duration, not {value!r}")
    return seconds


def _bytes(option: str, value: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    text = value.strip().lower().removesuffix("ib").removesuffix("b")
    number, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
    try:
        n = int(float(number) * unit)
    except (ValueError, OverflowError):
        raise UsageError(f"{option}: not a size like 512M or 2G: {value!r}") from None
    if n <= 0:
        raise UsageError(f"{option}: must be positive, not {value!r}")
    return n


@cli.command()
@click.option("--ring", "ring_dir", type=click.Path(file_okay=False, path_type=Path),
              help=f"Ring directory, created 0700, files 0600 {_RING_HELP}.")
@click.option("--interval", type=click.FloatRange(min=0.05, max=3600), default=1.0, show_default=True,
              callback=_finite, help="Seconds between samples.")
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

    extra = _settings_map(settings)
    validate_settings(extra)
    options = RecordOptions(ring=resolve_ring_dir(ring_dir), interval_s=interval,
                            max_bytes=_bytes("--max-bytes", max_bytes), retention_s=_seconds("--retention", retention),
                            sources=_names(sources) or SOURCE_NAMES, redact=not no_redact,
                            nvml_library=nvml_library, extra=extra,
                            argv=tuple(["gpuforensics", *sys.argv[1:]]))
    result = run_recorder(options)
    click.echo(json.dumps(result, sort_keys=True))


def _print_ring_status(ring_dir: Path | None, verify: bool, as_json: bool) -> None:
    from forensics.record import format_status, ring_status
    from forensics.ring import resolve_ring_dir

    doc = ring_status(resolve_ring_dir(ring_dir), verify=verify)
    click.echo(json.dumps(doc, sort_keys=True, indent=2) if as_json else format_status(doc))


@cli.command()
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


def _limits(max_bundle_mb: int | None, max_members: int | None) -> Any:
    from forensics.bundle import ReadLimits

    d = ReadLimits()
    return ReadLimits(
        max_total_bytes=(max_bundle_mb << 20) if max_bundle_mb else d.max_total_bytes,
        max_member_bytes=min(d.max_member_bytes, (max_bundle_mb << 20)) if max_bundle_mb else d.max_member_bytes,
        max_members=max_members or d.max_members,
    )


_limit_options = [
    click.option("--max-bundle-mb", type=click.IntRange(min=1), help="Refuse bundles whose content exceeds this many MiB (default 1024)."),
    click.option("--max-members", type=click.IntRange(min=1), help="Refuse bundles with more members (default 50000)."),
]


def _with_limits(f: Any) -> Any:
    for opt in reversed(_limit_options):
        f = opt(f)
    return f


@cli.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@_with_limits
def verify(bundle: Path, max_bundle_mb: int | None, max_members: int | None) -> None:
    """Check every member of BUNDLE against its manifest (SHA-256 and size).

    Exit 0 when intact, 1 on an integrity failure (members named), 2 when unreadable or invalid.

    \b
    Example:
      gpuforensics verify gpuforensics-gpu-07-20261129T140500Z.tgz
    """
    from forensics.bundle import verify_bundle

    res = verify_bundle(bundle, _limits(max_bundle_mb, max_members))
    click.echo(f"OK {res.path}: {res.members_checked} members, {res.bytes_checked} bytes verified; "
               f"bundle sha256 {res.file_sha256}")


def _split_formats(value: str) -> list[str]:
    fmts = split_formats(value)
    bad = [f for f in fmts if f not in OUTPUT_FORMATS]
    if bad or not fmts:
        raise UsageError(f"--format: unknown format {', '.join(bad) or value!r} (choose from {', '.join(OUTPUT_FORMATS)})")
    return fmts


@cli.command()
@click.argument("bundles", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="BUNDLES|DIR...")
@click.option("-f", "--format", "fmt", default="text", show_default=True,
              help="Comma-separated: text, json, html, pdf, md.")
@click.option("-o", "--output", type=click.Path(),
              help="Output file (one format) or directory (several, or a path ending in /); text and json go to stdout without it.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Thresholds file (TOML or JSON) overriding the rules' defaults.")
@click.option("--fail-on", type=click.Choice(SEVERITIES), help="Exit 1 when a finding of this severity or worse exists.")
@click.option("--page-size", type=click.Choice(["A4", "Letter"], case_sensitive=False), default="A4", show_default=True,
              help="PDF page size.")
@click.option("--window", help="Window under investigation, START..END: ISO times or durations before the "
                               "capture's end (2h..30m, 15m..); default: the capture window and its lead-up.")
@_with_limits
def analyze(bundles: tuple[Path, ...], fmt: str, output: str | None, config_path: Path | None,
            fail_on: str | None, page_size: str, window: str | None, max_bundle_mb: int | None,
            max_members: int | None) -> None:
    """Analyze one or more bundles: who held which GPU, who suffered, and the proof.

    Joins GPU -> PID -> container -> pod -> allocation, runs the rules and builds the evidence
    chain. Several bundles of one host form one timeline; bundles of several nodes, a cluster view.
    A directory stands for its bundles: those a `cluster capture` kept (its cluster.json), else
    every *.tgz in it. Never talks to a live source.

    \b
    Example:
      gpuforensics analyze bundle.tgz                      # summary on the terminal
      gpuforensics analyze bundle.tgz -f html,pdf,md,json -o reports/
      gpuforensics analyze bundle.tgz -f json --fail-on high > findings.json
      gpuforensics analyze bundle.tgz --window 2026-11-29T14:00Z..2026-11-29T14:30Z
      gpuforensics analyze incident/ -f html -o report.html   # a cluster capture's directory
    """
    formats = _split_formats(fmt)
    files = [f for f in formats if f not in ("text",)]
    if len(formats) > 1 and output is None:
        raise UsageError("several formats need -o DIRECTORY")
    if output is None and any(f in ("html", "pdf", "md") for f in formats):
        raise UsageError(f"--format {fmt} needs -o PATH (a file or a directory)")
    if formats == ["text"] and output is not None:
        raise UsageError("--format text is for the terminal and writes no file; use -f md -o FILE, or > FILE")
    from forensics.analysis import analyze_bundles, load_config, parse_window
    from forensics.cluster import expand_bundle_arguments
    from forensics.report import render, render_text

    config = load_config(config_path) if config_path else None
    spec = parse_window(window) if window else None  # a bad value fails before any bundle is read
    paths, notes = expand_bundle_arguments(bundles)  # a directory: a `cluster capture`'s bundles
    for note in notes:
        click.echo(f"gpuforensics: {note}", err=True)
    doc = analyze_bundles(paths, config, limits=_limits(max_bundle_mb, max_members), window=spec)
    if output is None:
        if formats == ["json"]:
            click.echo(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False))
        else:
            click.echo(render_text(doc))
    else:
        if "text" in formats:
            click.echo(render_text(doc), err=bool(files))
        if files:
            for path in render(doc, files, output, bundle_paths=list(bundles), paper=page_size):
                click.echo(str(path))
    if fail_on:
        worst = min((severity_rank(f.get("severity")) for f in doc.get("findings", [])), default=len(SEVERITIES))
        if worst <= severity_rank(fail_on):
            sys.exit(EXIT_FINDINGS)


@cli.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-f", "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@_with_limits
def inspect(bundle: Path, fmt: str, max_bundle_mb: int | None, max_members: int | None) -> None:
    """Show what BUNDLE holds: host, capture window, each collector's status, evidence per source.

    \b
    Example:
      gpuforensics inspect bundle.tgz -f json
    """
    from forensics.bundle import open_bundle
    from forensics.inventory import describe_bundle, format_inventory
    from forensics.report import printable

    desc = describe_bundle(open_bundle(bundle, _limits(max_bundle_mb, max_members)))
    click.echo(json.dumps(desc, indent=1, sort_keys=True) if fmt == "json" else format_inventory(printable(desc)))


@cli.command()
@click.option("--settings", "show_settings", is_flag=True,
              help="List the settings `capture --set KEY=VALUE` accepts instead.")
def collectors(show_settings: bool) -> None:
    """List the collectors capture runs, in order, with their deadlines.

    \b
    Example:
      gpuforensics collectors
      gpuforensics collectors --settings
    """
    if show_settings:
        from forensics.capture import SETTINGS

        for key, setting in sorted(SETTINGS.items()):
            click.echo(f"{key:<28} {setting.kind:<18} {setting.help}")
        return
    from forensics.capture import load_collectors

    for c in load_collectors():
        click.echo(f"{c.name:<16} order {c.order:<4} timeout {c.timeout_s:g} s  {_plain(type(c).__doc__, c.name)}")


cli.add_command(cluster_group)


def main(argv: list[str] | None = None, prog_name: str = "gpuforensics") -> None:
    """Console entry point: one-line errors, documented exit codes, tracebacks only with --debug."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or bool(os.environ.get("GPUFORENSICS_DEBUG"))
    if prog_name != "gpuforensics" and args[:2] in (["cluster"], ["cluster", "-h"], ["cluster", "--help"]):
        args = ["cluster", "--help"]
    try:
        rv = cli.main(args=args, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("gpuforensics: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: bare `gpuforensics`
            click.echo(exc.format_message(), err=True)  # the help, not "error: Usage: ..."
        else:
            click.echo(f"gpuforensics: error: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except ForensicsError as exc:
        if debug:
            traceback.print_exc()
        msg = " ".join(str(exc).split()) or type(exc).__name__
        click.echo(f"gpuforensics: error: {msg}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("gpuforensics: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(EXIT_OK)
    except OSError as exc:
        # Our own file writes map to CaptureError/ReportError; what is left is stdout on a full
        # or failing disk (`analyze -f json > findings.json` while /var is full): not a bug.
        if exc.errno not in STORAGE_ERRNOS:
            _internal_error(exc, debug)
        try:  # the interpreter's final flush of stdout would fail again, with a traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        click.echo(f"gpuforensics: error: cannot write the output: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_NOT_WRITTEN)
    except Exception as exc:  # noqa: BLE001 - anything else is a bug, said so in one line
        _internal_error(exc, debug)
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)


def kubectl_main(argv: list[str] | None = None) -> None:
    """``kubectl-gpuforensics``: ``kubectl gpuforensics capture ...`` (krew's plugin convention:
    kubectl finds the executable on PATH and passes every argument through to the ``cluster``
    group)."""
    args = list(sys.argv[1:] if argv is None else argv)
    front = ["--debug"] if "--debug" in args else []
    main([*front, "cluster", *(a for a in args if a != "--debug")], prog_name="kubectl gpuforensics")


def _internal_error(exc: BaseException, debug: bool) -> NoReturn:
    if debug:
        traceback.print_exception(exc)
    click.echo(f"gpuforensics: internal error (a bug, please report it; rerun with --debug): "
               f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", err=True)
    sys.exit(EXIT_BUG)


if __name__ == "__main__":
    main()
