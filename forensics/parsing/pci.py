"""PCI addresses of GPUs in one form: ``dddd:bb:dd.f``, lower-case (the kernel's and sysfs' form).

The same GPU is written four ways in a bundle:

* NVML ``nvmlDeviceGetPciInfo`` ``busId`` and ``nvidia-smi --query-gpu=pci.bus_id``:
  ``00000000:3B:00.0`` (8-digit domain, upper-case), ``busIdLegacy``: ``0000:3B:00.0``;
  dcgm-exporter's ``pci_bus_id`` label is NVML's.
* the kernel log's NVIDIA driver lines: ``NVRM: Xid (PCI:0000:3b:00): 79, ...`` (no function;
  older drivers omit ``PCI:``), ``NVRM: GPU at PCI:0000:01:00: GPU-...``, ``NVRM: GPU 0000:a1:00.0: ...``.
* sysfs (``/sys/bus/pci/devices/0000:3b:00.0``) and journald's ``DEVICE=+pci:0000:3b:00.0``.

:func:`normalize_pci_bus_id` turns each into ``0000:3b:00.0``; :func:`pci_bus_key` is the same for
joining readings, total over any text. Parsers raise only :class:`forensics.errors.ParseError`.
"""

from __future__ import annotations

import re

from forensics.errors import ParseError

__all__ = ["normalize_pci_bus_id", "pci_bus_key"]

_PCI = re.compile(r"(?:[pP][cC][iI]:)?(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?")


def normalize_pci_bus_id(text: str) -> str:
    """``00000000:3B:00.0``, ``0000:3b:00``, ``PCI:0000:3b:00``, ``pci:0000:3b:00.0`` or ``3b:00.0``
    -> ``0000:3b:00.0`` (domain, bus, device, function; lower-case; a missing domain or function is
    0). Raises ParseError for anything else."""
    if not isinstance(text, str):
        raise ParseError("PCI bus id: expected text")
    found = _PCI.fullmatch(text.strip())
    if not found:
        raise ParseError(f"PCI bus id: {text[:40]!r}")
    # a domain above ffff is real: Linux numbers the domains behind an Intel VMD from 10000, and
    # NVML writes them in its 8 digits (00010000:3B:00.0 is the kernel's 10000:3b:00.0)
    domain = int(found.group(1) or "0", 16)
    return (f"{domain:04x}:{int(found.group(2), 16):02x}:{int(found.group(3), 16):02x}."
            f"{int(found.group(4) or '0')}")


def pci_bus_key(text: str) -> str:
    """The key two readings of the same GPU share: :func:`normalize_pci_bus_id`, or the text itself
    stripped and lower-cased when it is no PCI address (so joining never fails on odd input)."""
    try:
        return normalize_pci_bus_id(text)
    except ParseError:
        return text.strip().lower() if isinstance(text, str) else ""
