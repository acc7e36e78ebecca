"""``kernel``: the ring buffer verbatim; OOM kills, Xid events and driver warnings (members ``kernel/*``)."""

from __future__ import annotations

from dataclasses import dataclass

from forensics.specs.base import Absence, SourceSpec, setting
from forensics.specs.hints import KMSG_LAST_SEQ
from forensics.specs.roles import KERNEL_LOG

__all__ = [
    "DMESG", "GPU_DRIVER", "INDEX", "JOURNAL", "KMSG", "KMSG_WINDOW", "OOM", "RECORDS", "SPEC", "WINDOW",
    "XID", "KernelSettings",
]

KMSG = "kernel/kmsg.txt"
DMESG = "kernel/dmesg.txt"
JOURNAL = "kernel/journal.jsonl"
INDEX = "kernel/index.json"
RECORDS = "kernel/records.jsonl"
OOM = "kernel/oom.json"
XID = "kernel/xid.json"
GPU_DRIVER = "kernel/gpu_driver.json"
KMSG_WINDOW = "kernel/kmsg-window.txt"
WINDOW = "kernel/window.jsonl"


@dataclass(frozen=True)
class KernelSettings:
    max_bytes: int = setting("positive-int", "bytes of kernel log kept", 256 << 20)


SPEC = SourceSpec(
    name="kernel", order=40, collector="forensics.collectors.kernel", settings=KernelSettings,
    absence=Absence("no kernel log: OOM kills and Xid errors cannot be ruled in or out"),
    publishes=(KMSG_LAST_SEQ,), reads=(KMSG_LAST_SEQ,), roles=(KERNEL_LOG,),
)
