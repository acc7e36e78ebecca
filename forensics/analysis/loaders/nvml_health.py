"""GPU health from the nvml collector: memory-error counters at the start and end of the window, and
the GPUs NVML answered GpuIsLost for (docs/bundle-format/nvml.md).

``nvml/devices.json`` (the snapshot, phase ``start``) and ``nvml/health_end.json`` (the same reads
after sampling, phase ``end``; absent from older bundles): ``nvmlDeviceGetTotalEccErrors`` (volatile
and aggregate, corrected and uncorrected), ``nvmlDeviceGetRetiredPages_v2`` (per cause: the pages'
list), ``nvmlDeviceGetRetiredPagesPendingStatus``, ``nvmlDeviceGetRemappedRows`` (``corrRows``,
``uncRows``, ``isPending``, ``failureOccurred``), ``nvmlDeviceGetPcieReplayCounter``, the PCIe link
(``nvmlDeviceGetCurr/MaxPcieLinkGeneration``, ``...Width``, ``nvmlDeviceGetGpuMaxPcieLinkGeneration``),
NVLink per link (``nvmlDeviceGetNvLinkState(<link>)`` and ``nvmlDeviceGetNvLinkErrorCounter(<link>,
<counter>)``: counters ``nvlink_<link>_state``, ``_replay``, ``_recovery``, ``_crc_flit``, ``_crc_data``)
and the recovery action (field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, recorded as
``nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)``). A value NVML did not give is None
(its reason stays in the bundle).
GpuIsLost: any call of a device in ``devices.json`` or a ``samples.jsonl`` line whose missing reason
is ``gpu_is_lost`` is a witness (the first and the last such reading of each GPU are kept).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from forensics.analysis.events import GpuHealthReading, GpuLostWitness
from forensics.analysis.findings import Evidence
from forensics.analysis.loaders.common import as_float, as_int, dig
from forensics.analysis.model import Model
from forensics.analysis.source import Source
from forensics.specs import nvml as nvml_spec

__all__ = ["COUNTERS", "load_nvml_health"]

_ECC = "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_{},NVML_{}_ECC)"
_PAGES = "nvmlDeviceGetRetiredPages_v2(NVML_PAGE_RETIREMENT_CAUSE_{})"
#: counter name -> (NVML call, how to read the value: None = the value, a key = that field, "len" = list length)
COUNTERS: dict[str, tuple[str, str | None]] = {
    "ecc_uncorrected_volatile": (_ECC.format("UNCORRECTED", "VOLATILE"), None),
    "ecc_uncorrected_aggregate": (_ECC.format("UNCORRECTED", "AGGREGATE"), None),
    "ecc_corrected_volatile": (_ECC.format("CORRECTED", "VOLATILE"), None),
    "ecc_corrected_aggregate": (_ECC.format("CORRECTED", "AGGREGATE"), None),
    "retired_pages_sbe": (_PAGES.format("MULTIPLE_SINGLE_BIT_ECC_ERRORS"), "len"),
    "retired_pages_dbe": (_PAGES.format("DOUBLE_BIT_ECC_ERROR"), "len"),
    "retired_pages_pending": ("nvmlDeviceGetRetiredPagesPendingStatus", None),
    "remapped_rows_correctable": ("nvmlDeviceGetRemappedRows", "corrRows"),
    "remapped_rows_uncorrectable": ("nvmlDeviceGetRemappedRows", "uncRows"),
    "remap_pending": ("nvmlDeviceGetRemappedRows", "isPending"),
    "remap_failure": ("nvmlDeviceGetRemappedRows", "failureOccurred"),
    "pcie_replay_counter": ("nvmlDeviceGetPcieReplayCounter", None),
    "pcie_gen_curr": ("nvmlDeviceGetCurrPcieLinkGeneration", None),
    "pcie_gen_max": ("nvmlDeviceGetMaxPcieLinkGeneration", None),
    "pcie_gen_gpu_max": ("nvmlDeviceGetGpuMaxPcieLinkGeneration", None),
    "pcie_width_curr": ("nvmlDeviceGetCurrPcieLinkWidth", None),
    "pcie_width_max": ("nvmlDeviceGetMaxPcieLinkWidth", None),
    "gpu_recovery_action": ("nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)", None),
}
_REMAP_INDEX = {"corrRows": 0, "uncRows": 1, "isPending": 2, "failureOccurred": 3}
#: NVLink reads, one per link: ``nvlink_<link>_state`` (1 active) and ``nvlink_<link>_<counter>``
#: (``replay``, ``recovery``, ``crc_flit``, ``crc_data``; nvmlNvLinkErrorCounter_t)
_NVLINK = re.compile(r"nvmlDeviceGetNvLink(?:State\((\d{1,2})\)|ErrorCounter\((\d{1,2}),NVML_NVLINK_ERROR_DL_"
                     r"(REPLAY|RECOVERY|CRC_FLIT|CRC_DATA)\))")


def _counter(nvml: Any, call: str, how: str | None) -> int | None:
    entry = dig(nvml, call)
    if not isinstance(entry, dict) or "value" not in entry:
        return None
    value = entry["value"]
    if how is None:
        return as_int(value)
    if how == "len":
        return len(value) if isinstance(value, list) else None
    decoded = dig(entry, "decoded", how)
    if as_int(decoded) is not None:
        return as_int(decoded)
    if isinstance(value, dict):
        return as_int(value.get(how))
    if isinstance(value, list) and how in _REMAP_INDEX:
        return as_int(dig(value, _REMAP_INDEX[how]))
    return None


def _reading(src: Source, member: str, doc: Any, i: int, dev: Any, uuid: str, phase: str, node: str,
             t: float | None) -> GpuHealthReading | None:
    nvml = dig(dev, "nvml")
    if not isinstance(nvml, dict):
        return None
    counters: list[tuple[str, int | None]] = []
    evidence: list[tuple[str, Evidence]] = []
    calls = [(name, call, how) for name, (call, how) in COUNTERS.items()]
    for call in nvml:
        link = _NVLINK.fullmatch(call) if isinstance(call, str) else None
        if link is not None:
            name = f"nvlink_{link.group(1)}_state" if link.group(1) else f"nvlink_{link.group(2)}_{link.group(3).lower()}"
            calls.append((name, call, None))
    for name, call, how in calls:
        value = _counter(nvml, call, how)
        counters.append((name, value))
        if call in nvml:
            evidence.append((name, src.ev_pointer(member, f"/devices/{i}/nvml/{call.replace('~', '~0').replace('/', '~1')}",
                                                  doc)))
    if all(v is None for _, v in counters):
        return None
    return GpuHealthReading(node, uuid, t, phase, tuple(counters), tuple(evidence))


def _is_lost(nvml: Any) -> str | None:
    """The first call of a reading that answered GpuIsLost, else None."""
    if not isinstance(nvml, dict):
        return None
    for call, entry in nvml.items():
        if isinstance(entry, dict) and entry.get("missing") == "gpu_is_lost":
            return str(call)
    return None


def load_nvml_health(src: Source, model: Model, node: str,
                     lost_lines: Iterable[tuple[int, dict[str, Any], bytes]] | None = None) -> None:
    """The memory-error counters (start, end) and the GPUs that answered GpuIsLost. ``lost_lines``:
    the samples' lines holding ``"gpu_is_lost"``, as the samples' own pass met them (without it the
    samples are read again for them: a big member's second inflate, or a ring member's second
    rebuild)."""
    by_index = {g.index: g for (n, _), g in model.gpus.items() if n == node}
    for member, phase in ((nvml_spec.DEVICES, "start"), (nvml_spec.HEALTH_END, "end")):
        doc = src.json(member)
        devices = dig(doc, "devices")
        t = as_float(dig(doc, "t"))
        for i, dev in enumerate(devices if isinstance(devices, list) else []):
            index = as_int(dig(dev, "index"))
            gpu = by_index.get(index) if index is not None else None
            uuid = gpu.uuid if gpu else dig(dev, "nvml", "nvmlDeviceGetUUID", "value")
            lost = _is_lost(dig(dev, "nvml"))
            if lost is not None:
                model.add(GpuLostWitness(
                    node, t, gpu.pci_bus_id if gpu else None, uuid if isinstance(uuid, str) else None, "nvml",
                    f"{lost} answered GpuIsLost for GPU {index} ({phase} of the capture)",
                    (src.ev_pointer(member, f"/devices/{i}/nvml/{lost}", doc),), index))
            if isinstance(uuid, str):
                reading = _reading(src, member, doc, i, dev, uuid, phase, node, t)
                if reading is not None:
                    model.add(reading)
    first: dict[int, tuple[float, GpuLostWitness]] = {}
    last: dict[int, tuple[float, GpuLostWitness]] = {}
    member = nvml_spec.SAMPLES
    # else the samples again, for GpuIsLost answers only: lines without the reason's name are not parsed
    lines = lost_lines if lost_lines is not None else src.jsonl(member, containing=b'"gpu_is_lost"')
    for no, line, raw in lines:
        if line.get("kind", "device") != "device":
            continue
        lost = _is_lost(line.get("nvml"))
        index = as_int(line.get("gpu_index"))
        t = as_float(line.get("t"))
        if lost is None or index is None or t is None:
            continue
        gpu = by_index.get(index)
        uuid = line.get("uuid") if isinstance(line.get("uuid"), str) else (gpu.uuid if gpu else None)
        w = GpuLostWitness(node, t, gpu.pci_bus_id if gpu else None, uuid, "nvml",
                           f"{lost} answered GpuIsLost for GPU {index} (sample at tick {line.get('tick')})",
                           (src.ev_line(member, no, raw),), index)
        if index not in first:
            first[index] = (t, w)
        last[index] = (t, w)
    for index, (_, w) in first.items():
        model.add(w)
        if last[index][1] is not w:
            model.add(last[index][1])
