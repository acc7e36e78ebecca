"""GPUs and GPU processes from the nvml collector (docs/bundle-format/nvml.md).

``nvml/devices.json`` (per GPU: ``nvmlDeviceGetUUID``, ``GetName``, ``GetPciInfo_v3`` busId,
``GetMemoryInfo[_v2]``, ``GetMigMode``; each value stored as ``{"value": ...}`` or as a missing
value with its reason), ``nvml/processes.json`` (the snapshot's process lists and
``nvmlDeviceGetProcessUtilization`` buffer), ``nvml/samples.jsonl`` (one line per GPU per tick:
utilization, memory, clocks event reasons, temperature, power, processes with ``usedGpuMemory``,
per-process ``smUtil``), ``nvml/events.jsonl`` (``XidCriticalError`` events with ``xid``).
"""

from __future__ import annotations

from typing import Any

from forensics.analysis.events import XidEvent
from forensics.analysis.loaders.common import Loader, as_float, as_int, dig
from forensics.analysis.loaders.state import LoadState
from forensics.analysis.model import Gpu, Model
from forensics.analysis.samples import NVML_SNAPSHOT, GpuSample, ProcessGpuSample
from forensics.analysis.source import Source
from forensics.specs import nvml as nvml_spec

_NO_INSTANCE = 0xFFFFFFFF  # NVML's gpuInstanceId/computeInstanceId outside MIG mode

__all__ = ["LOADER", "load_nvml"]

_INVALID_PIDS = frozenset({0, 0xFFFFFFFF})
_QUOTED = ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
           "nvmlDeviceGetCurrentClocksEventReasons")
_PROCESS_CALLS = tuple(f"{f}_{v}" for f in ("nvmlDeviceGetComputeRunningProcesses",
                                             "nvmlDeviceGetGraphicsRunningProcesses",
                                             "nvmlDeviceGetMPSComputeRunningProcesses") for v in ("v3", "v2"))


def _val(nvml: Any, call: str) -> Any:
    """The value NVML gave for ``call`` (None when it is missing: the reason stays in the bundle)."""
    entry = dig(nvml, call)
    if isinstance(entry, dict) and "value" in entry:
        return entry["value"]
    return None


def _memory(nvml: Any) -> tuple[int | None, int | None]:
    mem = _val(nvml, "nvmlDeviceGetMemoryInfo_v2") or _val(nvml, "nvmlDeviceGetMemoryInfo")
    return as_int(dig(mem, "used")), as_int(dig(mem, "total"))


def _reasons(nvml: Any) -> int | None:
    return as_int(_val(nvml, "nvmlDeviceGetCurrentClocksEventReasons")
                  if _val(nvml, "nvmlDeviceGetCurrentClocksEventReasons") is not None
                  else _val(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"))


def _power_w(nvml: Any) -> float | None:
    mw = as_float(_val(nvml, "nvmlDeviceGetPowerUsage"))
    return mw / 1000 if mw is not None else None


def _process_util(nvml: Any) -> tuple[dict[int, float], dict[int, int]]:
    """From one reading's nvmlDeviceGetProcessUtilization samples, in one pass: per PID the mean
    smUtil, and per PID the index of its last sample (for quoting; empty when no PID has smUtil)."""
    entry = nvml.get("nvmlDeviceGetProcessUtilization") if nvml.__class__ is dict else None
    util = entry.get("value") if entry.__class__ is dict else None
    if util.__class__ is not list:
        return {}, {}
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    items: dict[int, int] = {}
    for k, item in enumerate(util):
        if item.__class__ is not dict:
            continue
        pid = item.get("pid")
        if pid.__class__ is not int:
            continue
        items[pid] = k
        sm = item.get("smUtil")
        if sm.__class__ is int or sm.__class__ is float:  # (bool's class is bool: not a reading)
            if pid in sums:
                sums[pid] += sm
                counts[pid] = counts.get(pid, 1) + 1
            else:
                sums[pid] = float(sm)
    for pid, n in counts.items():
        sums[pid] /= n
    return sums, (items if sums else {})


def _sm_by_pid(nvml: Any) -> dict[int, float]:
    """Per-PID mean smUtil of the nvmlDeviceGetProcessUtilization samples in this reading."""
    return _process_util(nvml)[0]


def _mig_mode(value: Any, entry: Any) -> str | None:
    """``nvmlDeviceGetMigMode`` as a reader says it: [current, pending] or NotSupported."""
    if isinstance(value, list) and value and type(value[0]) is int:
        return "enabled" if value[0] == 1 else "disabled"
    return "not supported" if dig(entry, "missing") == "not_supported" else None


def _system_facts(model: Model, node: str, system: Any) -> None:
    """Driver, CUDA and NVML versions (``devices.json`` ``system``: nvmlSystemGet*)."""
    facts = model.node(node).facts
    driver = _val(system, "nvmlSystemGetDriverVersion")
    if isinstance(driver, str) and driver:
        facts.setdefault("driver_version", driver)
    cuda = _val(system, "nvmlSystemGetCudaDriverVersion_v2") or _val(system, "nvmlSystemGetCudaDriverVersion")
    if type(cuda) is int and cuda > 0:  # 12040 -> 12.4
        facts.setdefault("cuda_version", f"{cuda // 1000}.{cuda % 1000 // 10}")
    version = _val(system, "nvmlSystemGetNVMLVersion")
    if isinstance(version, str) and version:
        facts.setdefault("nvml_version", version)


def load_nvml(src: Source, model: Model, node: str, loading: LoadState) -> None:
    _pid_namespace(src, model, node)
    devices_doc = src.json(nvml_spec.DEVICES)
    devices = dig(devices_doc, "devices")
    for i, dev in enumerate(devices if isinstance(devices, list) else []):
        nvml = dig(dev, "nvml")
        index = as_int(dig(dev, "index"))
        uuid = _val(nvml, "nvmlDeviceGetUUID")
        if index is None or not isinstance(uuid, str):
            continue
        name = _val(nvml, "nvmlDeviceGetName")
        pci = dig(_val(nvml, "nvmlDeviceGetPciInfo_v3") or _val(nvml, "nvmlDeviceGetPciInfo"), "busId")
        _, total = _memory(nvml)
        mig = _val(nvml, "nvmlDeviceGetMigMode")
        serial, vbios = _val(nvml, "nvmlDeviceGetSerial"), _val(nvml, "nvmlDeviceGetVbiosVersion")
        minor = as_int(_val(nvml, "nvmlDeviceGetMinorNumber"))
        minor = minor if minor is not None and minor >= 0 else None
        model.gpus[(node, uuid)] = Gpu(
            node=node, index=index, uuid=uuid, name=name if isinstance(name, str) else "",
            pci_bus_id=pci if isinstance(pci, str) else None, memory_total_bytes=total,
            mig_enabled=isinstance(mig, list) and bool(mig) and mig[0] == 1,
            evidence=src.ev_pointer(nvml_spec.DEVICES, f"/devices/{i}/nvml/nvmlDeviceGetUUID", devices_doc),
            serial=serial if isinstance(serial, str) else None,
            vbios_version=vbios if isinstance(vbios, str) else None,
            mig_mode=_mig_mode(mig, dig(nvml, "nvmlDeviceGetMigMode")), minor_number=minor,
            minor_evidence=src.ev_pointer(nvml_spec.DEVICES, f"/devices/{i}/nvml/nvmlDeviceGetMinorNumber/value",
                                          devices_doc) if minor is not None else None)
    _system_facts(model, node, dig(devices_doc, "system"))
    by_index = {g.index: g.uuid for (n, _), g in model.gpus.items() if n == node}
    sampled = False
    member = nvml_spec.SAMPLES
    add_gpu_sample = model.series(GpuSample).append  # once: this loop runs per device per tick
    proc_samples = model.series(ProcessGpuSample)
    new_sample = tuple.__new__
    # one int object per distinct PID and memory figure: each parsed line makes its own (28 bytes
    # each, two per process per tick: ~15 MB of an hour of 8 GPUs x 64 processes)
    ints: dict[int, int] = {}
    same_int = ints.setdefault
    lost_lines: list[tuple[int, dict[str, Any], bytes]] = []  # the rare lines naming gpu_is_lost
    for no, line, _raw in src.jsonl(member):
        if line.get("kind", "device") != "device":
            continue
        if b'"gpu_is_lost"' in _raw:
            lost_lines.append((no, line, bytes(_raw)))
        t = as_float(line.get("t"))
        uuid = line.get("uuid") if isinstance(line.get("uuid"), str) else by_index.get(as_int(line.get("gpu_index")) or -1)
        if t is None or not isinstance(uuid, str):
            continue
        sampled = True
        nvml = line.get("nvml")
        used, total = _memory(nvml)
        util = as_float(dig(_val(nvml, "nvmlDeviceGetUtilizationRates"), "gpu"))
        temp = as_float(_val(nvml, "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"))
        add_gpu_sample(GpuSample(
            node, uuid, t, util, used, total, _reasons(nvml), temp, _power_w(nvml),
            src.ref(member, no, _raw, *(("nvml", k) for k in _QUOTED if isinstance(nvml, dict) and k in nvml))))
        line_ref = src.ref(member, no, _raw)
        sm, items = _process_util(nvml)
        # NotFound means "no process was active since lastSeenTimeStamp": SM 0 for the listed ones.
        has_util = _val(nvml, "nvmlDeviceGetProcessUtilization") is not None or \
            dig(nvml, "nvmlDeviceGetProcessUtilization", "missing") == "not_found"
        no_sm = 0.0 if has_util else None
        seen: set[int] = set()
        procs = line.get("processes")
        # tuple.__new__ straight: a NamedTuple's own __new__ is a Python call, per process per tick
        for j, p in enumerate(procs if procs.__class__ is list else ()):
            pid = p.get("pid") if p.__class__ is dict else None
            if pid.__class__ is not int or pid in _INVALID_PIDS or pid in seen:
                continue
            seen.add(pid)
            pid = same_int(pid, pid)
            used_mem = p.get("usedGpuMemory")
            if used_mem.__class__ is int:
                used_mem = same_int(used_mem, used_mem)
            mig = p.get("mig_uuid")
            gi = p.get("gpuInstanceId")
            proc_samples.append(new_sample(ProcessGpuSample, (
                node, uuid, pid, t, used_mem if used_mem.__class__ is int else None,
                sm.get(pid, no_sm), line_ref, j, items.get(pid, -1), mig if mig.__class__ is str else None,
                gi if gi.__class__ is int and 0 <= gi < _NO_INSTANCE else None)))
        for pid, value in sm.items():  # active in the period but no longer listed
            if pid not in seen and pid not in _INVALID_PIDS:
                proc_samples.append(ProcessGpuSample(
                    node, uuid, pid, t, None, value, line_ref, -1, items.get(pid, -1)))
    if sampled:
        model.node(node).members_used.setdefault("nvml", src.ref(member, 0, None).member)  # its bundle path
        pdoc = src.json(nvml_spec.PROCESSES)
        procs_doc = dig(pdoc, "processes")
        for p in procs_doc if isinstance(procs_doc, list) else []:
            pid = as_int(dig(p, "pid"))
            if pid is not None:
                _note_identity(loading, node, pid, p)
    else:
        _snapshot(src, model, node, devices_doc, by_index, loading)
    _events(src, model, node, by_index)
    from forensics.analysis.loaders.nvml_health import load_nvml_health

    load_nvml_health(src, model, node, lost_lines)  # memory-error counters (start, end) and GPUs that answered GpuIsLost


def _snapshot(src: Source, model: Model, node: str, devices_doc: Any, by_index: dict[int, str],
              loading: LoadState) -> None:
    """No sampling: one reading per GPU from devices.json and processes.json."""
    t = as_float(dig(devices_doc, "t"))
    devices = dig(devices_doc, "devices")
    if t is None:
        return
    for i, dev in enumerate(devices if isinstance(devices, list) else []):
        nvml = dig(dev, "nvml")
        uuid = _val(nvml, "nvmlDeviceGetUUID")
        if not isinstance(uuid, str):
            continue
        used, total = _memory(nvml)
        model.add(GpuSample(
            node, uuid, t, as_float(dig(_val(nvml, "nvmlDeviceGetUtilizationRates"), "gpu")), used, total,
            _reasons(nvml), as_float(_val(nvml, "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)")),
            _power_w(nvml), src.ref(nvml_spec.DEVICES, 0, dev, *(("nvml", k) for k in _QUOTED if isinstance(nvml, dict) and k in nvml),
                    pointer=f"/devices/{i}/nvml"), NVML_SNAPSHOT))
        model.node(node).members_used.setdefault("nvml", src.ref(nvml_spec.DEVICES, 0, None).member)
    pdoc = src.json(nvml_spec.PROCESSES)
    pt = as_float(dig(pdoc, "t")) or t
    sm_by_gpu: dict[str, dict[int, float]] = {}
    pdevs = dig(pdoc, "devices")
    for dev in pdevs if isinstance(pdevs, list) else []:
        uuid = dig(dev, "uuid") if isinstance(dig(dev, "uuid"), str) else by_index.get(as_int(dig(dev, "index")) or -1)
        if isinstance(uuid, str):
            sm_by_gpu[uuid] = _sm_by_pid(dig(dev, "nvml"))
    procs = dig(pdoc, "processes")
    for j, p in enumerate(procs if isinstance(procs, list) else []):
        pid = as_int(dig(p, "pid"))
        uuid = dig(p, "gpu_uuid") if isinstance(dig(p, "gpu_uuid"), str) else by_index.get(as_int(dig(p, "gpu_index")) or -1)
        if pid is None or pid in _INVALID_PIDS or not isinstance(uuid, str) or dig(p, "pid_valid") is False:
            continue
        sm = sm_by_gpu.get(uuid, {})
        mig = dig(p, "mig_uuid")
        model.add(ProcessGpuSample(
            node, uuid, pid, pt, as_int(dig(p, "used_memory_bytes")), sm.get(pid),
            src.ref(nvml_spec.PROCESSES, 0, p, pointer=f"/processes/{j}"),  # (snapshot: few)
            mig_uuid=mig if isinstance(mig, str) else None))
        _note_identity(loading, node, pid, p)


def _pid_namespace(src: Source, model: Model, node: str) -> None:
    """The collector's verdict on NVML's PIDs (``processes.json`` ``pid_namespace``)."""
    verdict = dig(src.json(nvml_spec.PROCESSES), "pid_namespace")
    status = dig(verdict, "status")
    if status == "mismatch":
        model.pid_mismatch_nodes.add(node)
        model.limit(f"{node}: NVML's PIDs are not this capture's /proc PIDs (capture outside the host PID "
                    "namespace): GPU processes cannot be attributed to containers")
    missing = dig(verdict, "missing_pids")
    for pid in missing if isinstance(missing, list) else []:
        if isinstance(pid, int):
            model.pids_absent_at_nvml.add((node, pid))


def _note_identity(loading: LoadState, node: str, pid: int, p: Any) -> None:
    """What NVML's collector saw of a GPU PID in /proc at that moment (comm, start time in ticks)."""
    comm, start = dig(p, "comm"), as_int(dig(p, "proc_start_ticks"))
    if isinstance(comm, str) or start is not None:
        loading.nvml_identity[(node, pid)] = (comm if isinstance(comm, str) else None, start)


def _events(src: Source, model: Model, node: str, by_index: dict[int, str]) -> None:
    member = nvml_spec.EVENTS
    info = model.nodes.get(node)
    for no, ev, raw in src.jsonl(member):
        decoded = ev.get("mask_decoded")
        if (ev.get("kind") == "registration" and info is not None and isinstance(decoded, list)
                and "XidCriticalError" in decoded):
            info.xid_watch_gpus += 1
            if info.xid_watch_evidence is None:
                info.xid_watch_evidence = src.ev_line(member, no, raw)
        xid = as_int(ev.get("xid"))
        if ev.get("kind") != "event" or xid is None:
            continue
        uuid = ev.get("uuid") if isinstance(ev.get("uuid"), str) else by_index.get(as_int(ev.get("gpu_index")) or -1)
        gpu = model.gpus.get((node, uuid)) if uuid else None
        model.add(XidEvent(node, as_float(ev.get("t")), xid, gpu.pci_bus_id if gpu else None, uuid,
                                   None, None, f"NVML XidCriticalError {xid}", src.ev_line(member, no, raw)))


LOADER = Loader("nvml", load_nvml, needs=())
