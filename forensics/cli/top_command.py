"""``gpuforensics top``: the live view (forensics.top)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from forensics.cli.common import RING_HELP, settings_map

__all__ = ["top"]


@click.command()
@click.option("--interval", type=click.FloatRange(min=0.2, max=3600), default=2.0, show_default=True,
              help="Seconds between refreshes.")
@click.option("--once", is_flag=True, help="Print one snapshot as text and exit (as `top -b -n 1`).")
@click.option("--json", "as_json", is_flag=True, help="With --once: the snapshot as JSON.")
@click.option("--width", type=click.IntRange(min=40), help="With --once: the text's width (default: the terminal's, else 160).")
@click.option("--ring", "ring_dir", type=click.Path(file_okay=False, path_type=Path),
              help=f"The flight recorder's ring: when a recorder writes it, top reads it instead of sampling {RING_HELP}.")
@click.option("--bundles", "bundles_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Where the `c` key writes a bundle (`capture --since 15m -o DIR`).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="Kubeconfig file, as for capture.")
@click.option("--context", "kube_context", help="Kubeconfig context to use.")
@click.option("--node", "node_name", help="Kubernetes node name of this host (default: $NODE_NAME, then the host name).")
@click.option("--nvml-library", type=click.Path(dir_okay=False), help="Path of libnvidia-ml.so.1 when it is not on the loader's path.")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="Collector setting, as for capture.")
def top(interval: float, once: bool, as_json: bool, width: int | None, ring_dir: Path | None, bundles_dir: Path,
        kubeconfig: str | None, kube_context: str | None, node_name: str | None, nvml_library: str | None,
        settings: tuple[str, ...]) -> None:
    """Live view of this node's GPUs and GPU processes, each named by container, pod and grant.

    Per GPU: utilisation, memory, temperature, power, active clock-slowdown reasons, Xids since
    start, a history sparkline. Per GPU process: PID, user, container or pod, the grant that lets
    it use the GPU (device plugin, DRA claim, Docker request, environment; `! none` when it has
    none, `! ... overlap` when another owner's exclusive grant covers it too), GPU memory, SM %,
    and its container's CPU %, throttling, memory and limit. Below: GPU processes and containers
    gone in the last minutes, still named.

    When `gpuforensics record` runs on this node, top reads its ring (no second NVML sampler);
    otherwise it samples with capture's collectors at nice 10. Without a terminal (or TERM=dumb)
    it prints one snapshot, as --once does.

    \b
    Keys: m/s/u sort by GPU memory/SM/CPU, g cycle GPU filter, n namespace, / text filter,
    x clear filters, Enter a process' attribution and evidence, c write a bundle now, q quit.

    \b
    Example:
      sudo gpuforensics top
      sudo gpuforensics top --once --json > gpus.json
    """
    from forensics.capture import validate_settings
    from forensics.ring import resolve_ring_dir
    from forensics.top import TopOptions, run_top

    extra = settings_map(settings)
    validate_settings(extra)
    ring = resolve_ring_dir(ring_dir)
    repeat: list[str] = ["--ring", str(ring)]
    for flag, value in (("--kubeconfig", kubeconfig), ("--context", kube_context), ("--node", node_name),
                        ("--nvml-library", nvml_library)):
        if value:
            repeat += [flag, value]
    for s in settings:
        repeat += ["--set", s]
    options = TopOptions(ring=ring, interval_s=interval, once=once or as_json, as_json=as_json,
                         nvml_library=nvml_library, extra=extra, kubeconfig=kubeconfig, kube_context=kube_context,
                         node_name=node_name, bundles=bundles_dir, width=width, capture_args=tuple(repeat))
    sys.exit(run_top(options))
