"""The commands that read bundles: ``verify``, ``analyze`` (reports) and ``inspect``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from forensics.cli.common import EXIT_FINDINGS, read_limits, with_limits
from forensics.document_format import OUTPUT_FORMATS, SEVERITIES, severity_rank, split_formats
from forensics.errors import UsageError

__all__ = ["analyze", "inspect", "verify"]


@click.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@with_limits
def verify(bundle: Path, max_bundle_mb: int | None, max_members: int | None) -> None:
    """Check every member of BUNDLE against its manifest (SHA-256 and size).

    Exit 0 when intact, 1 on an integrity failure (members named), 2 when unreadable or invalid.

    \b
    Example:
      gpuforensics verify gpuforensics-gpu-07-20261129T140500Z.tgz
    """
    from forensics.bundle import verify_bundle

    res = verify_bundle(bundle, read_limits(max_bundle_mb, max_members))
    click.echo(f"OK {res.path}: {res.members_checked} members, {res.bytes_checked} bytes verified; "
               f"bundle sha256 {res.file_sha256}")


def _split_formats(value: str) -> list[str]:
    fmts = split_formats(value)
    bad = [f for f in fmts if f not in OUTPUT_FORMATS]
    if bad or not fmts:
        raise UsageError(f"--format: unknown format {', '.join(bad) or value!r} (choose from {', '.join(OUTPUT_FORMATS)})")
    return fmts


@click.command()
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
@with_limits
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
    from forensics.bundle.cluster_dir import expand_bundle_arguments
    from forensics.report import render, render_text

    config = load_config(config_path) if config_path else None
    spec = parse_window(window) if window else None  # a bad value fails before any bundle is read
    paths, notes = expand_bundle_arguments(bundles)  # a directory: a `cluster capture`'s bundles
    for note in notes:
        click.echo(f"gpuforensics: {note}", err=True)
    doc = analyze_bundles(paths, config, limits=read_limits(max_bundle_mb, max_members), window=spec)
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


@click.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-f", "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@with_limits
def inspect(bundle: Path, fmt: str, max_bundle_mb: int | None, max_members: int | None) -> None:
    """Show what BUNDLE holds: host, capture window, each collector's status, evidence per source.

    \b
    Example:
      gpuforensics inspect bundle.tgz -f json
    """
    from forensics.bundle import open_bundle
    from forensics.inventory import describe_bundle, format_inventory
    from forensics.report import printable

    desc = describe_bundle(open_bundle(bundle, read_limits(max_bundle_mb, max_members)))
    click.echo(json.dumps(desc, indent=1, sort_keys=True) if fmt == "json" else format_inventory(printable(desc)))
