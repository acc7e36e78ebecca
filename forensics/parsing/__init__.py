"""Pure parsers for host evidence: ``/proc``, cgroup files, the kernel log, and attribution.

Used by the capture collectors (``forensics/collectors/procfs.py``, ``cgroups.py``,
``kernel.py``) to derive values beside the raw files, and by the analyzer to re-derive facts
from the raw members of a bundle. Nothing here touches the live system; every parser raises only
:class:`forensics.errors.ParseError` on bad input.

Modules: :mod:`.attribution` (cgroup path -> runtime, container, pod, QoS), :mod:`.cgroupfs`
(cpu.stat, cpu.max, memory.*, pids.*), :mod:`.cgroup_io` (io.stat, io.max, blkio.*),
:mod:`.pressure` (PSI files), :mod:`.cgroup_mounts` (cgroup mounts in mountinfo),
:mod:`.cgroup_files` (one cgroup file -> its normalised values), :mod:`.kmsg` (/dev/kmsg, dmesg, journald, OOM, Xid),
:mod:`.procfs` (stat, status, cmdline, namespace links).
"""

from forensics.parsing.attribution import (
    Attribution,
    CgroupLine,
    ContainerRef,
    attribute_path,
    attribute_proc_cgroup,
    parse_proc_cgroup,
)

__all__ = [
    "Attribution",
    "CgroupLine",
    "ContainerRef",
    "attribute_path",
    "attribute_proc_cgroup",
    "parse_proc_cgroup",
]
