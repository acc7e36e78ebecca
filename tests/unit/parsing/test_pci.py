"""One PCI address form for a GPU, from every form a bundle writes it in (forensics/parsing/pci.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.errors import ParseError
from forensics.parsing.pci import normalize_pci_bus_id, pci_bus_key


@pytest.mark.parametrize(("written", "expected"), [
    ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML nvmlDeviceGetPciInfo busId, nvidia-smi pci.bus_id, dcgm-exporter
    ("0000:3B:00.0", "0000:3b:00.0"),  # NVML busIdLegacy
    ("PCI:0000:3b:00", "0000:3b:00.0"),  # kernel log: NVRM: Xid (PCI:0000:3b:00): 79, ... (no function)
    ("0000:3b:00", "0000:3b:00.0"),  # kernel log, older drivers: NVRM: Xid (0000:3b:00): 31, ...
    ("0000:3b:00.0", "0000:3b:00.0"),  # sysfs /sys/bus/pci/devices/0000:3b:00.0, NVRM: GPU 0000:3b:00.0: ...
    ("pci:0000:3b:00.0", "0000:3b:00.0"),  # journald DEVICE=+pci:0000:3b:00.0
    ("3b:00.1", "0000:3b:00.1"),  # lspci without -D
    (" 00000001:AF:1F.7 ", "0001:af:1f.7"),  # another domain and function are kept
])
def test_every_form_normalises_to_the_sysfs_form(written: str, expected: str) -> None:
    assert normalize_pci_bus_id(written) == expected
    assert pci_bus_key(written) == expected
    assert normalize_pci_bus_id(expected) == expected  # its own output is a fixed point


def test_the_nvml_and_kernel_forms_of_one_gpu_share_a_key_and_other_gpus_do_not() -> None:
    nvml, kernel, sysfs = "00000000:3B:00.0", "PCI:0000:3b:00", "0000:3b:00.0"
    assert pci_bus_key(nvml) == pci_bus_key(kernel) == pci_bus_key(sysfs)
    assert pci_bus_key("00000000:86:00.0") != pci_bus_key(kernel)
    assert pci_bus_key("00000001:3B:00.0") != pci_bus_key(kernel)  # same bus, another PCI domain
    assert pci_bus_key("0000:3b:00.1") != pci_bus_key(kernel)  # another function


def test_a_gpu_behind_an_intel_vmd_joins_across_forms() -> None:
    """Linux numbers VMD domains from 10000 (five digits); NVML writes them in its eight."""
    assert normalize_pci_bus_id("00010000:3B:00.0") == normalize_pci_bus_id("PCI:10000:3b:00") == "10000:3b:00.0"
    assert pci_bus_key("00010000:3B:00.0") != pci_bus_key("0000:3b:00.0")


@pytest.mark.parametrize("bad", ["", "GPU-1234", "3b", "0000:3b:00.8", "100000000:3b:00.0",
                                 "0000:3b:00.0.0", "0000:3b:000.0"])
def test_anything_else_is_a_parse_error_and_joins_only_by_its_own_text(bad: str) -> None:
    with pytest.raises(ParseError):
        normalize_pci_bus_id(bad)
    assert pci_bus_key(bad) == bad.strip().lower()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_garbage_raises_only_parse_error_and_the_key_never_raises(text: str) -> None:
    try:
        normalize_pci_bus_id(text)
    except ParseError:
        pass
    assert isinstance(pci_bus_key(text), str)
