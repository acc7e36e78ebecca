"""NVIDIA driver messages in the kernel log: Xid lines, other driver messages, and a GPU fallen off
the bus, from kmsg records (forensics/parsing/kmsg.py).

Sources (the driver's format strings and lines it printed, quoted in ``tests/support/xid_lines.py``):

* NVIDIA driver: ``NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, text``
  (older drivers omit ``PCI:`` and the pid/name part; some print the function, ``PCI:0000:00:08.0``);
* on a MIG GPU the parenthesis carries the GPU instance and, when known, the compute instance:
  ``NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: ...`` and
  ``(PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u)`` (open-gpu-kernel-modules, kern_gpu_ga100.c and
  the RC code's ``XID_PRINT_WITH_ATTR``);
* the error-containment Xids (94, 95) print ``pid=7062, Contained: ...`` with no ``name=``; a pid
  may also end the line (``pid=5678, name=idle_timeout``), and an Xid may carry no text at all
  (``NVRM: Xid (PCI:0000:3f:00): 46``).

Parsers raise only :class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from forensics.errors import ParseError
from forensics.parsing.kmsg import KmsgRecord
from forensics.parsing.pci import normalize_pci_bus_id
from forensics.parsing.xid_catalog import xid_description

__all__ = [
    "BusLossJoiner",
    "DriverMessage",
    "XidEvent",
    "fell_off_bus",
    "parse_driver_message",
    "parse_xid",
]


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` line. ``pci_bus_id`` is normalised (``0000:3b:00.0``) to be matched with
    NVML's ``pciBusId`` (``00000000:3B:00.0``) through :func:`forensics.parsing.pci.pci_bus_key`.
    ``description`` is NVIDIA's catalog's (:func:`forensics.parsing.xid_catalog.xid_description`).
    ``pid``/``process_name`` are None when the driver printed ``<unknown>`` or nothing."""

    ts_usec: int
    seq: int | None
    pci_bus_id: str
    xid: int
    pid: int | None
    process_name: str | None
    text: str
    description: str | None
    gpu_instance_id: int | None = None  # MIG: the GPU instance the driver attributed it to (``GPU-I:05``)
    compute_instance_id: int | None = None  # MIG: its compute instance (``GPU-CI:02``), when printed


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]{1,20})((?: GPU-C?I:\d{1,4}){0,2})\): (\d{1,5})(?:,\s?(.*))?$",
                  re.DOTALL)
_MIG_ATTR = re.compile(r"GPU-(C?I):(\d{1,4})")
_XID_PID = re.compile(r"^pid='?([^,']*)'?(?:, name=([^,]*))?(?:,\s?(.*))?$", re.DOTALL)


def parse_xid(record: KmsgRecord) -> XidEvent | None:
    """The Xid event in a record, or None when the record is not an Xid line."""
    if "Xid" not in record.message:
        return None
    found = _XID.search(record.message)
    if not found:
        return None
    try:
        bus = normalize_pci_bus_id(found.group(1))
    except ParseError:
        bus = found.group(1).strip()
    instance = {kind: int(n) for kind, n in _MIG_ATTR.findall(found.group(2))}
    xid = int(found.group(3))
    rest = found.group(4) or ""
    pid: int | None = None
    name: str | None = None
    details = _XID_PID.match(rest)
    if details:
        pid_text, name_text, tail = details.groups()
        pid = int(pid_text) if pid_text.isascii() and pid_text.isdigit() and len(pid_text) < 11 else None
        name = None if name_text in ("<unknown>", "", None) else name_text
        rest = tail or ""
    return XidEvent(record.ts_usec, record.seq, bus, xid, pid, name, rest.rstrip("\n"),
                    xid_description(xid), instance.get("I"), instance.get("CI"))


@dataclass(frozen=True)
class DriverMessage:
    """A GPU driver message that is not an Xid (``NVRM:``, ``nvidia``, ``nvidia-nvlink`` ...)
    at warning level or above, or any ``NVRM:`` line."""

    ts_usec: int
    seq: int | None
    level: int
    message: str


_DRIVER_PREFIXES = ("NVRM:", "nvidia", "NVRM ", "nvrm:")


def parse_driver_message(record: KmsgRecord) -> DriverMessage | None:
    """The record as a GPU driver message, or None (Xid lines are left to :func:`parse_xid`)."""
    message = record.message
    if not message.startswith(_DRIVER_PREFIXES) or "NVRM: Xid" in message:
        return None
    if not message.startswith("NVRM") and record.level > 4:
        return None
    return DriverMessage(record.ts_usec, record.seq, record.level, message)


# "GPU has fallen off the bus" as the driver prints it without an Xid number (forms seen in public
# driver logs): ``NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.`` (akash-network/support#209),
# ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.`` (Bumblebee-Project/Bumblebee#554), and
# ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5) installed in this system has`` /
# ``NVRM: fallen off the bus and is not responding to commands.`` (NVIDIA/NVSentinel#155,
# leptonai/gpud#1209), one record with embedded newlines or one record per line.
_BUS_PCI = r"((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_FELL_OFF = (
    re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?" + _BUS_PCI + r":? (?:GPU )?has fallen off the bus"),
    re.compile(r"NVRM: The NVIDIA GPU " + _BUS_PCI + r"\b.*?fallen off the bus", re.DOTALL),
)
_THE_GPU = re.compile(r"NVRM: The NVIDIA GPU " + _BUS_PCI + r"\b")


def fell_off_bus(message: str) -> str | None:
    """The PCI address (``0000:b3:00.0``) of a fell-off-the-bus message that has no Xid number, else None."""
    if "NVRM: Xid" in message or "fallen off the bus" not in message:
        return None
    text = message.replace("\\x0a", "\n")
    for pattern in _FELL_OFF:
        found = pattern.search(text)
        if found:
            try:
                return normalize_pci_bus_id(found.group(1))
            except ParseError:
                return found.group(1).lower()
    return None


class BusLossJoiner:
    """Joins the continuation records of a multi-record fell-off-the-bus message.

    Feed every driver record in log order; :meth:`feed` returns ``(pci, first_key, keys)`` when a
    record completes a message (the keys of the records it spans, as the caller gave them), else None.
    A message is one record, or a ``The NVIDIA GPU <pci>`` record and the ``NVRM:`` records that follow
    it within ``window_usec`` until one says ``fallen off the bus`` (at most ``max_records``)."""

    def __init__(self, window_usec: int = 2_000_000, max_records: int = 4) -> None:
        self.window_usec = window_usec
        self.max_records = max_records
        self._parts: list[str] = []
        self._keys: list[object] = []
        self._start = 0

    def feed(self, ts_usec: int, message: str, key: object) -> tuple[str, list[object]] | None:
        if not message.startswith("NVRM"):
            return None
        if self._parts and (ts_usec - self._start > self.window_usec or len(self._parts) >= self.max_records):
            self._parts, self._keys = [], []
        whole = fell_off_bus(message)
        if whole is not None:
            self._parts, self._keys = [], []
            return whole, [key]
        if _THE_GPU.search(message):
            self._parts, self._keys, self._start = [message], [key], ts_usec
            return None
        if not self._parts:
            return None
        self._parts.append(message)
        self._keys.append(key)
        joined = fell_off_bus("\n".join(self._parts))
        if joined is not None:
            keys = self._keys
            self._parts, self._keys = [], []
            return joined, keys
        return None
