"""The ``cluster`` command group (``gpuforensics cluster capture``, and ``kubectl gpuforensics
capture`` through :func:`forensics.cli.kubectl_main`): parse, call
:func:`forensics.cluster.run_cluster_capture`, print the summary, exit with its verdict.
:mod:`forensics.cli` adds the group and maps errors to exit codes; this module calls only the
public entry point :mod:`forensics.cluster`.

Exit codes (those of :mod:`forensics.cli`): 0 every node gave a verified bundle; 1 at least one
node did not (the summary says which and why); 2 usage error, or the cluster could not be asked
at all; 4 the local storage refused a received bundle or ``cluster.json`` (disk full, quota, I/O
error, read-only file system: :class:`forensics.errors.OutputNotWritten`); 130 interrupted (the
summary is still written).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

EXIT_NODES_FAILED = 1


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (value or "").split(",") if n.strip())


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def cluster() -> None:
    """Capture many nodes at once through the Kubernetes API (no agent of our own).

    \b
    Example:
      gpuforensics cluster capture --pods-of ml/job-name=train-42 --duration 60 -o incident/
    """


@cluster.command("capture", context_settings={"ignore_unknown_options": False})
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="New directory for the bundles (NODE.tgz) and cluster.json.")
@click.option("-l", "--selector", help="Nodes by label selector (default: nvidia.com/gpu.present=true, plus any node running a capture pod).")
@click.option("--nodes", help="Comma-separated node names.")
@click.option("--pods-of", metavar="NS/SELECTOR", help="The nodes running these pods, e.g. ml/job-name=train-42.")
@click.option("-n", "--namespace", default="gpuforensics", show_default=True, help="Namespace of the capture DaemonSet (and of --job's Jobs).")
@click.option("--duration", type=click.FloatRange(min=0), default=0.0, show_default=True, help="Seconds each node samples (capture --duration).")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True, help="Seconds between samples.")
@click.option("--since", help="Passed to each capture: oldest kernel-log record and event to keep (30m, 2h, ISO time).")
@click.option("--timeout", "capture_timeout", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="Each capture's own collection budget beyond --duration (capture --timeout).")
@click.option("--node-timeout", type=click.FloatRange(min=1), help="Per-node deadline for the whole exec and transfer (default: duration + timeout + 60 s).")
@click.option("--parallel", type=click.IntRange(min=1), default=16, show_default=True, help="Nodes captured at once.")
@click.option("--job", is_flag=True, help="No DaemonSet: create a Job per node (deploy/job.yaml's pod), capture through it, delete it.")
@click.option("--image", help="Image of --job's pods (default gpuforensics:VERSION).")
@click.option("--job-start-timeout", type=click.FloatRange(min=1), default=120.0, show_default=True, help="Seconds a Job's pod may take to start.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).")
@click.option("--context", "kube_context", help="Kubeconfig context to use.")
@click.argument("capture_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- CAPTURE-OPTIONS...]")
def cluster_capture(output: Path, selector: str | None, nodes: str | None, pods_of: str | None, namespace: str,
                    duration: float, interval: float, since: str | None, capture_timeout: float,
                    node_timeout: float | None, parallel: int, job: bool, image: str | None,
                    job_start_timeout: float, kubeconfig: str | None, kube_context: str | None,
                    capture_args: tuple[str, ...]) -> None:
    """Capture every chosen GPU node through its capture pod's exec; bundles stream back to DIR.

    Runs `gpuforensics capture -o -` in the capture DaemonSet's pod on each node (deploy/), at
    most --parallel at once, each under its own deadline; each bundle is streamed to disk over
    the exec connection and verified against its manifest before it is kept as DIR/NODE.tgz.
    The summary (node, pod, status, bundle, SHA-256, duration, error) goes to stderr and
    DIR/cluster.json; nodes without a capture pod, refused, hung or failed are listed, not
    dropped. Exit 0 only when every node succeeded, 1 otherwise, 4 when the local disk refused a
bundle or cluster.json. Options after `--` go to each
    capture. Then `gpuforensics analyze DIR` builds the cluster report.

    \b
    Example:
      gpuforensics cluster capture --pods-of ml/job-name=train-42 --duration 60 -o incident/
      gpuforensics cluster capture --nodes gpu-07,gpu-08 --job -o incident/ -- --skip docker
      gpuforensics analyze incident/ -f html -o report.html
    """
    from forensics.cluster import ClusterCaptureOptions, format_table, run_cluster_capture
    from forensics.errors import UsageError

    if duration and interval > duration:
        raise UsageError(f"--interval ({interval:g} s) is longer than --duration ({duration:g} s)")
    opts = ClusterCaptureOptions(
        out_dir=output, namespace=namespace, nodes=_names(nodes), selector=selector, pods_of=pods_of,
        parallel=parallel, duration_s=duration, interval_s=interval, since=since,
        capture_timeout_s=capture_timeout, node_timeout_s=node_timeout, job=job, image=image,
        job_start_timeout_s=job_start_timeout, capture_args=capture_args, kubeconfig=kubeconfig,
        context=kube_context,
    )
    show = sys.stderr.isatty()
    result = run_cluster_capture(opts, progress=(lambda m: click.echo(f"gpuforensics: {m}", err=True)) if show else None)
    click.echo(format_table(result), err=True)
    if (refused := result.write_failure()) is not None:
        raise refused
    click.echo(str(result.path))
    if not result.all_ok:
        sys.exit(EXIT_NODES_FAILED)

