"""The ``gpuforensics`` command line: parses options, calls the library, maps errors to exit codes.

It calls the library only through its public entry points: :mod:`forensics.capture`,
:mod:`forensics.bundle`, :mod:`forensics.inventory`, :mod:`forensics.analysis`,
:mod:`forensics.report`, :mod:`forensics.cluster`, :mod:`forensics.top` and the document contract
:mod:`forensics.document_format`; each is imported inside the command that needs it, so ``--help``
stays instant. One module per command family: :mod:`~forensics.cli.capture_command`,
:mod:`~forensics.cli.record_commands` (``record``, ``ring``), :mod:`~forensics.cli.bundle_commands`
(``verify``, ``analyze``, ``inspect``), :mod:`~forensics.cli.sanitize_command`,
:mod:`~forensics.cli.collectors_command`, :mod:`~forensics.cli.top_command`; what they share
(option parsers, read limits, exit codes) is :mod:`~forensics.cli.common`. The ``cluster`` group
lives in :mod:`forensics.cli_cluster`. This module holds the group and the entry points, which map
errors to exit codes.

Exit codes: 0 success; 1 ``verify`` integrity failure (``sanitize``: a bundle that fails it is
refused), ``analyze --fail-on`` threshold reached, or a ``cluster capture`` node without a verified
bundle; 2 usage error, an unreadable/invalid bundle, an output that exists, a ``sanitize --map`` that
cannot be read, or a cluster that cannot be asked; 3 capture interrupted (a bundle was still written);
4 the bundle or the output could not be written (disk full, quota, I/O error, read-only file system);
70 internal error (a bug: please report it with ``--debug`` output).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import NoReturn

import click

from forensics._version import __version__
from forensics.cli.bundle_commands import analyze, inspect, verify
from forensics.cli.capture_command import capture
from forensics.cli.collectors_command import collectors
from forensics.cli.common import EXIT_BUG, EXIT_NOT_WRITTEN, EXIT_OK, EXIT_USAGE
from forensics.cli.record_commands import record, ring
from forensics.cli.sanitize_command import sanitize
from forensics.cli.top_command import top
from forensics.cli_cluster import cluster as cluster_group
from forensics.errors import STORAGE_ERRNOS, ForensicsError

__all__ = ["cli", "kubectl_main", "main"]


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


for _command in (capture, record, ring, top, verify, analyze, inspect, sanitize, collectors, cluster_group):
    cli.add_command(_command)


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
