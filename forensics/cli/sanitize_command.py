"""``gpuforensics sanitize``: copies of bundles for people outside the team, names replaced."""

from __future__ import annotations

from pathlib import Path

import click

from forensics.cli.common import read_limits, with_limits
from forensics.errors import UsageError

__all__ = ["sanitize"]


@click.command()
@click.argument("bundles", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="BUNDLES|DIR...")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Directory for the copies (created if absent); an existing copy is never replaced.")
@click.option("--map", "map_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Private map of originals and pseudonyms: read if it exists, created (mode 0600) if "
                   "not, updated with new names. Reuse it for every bundle of one incident; never send it.")
@with_limits
def sanitize(bundles: tuple[Path, ...], out_dir: Path, map_path: Path | None, max_bundle_mb: int | None,
             max_members: int | None) -> None:
    """Write copies of BUNDLES to hand outside the team: host names, IP and MAC addresses, user
    names, pod, namespace and container names and private registries' image names replaced by
    consistent pseudonyms (host-0001, pod-0003, 198.18.0.7, ...), the same in every bundle
    sanitised with one --map. GPU UUIDs, PCI bus ids and container ids are kept (join keys).

    Each copy is a bundle like any other: `verify` passes, `analyze` finds what it finds in the
    original, every excerpt at the same line. Its manifest counts what was replaced; the map
    never goes into it. A DIR stands for its bundles (a `cluster capture`'s directory: its
    cluster.json is copied too, sanitised, naming the copies). A bundle
    that fails `verify` is refused (exit 1). Exit 2: a bundle that cannot be read, a bundle
    captured with --no-redact (its secrets are verbatim: sanitize replaces names, not secrets), an
    output that exists, a map that cannot be read; 4: the output could not be written.

    \b
    Example:
      gpuforensics sanitize gpuforensics-gpu-07-20261129T140500Z.tgz -o outside/ --map ~/incident-42.map.json
      gpuforensics sanitize incident/ -o outside/ --map ~/incident-42.map.json   # every node's bundle
    """
    from forensics.bundle.cluster_dir import CLUSTER_JSON, expand_bundle_arguments
    from forensics.bundle.sanitize import sanitize_bundles

    for given in bundles:
        if given.is_dir() and given.resolve() == out_dir.resolve():
            raise UsageError(f"-o {out_dir} is the directory of the bundles: the copies would lie beside the "
                             "originals (and `analyze DIR` read both); choose another")
    summaries = [d / CLUSTER_JSON for d in bundles if d.is_dir() and (d / CLUSTER_JSON).is_file()]
    paths, notes = expand_bundle_arguments(bundles)
    for note in notes:
        click.echo(f"gpuforensics: {note}", err=True)
    if not paths:
        raise UsageError(f"no bundles in {', '.join(map(str, bundles))}")
    if map_path is not None and map_path.resolve().is_relative_to(out_dir.resolve()):
        raise UsageError(f"--map {map_path} is inside the output directory {out_dir}: the map must never travel "
                         "with the copies")
    # one cluster capture directory alone: its summary is copied too (its nodes' bundles are the copies)
    summary = summaries[0] if len(bundles) == 1 and summaries else None
    copies = sanitize_bundles(paths, out_dir, map_path, read_limits(max_bundle_mb, max_members), summary)
    for copy in copies:
        counts = ", ".join(f"{n} {c}" for c, n in copy.counts.items()) or "nothing"
        click.echo(f"{copy.output}  (from {copy.source.name}; replaced: {counts})")
    if map_path is None:
        click.echo("gpuforensics: no --map: the pseudonyms cannot be traced back, nor reused for another "
                   "bundle of this incident", err=True)
