"""The capture's name and the host it ran on: a reserved, free bundle name, the bundle's host, and
the host's identity in the manifest.

A bundle's name carries its host and its start time to the second (``bundle_stem``); two captures
started in the same second (two alerts firing together) must not take the same name, so a capture
reserves its name with a ``.<name>.reserved`` file before it collects anything.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from forensics.bundle.format import bundle_stem, utc_now
from forensics.bundle.leftovers import owner_token
from forensics.collect.context import CaptureOptions
from forensics.errors import CaptureError
from forensics.specs import spec_named

__all__ = ["history_host", "host_identity", "reserve_name"]

_NAME_WAIT_TRIES = 5  # seconds waited at most for a free bundle name


def reserve_name(out_dir: Path, hostname: str) -> tuple[Any, Path | None]:
    """The capture's start time and a reservation of its bundle name.

    Names have one-second resolution. A name already taken (a capture earlier this second)
    or reserved (one running now, started this same second: two alerts firing together)
    moves this capture to the next second, so the name still tells when it started and the
    other capture's bundle is neither replaced nor lost at the final rename. The reservation
    is a ``.<name>.reserved`` file in the output directory holding its owner's token, removed at
    the end.
    """
    started = utc_now()
    for _ in range(_NAME_WAIT_TRIES):
        final = out_dir / f"{bundle_stem(hostname, started)}.tgz"
        if not final.exists():
            mark = final.with_name(f".{final.name}.reserved")
            try:
                fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:  # who holds it: a capture killed later leaves it for the next to remove
                    os.write(fd, (owner_token() + "\n").encode("ascii"))
                except OSError:  # full disk: an empty reservation still reserves the name
                    pass
                finally:
                    os.close(fd)
            except FileExistsError:
                pass
            except OSError:  # not writable: BundleWriter says so in its own words
                return started, None
            else:
                return started, mark
        time.sleep(1.0 - started.microsecond / 1e6)
        started = utc_now()
    # refuse now rather than collect for the whole window and fail at the final rename
    raise CaptureError(f"refusing to overwrite existing bundles: no free bundle name in {out_dir} "
                       f"after {_NAME_WAIT_TRIES} s; use another --output directory")


def _read_first_line(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().strip() or None
    except OSError:
        return None


def history_host(opts: CaptureOptions) -> str:
    """The bundle's host: this machine, except when ``--only`` names remote sources alone (their spec
    says ``remote``: Prometheus asked about ``--node N`` from anywhere, a laptop included) and
    ``--node N`` is given: then it is N's bundle."""
    specs = [spec_named(name) for name in opts.only]
    if opts.only and opts.node_name and all(s is not None and s.remote for s in specs):
        return opts.node_name
    return socket.gethostname()


def host_identity(hostname: str, node_name: str | None) -> dict[str, Any]:
    """``node_name``: the Kubernetes node (``--node``, ``$NODE_NAME``); in a pod the host name is
    the pod's name, so the analysis names the node by this when it is known. ``captured_from``: the
    machine that asked, when the bundle is another node's (history of remote sources alone)."""
    here = socket.gethostname()
    return {
        "hostname": hostname,
        **({"captured_from": here} if here != hostname else {}),
        "node_name": node_name,
        "machine_id": _read_first_line("/etc/machine-id"),
        "boot_id": _read_first_line("/proc/sys/kernel/random/boot_id"),
        "captured_at_unix": round(time.time(), 6),
        "time_zone_offset_s": -time.timezone,
    }
