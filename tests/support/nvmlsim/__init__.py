"""A simulated NVML for tests and sample bundles: a C ``libnvidia-ml.so.1`` driven by a scenario.

The library (``nvmlsim.c``) exports NVML's own symbols with the structures nvidia-ml-py 13.x
passes, so code under test runs the real ``pynvml`` against it. This module builds it and writes
the scenario it reads (path in ``$NVMLSIM_SCENARIO``, read at ``nvmlInit``)::

    from tests.support import nvmlsim

    lib = nvmlsim.build_library(tmp_path)                 # .../libnvidia-ml.so.1 (cached)
    sc = (nvmlsim.Scenario()
          .add_gpu(name="NVIDIA H100 80GB HBM3", gpu_util=[(0, 5), (2.0, 97)])
          .add_process(pid=os.getpid(), gpu=0, used_memory_bytes=8 << 30,
                       sm_util=[(0, 10), (2.0, 90)], mem_util=40)
          .add_xid(gpu=0, at_s=3.0, code=79)
          .lose_gpu(gpu=0, at_s=3.0)
          .inject("nvmlDeviceGetPowerUsage", "NoPermission", gpu=0)
          .hang("nvmlDeviceGetTemperature", seconds=30, gpu=0, from_s=5))
    path = sc.write(tmp_path / "scenario.tsv")
    env = nvmlsim.subprocess_env(path, lib)               # for a child process
    nvmlsim.activate(path)                                # for this process (sets the env var)

**Time.** Every time (``at_s``, ``from_s``, series points ``(t, value)``) is in seconds after the
scenario's ``epoch``: absolute unix seconds, by default the moment the ``Scenario`` was created.
All processes reading one scenario file share one timeline (capture forks a child per collector).

**Values.** A field given as a number is constant; as ``[(t, v), ...]`` it is a step function
(``v`` from ``t`` on; before the first point, the first value). A field set to ``None`` is absent:
its NVML getter answers NotSupported (to make a field appear later, ``inject`` NotSupported with
``to_s``).

**Semantics.** Device memory ``used`` is ``memory_used_base_bytes`` plus the memory of the live
processes on the device (and, for a GPU in MIG mode, on its MIG devices); v1 ``used`` also counts
``memory_reserved_bytes``. ``nvmlDeviceGetProcessUtilization`` returns one sample per live process
(with an ``sm_util`` series) per ``util_period_s``, at ``epoch + k * util_period_s``, keeping
``util_buffer_samples`` periods, and only samples newer than the caller's ``lastSeenTimeStamp``
(NotFound when none). Accounting (``accounting=True``) lists every process that started on the GPU,
running or not: ``gpuUtilization``/``memoryUtilization`` are time-weighted averages of its series.
Events are delivered only if they happen after ``nvmlDeviceRegisterEvents``. A lost GPU (and its
MIG devices) answers GpuIsLost to every call from ``at_s`` on. ``inject`` makes one function (its
``_vN`` variants too), on one device or all, sleep and/or return an error code in a time window.

The file format (tab-separated ``key=value`` records, one per line) is documented in README.md.
"""

from __future__ import annotations

import math
import os
import time
import uuid as uuidlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .build import BuildError, build, gcc_path

__all__ = [
    "ERROR_CODES",
    "BuildError",
    "Scenario",
    "activate",
    "build_library",
    "gcc_path",
    "subprocess_env",
]

Series = float | int | Sequence[tuple[float, float]] | None

#: NVML return codes by pynvml's class-name suffix (``NVMLError_<Name>``).
ERROR_CODES: dict[str, int] = {
    "Uninitialized": 1,
    "InvalidArgument": 2,
    "NotSupported": 3,
    "NoPermission": 4,
    "NotFound": 6,
    "InsufficientSize": 7,
    "DriverNotLoaded": 9,
    "Timeout": 10,
    "FunctionNotFound": 13,
    "CorruptedInforom": 14,
    "GpuIsLost": 15,
    "ResetRequired": 16,
    "LibRmVersionMismatch": 18,
    "Unknown": 999,
}

PROCESS_KINDS = {"compute": 0, "graphics": 1, "mps": 2}

#: nvmlNvLinkErrorCounter_t order (DL replay, recovery, CRC flit, CRC data): attribute ``nvlink_<name>_<link>``
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")

XID_EVENT = 0x8
ALL_EVENTS = 0x1 | 0x2 | 0x4 | 0x8 | 0x10


def build_library(dest_dir: str | os.PathLike[str] | None = None) -> Path:
    """Compile (or reuse) the simulated ``libnvidia-ml.so.1`` in ``dest_dir``; return its path."""
    return build(dest_dir)


def subprocess_env(scenario_path: str | os.PathLike[str], library: str | os.PathLike[str],
                   base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process whose ``pynvml`` should load the simulated library."""
    env = dict(os.environ if base is None else base)
    lib_dir = str(Path(library).parent)
    env["LD_LIBRARY_PATH"] = lib_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["NVMLSIM_SCENARIO"] = str(scenario_path)
    return env


def activate(scenario_path: str | os.PathLike[str]) -> None:
    """Point this process's simulated NVML at a scenario (read at the next ``nvmlInit``)."""
    os.environ["NVMLSIM_SCENARIO"] = str(scenario_path)


def _fmt(v: float) -> str:
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(float(v)) if isinstance(v, float) else str(int(v))


def _points(value: Series) -> list[tuple[float, float]]:
    if value is None:
        return []
    if isinstance(value, bool):
        return [(-math.inf, float(value))]
    if isinstance(value, int | float):
        return [(-math.inf, float(value))]
    return [(float(t), float(v)) for t, v in value]


def _clean(text: str) -> str:
    if any(c in text for c in "\t\n\r="):
        raise ValueError(f"scenario strings may not contain tabs, newlines or '=': {text!r}")
    return text


@dataclass
class _Device:
    id: int
    index: int
    parent: int
    slot: int
    gi: int | None
    ci: int | None
    uuid: str
    name: str
    serial: str
    pci: str
    lost_at: float | None
    vbios: str = ""
    attrs: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    retired: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass
class _Process:
    id: int
    pid: int
    dev: int
    kind: int
    start: float
    end: float
    series: dict[str, list[tuple[float, float]]]


class Scenario:
    """A simulated machine; every ``add_*`` returns ``self`` so calls chain."""

    def __init__(self, *, epoch: float | None = None, driver_version: str = "550.54.15",
                 nvml_version: str = "12.550.54.15", cuda_driver_version: int = 12040,
                 util_period_s: float = 1.0, util_buffer_samples: int = 20) -> None:
        self.epoch = time.time() if epoch is None else float(epoch)
        self.driver_version = _clean(driver_version)
        self.nvml_version = _clean(nvml_version)
        self.cuda_driver_version = cuda_driver_version
        self.util_period_s = util_period_s
        self.util_buffer_samples = util_buffer_samples
        self._devices: list[_Device] = []
        self._gpus: list[int] = []  # device ids of physical GPUs, by NVML index
        self._procs: list[_Process] = []
        self._events: list[tuple[int, float, int, int]] = []
        self._injections: list[tuple[str, int, int, float, float, float]] = []

    # -- devices ----------------------------------------------------------------------------
    def add_gpu(
        self, *, uuid: str | None = None, name: str = "NVIDIA H100 80GB HBM3", serial: str | None = None,
        pci_bus_id: str | None = None, pci_device_id: int = 0x233010DE, pci_subsystem_id: int = 0x16C110DE,
        memory_total_bytes: Series = 85520809984, memory_reserved_bytes: Series = 566755328,
        memory_used_base_bytes: Series = 0, persistence_mode: Series = 1, compute_mode: Series = 0,
        gpu_util: Series = 0, mem_util: Series = 0, clock_graphics_mhz: Series = 1980,
        clock_sm_mhz: Series = 1980, clock_mem_mhz: Series = 2619, clock_video_mhz: Series = 1545,
        clocks_event_reasons: Series = 0x1, supported_clocks_event_reasons: Series = 0x1FF,
        temperature_c: Series = 34, temp_slowdown_c: Series = 92, temp_shutdown_c: Series = 95,
        temp_gpu_max_c: Series = 87, temp_mem_max_c: Series = 95, power_mw: Series = 70_000,
        power_limit_mw: Series = 700_000, ecc: bool = True, ecc_corrected_volatile: Series = 0,
        ecc_uncorrected_volatile: Series = 0, ecc_corrected_aggregate: Series = 0,
        ecc_uncorrected_aggregate: Series = 0, page_retirement: bool = False,
        retired_pages_pending: Series = 0, remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0),
        pcie_replay_counter: Series = 0, pcie_gen_curr: Series = 5, pcie_gen_max: Series = 5,
        pcie_gen_gpu_max: Series = 5, pcie_width_curr: Series = 16, pcie_width_max: Series = 16,
        nvlink_links: int = 0, gpu_recovery_action: Series = 0, vbios_version: str | None = "96.00.74.00.01",
        accounting: bool | None = False,
        accounting_buffer_size: int = 4000, supported_event_types: Series = ALL_EVENTS,
        process_utilization: bool = True, mig: bool | None = None, mig_max_devices: int = 7,
        lost_at_s: float | None = None, minor_number: int | None = None, attrs: dict[str, Series] | None = None,
        unsupported: Iterable[str] = (),
    ) -> Scenario:
        """Add a physical GPU (NVML index = order of addition).

        ``mig``: None = MIG not supported (NotSupported), False = supported and disabled, True =
        enabled (add instances with :meth:`add_mig`). ``nvlink_links``: that many NVLinks, each
        active with its error counters at 0 (change one with ``attrs``, e.g. ``nvlink_crc_flit_2``);
        ``gpu_recovery_action`` is served as the field value NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
        ``vbios_version=None``: NotSupported. ``minor_number``: N of its ``/dev/nvidiaN``
        (``nvmlDeviceGetMinorNumber``; default its NVML index; the driver's probe order can differ
        from NVML's PCI order, so give it to test that). ``attrs`` sets raw attributes by their C
        name (see README.md), overriding the keywords; ``unsupported`` removes attributes so their
        getters answer NotSupported.
        """
        index = len(self._gpus)
        dev_id = len(self._devices)
        dev = _Device(
            id=dev_id, index=index, parent=-1, slot=0, gi=None, ci=None,
            uuid=_clean(uuid or f"GPU-{uuidlib.uuid4()}"), name=_clean(name),
            serial=_clean(serial if serial is not None else f"{1650923000000 + index}"),
            pci=_clean(pci_bus_id or f"00000000:{0x18 + 0x10 * index:02X}:00.0"), lost_at=lost_at_s,
            vbios=_clean(vbios_version or ""),
        )
        raw: dict[str, Series] = {
            "pci_device_id": pci_device_id, "pci_subsystem_id": pci_subsystem_id,
            "memory_total": memory_total_bytes, "memory_reserved": memory_reserved_bytes,
            "memory_used_base": memory_used_base_bytes, "persistence_mode": persistence_mode,
            "compute_mode": compute_mode, "gpu_util": gpu_util, "mem_util": mem_util,
            "clock_graphics_mhz": clock_graphics_mhz, "clock_sm_mhz": clock_sm_mhz,
            "clock_mem_mhz": clock_mem_mhz, "clock_video_mhz": clock_video_mhz,
            "clocks_event_reasons": clocks_event_reasons,
            "supported_clocks_event_reasons": supported_clocks_event_reasons,
            "temperature_c": temperature_c, "temp_slowdown_c": temp_slowdown_c,
            "temp_shutdown_c": temp_shutdown_c, "temp_gpu_max_c": temp_gpu_max_c,
            "temp_mem_max_c": temp_mem_max_c, "power_mw": power_mw, "power_limit_mw": power_limit_mw,
            "pcie_replay_counter": pcie_replay_counter, "supported_event_types": supported_event_types,
            "pcie_gen_curr": pcie_gen_curr, "pcie_gen_max": pcie_gen_max, "pcie_gen_gpu_max": pcie_gen_gpu_max,
            "pcie_width_curr": pcie_width_curr, "pcie_width_max": pcie_width_max,
            "gpu_recovery_action": gpu_recovery_action,
            "minor_number": index if minor_number is None else minor_number,
            "process_utilization": 1 if process_utilization else None,
        }
        if ecc:
            raw.update({
                "ecc_mode_current": 1, "ecc_mode_pending": 1,
                "ecc_corrected_volatile": ecc_corrected_volatile,
                "ecc_uncorrected_volatile": ecc_uncorrected_volatile,
                "ecc_corrected_aggregate": ecc_corrected_aggregate,
                "ecc_uncorrected_aggregate": ecc_uncorrected_aggregate,
            })
        if page_retirement:
            raw.update({"page_retirement": 1, "retired_pages_pending": retired_pages_pending})
        if remapped_rows is not None:
            for key, v in zip(("correctable", "uncorrectable", "pending", "failure"), remapped_rows, strict=True):
                raw[f"remapped_rows_{key}"] = v
        if nvlink_links:
            raw["nvlink_count"] = nvlink_links
            for link in range(nvlink_links):
                raw[f"nvlink_state_{link}"] = 1
                for counter in NVLINK_COUNTERS:
                    raw[f"nvlink_{counter}_{link}"] = 0
        if accounting is not None:
            raw["accounting_mode"] = 1 if accounting else 0
            raw["accounting_buffer_size"] = accounting_buffer_size
        if mig is not None:
            raw.update({"mig_mode_current": int(mig), "mig_mode_pending": int(mig),
                        "mig_max_devices": mig_max_devices})
        raw.update(attrs or {})
        for name_ in unsupported:
            raw[name_] = None
        dev.attrs = {k: _points(v) for k, v in raw.items() if v is not None}
        self._devices.append(dev)
        self._gpus.append(dev_id)
        return self

    def add_mig(self, *, gpu: int, slot: int, gpu_instance_id: int, compute_instance_id: int = 0,
                uuid: str | None = None, name: str | None = None,
                memory_total_bytes: Series = 10_200_547_328, attrs: dict[str, Series] | None = None) -> Scenario:
        """Add a MIG device (slot for ``nvmlDeviceGetMigDeviceHandleByIndex``) on GPU ``gpu``."""
        parent = self._devices[self._gpus[gpu]]
        dev = _Device(
            id=len(self._devices), index=parent.index, parent=parent.id, slot=slot,
            gi=gpu_instance_id, ci=compute_instance_id, uuid=_clean(uuid or f"MIG-{uuidlib.uuid4()}"),
            name=_clean(name or f"{parent.name} MIG 1g.10gb"), serial=parent.serial, pci=parent.pci,
            lost_at=None,
        )
        raw: dict[str, Series] = {"memory_total": memory_total_bytes, "memory_reserved": 0,
                                  "memory_used_base": 0}
        raw.update(attrs or {})
        dev.attrs = {k: _points(v) for k, v in raw.items() if v is not None}
        self._devices.append(dev)
        return self

    def _device_id(self, gpu: int, mig: int | None = None) -> int:
        if gpu < 0 or gpu >= len(self._gpus):
            raise ValueError(f"no GPU {gpu} in the scenario")
        parent = self._gpus[gpu]
        if mig is None:
            return parent
        for d in self._devices:
            if d.parent == parent and d.slot == mig:
                return d.id
        raise ValueError(f"no MIG slot {mig} on GPU {gpu}")

    def set_attr(self, gpu: int, name: str, value: Series, mig: int | None = None) -> Scenario:
        """Set (or with None, remove) one raw attribute of a device."""
        dev = self._devices[self._device_id(gpu, mig)]
        if value is None:
            dev.attrs.pop(name, None)
        else:
            dev.attrs[name] = _points(value)
        return self

    def gpu_uuid(self, gpu: int, mig: int | None = None) -> str:
        return self._devices[self._device_id(gpu, mig)].uuid

    def gpu_pci_bus_id(self, gpu: int) -> str:
        return self._devices[self._device_id(gpu)].pci

    # -- processes ----------------------------------------------------------------------------
    def add_process(self, *, pid: int, gpu: int = 0, mig: int | None = None, kind: str = "compute",
                    used_memory_bytes: Series = 1 << 30, sm_util: Series = None, mem_util: Series = None,
                    enc_util: Series = None, dec_util: Series = None, start_s: float | None = None,
                    end_s: float | None = None) -> Scenario:
        """A GPU process (a real PID or any number) live from ``start_s`` until ``end_s``.

        ``used_memory_bytes=None`` reports NVML_VALUE_NOT_AVAILABLE (pynvml turns it into None).
        Without ``sm_util`` the process has no per-process utilization samples.
        """
        if kind not in PROCESS_KINDS:
            raise ValueError(f"kind must be one of {sorted(PROCESS_KINDS)}")
        series = {
            "used_memory": _points(used_memory_bytes), "sm_util": _points(sm_util),
            "mem_util": _points(mem_util), "enc_util": _points(enc_util), "dec_util": _points(dec_util),
        }
        self._procs.append(_Process(
            id=len(self._procs), pid=int(pid), dev=self._device_id(gpu, mig), kind=PROCESS_KINDS[kind],
            start=-math.inf if start_s is None else float(start_s),
            end=math.inf if end_s is None else float(end_s), series=series,
        ))
        return self

    # -- events, failures, injections ---------------------------------------------------------
    def add_event(self, *, gpu: int, at_s: float, event_type: int, data: int = 0,
                  mig: int | None = None) -> Scenario:
        self._events.append((self._device_id(gpu, mig), float(at_s), int(event_type), int(data)))
        return self

    def add_xid(self, *, gpu: int, at_s: float, code: int, mig: int | None = None) -> Scenario:
        """An Xid critical error event (``nvmlEventTypeXidCriticalError``, ``eventData`` = code)."""
        return self.add_event(gpu=gpu, at_s=at_s, event_type=XID_EVENT, data=code, mig=mig)

    def lose_gpu(self, *, gpu: int, at_s: float) -> Scenario:
        """From ``at_s`` on, every call on this GPU (and its MIG devices) answers GpuIsLost."""
        self._devices[self._device_id(gpu)].lost_at = float(at_s)
        return self

    def add_retired_page(self, *, gpu: int, cause: int, address: int, timestamp: int) -> Scenario:
        """A retired page (cause 0: multiple single-bit ECC, 1: double-bit ECC); needs page_retirement."""
        self._devices[self._device_id(gpu)].retired.append((cause, address, timestamp))
        return self

    def inject(self, func: str, error: str | int, *, gpu: int | None = None, mig: int | None = None,
               from_s: float | None = None, to_s: float | None = None, sleep_s: float = 0.0) -> Scenario:
        """Make NVML function ``func`` (and ``func_vN``) return ``error`` (a name from ERROR_CODES
        or a number) on one GPU (None: every device and system calls) during [from_s, to_s)."""
        code = ERROR_CODES[error] if isinstance(error, str) else int(error)
        dev = -1 if gpu is None else self._device_id(gpu, mig)
        self._injections.append((
            _clean(func), dev, code, float(sleep_s),
            -math.inf if from_s is None else float(from_s), math.inf if to_s is None else float(to_s),
        ))
        return self

    def hang(self, func: str, *, seconds: float, gpu: int | None = None, from_s: float | None = None,
             to_s: float | None = None) -> Scenario:
        """Make ``func`` sleep ``seconds`` before answering (as NVML does once a GPU is wedged)."""
        dev = -1 if gpu is None else self._device_id(gpu)
        self._injections.append((
            _clean(func), dev, 0, float(seconds),
            -math.inf if from_s is None else float(from_s), math.inf if to_s is None else float(to_s),
        ))
        return self

    # -- output -------------------------------------------------------------------------------
    def render(self) -> str:
        """The scenario file's text (format: README.md)."""
        out = ["nvmlsim\t1"]
        out.append(
            f"system\tepoch={self.epoch!r}\tdriver={self.driver_version}\tnvml={self.nvml_version}"
            f"\tcuda={self.cuda_driver_version}\tutil_period={self.util_period_s!r}"
            f"\tutil_buffer={self.util_buffer_samples}"
        )
        for d in self._devices:
            line = (f"device\tid={d.id}\tindex={d.index}\tparent={d.parent}\tslot={d.slot}"
                    f"\tuuid={d.uuid}\tname={d.name}\tserial={d.serial}\tpci={d.pci}")
            if d.vbios:
                line += f"\tvbios={d.vbios}"
            if d.gi is not None:
                line += f"\tgi={d.gi}\tci={d.ci}"
            if d.lost_at is not None:
                line += f"\tlost_at={_fmt(d.lost_at)}"
            out.append(line)
            for name, pts in sorted(d.attrs.items()):
                for t, v in pts:
                    out.append(f"attr\tdev={d.id}\tname={name}\tt={_fmt(t)}\tv={_fmt(v)}")
            for cause, address, ts in d.retired:
                out.append(f"retired\tdev={d.id}\tcause={cause}\taddress={address}\ttimestamp={ts}")
        for p in self._procs:
            out.append(f"proc\tid={p.id}\tpid={p.pid}\tdev={p.dev}\ttype={p.kind}"
                       f"\tstart={_fmt(p.start)}\tend={_fmt(p.end)}")
            for name, pts in p.series.items():
                for t, v in pts:
                    out.append(f"pattr\tproc={p.id}\tname={name}\tt={_fmt(t)}\tv={_fmt(v)}")
        for dev, at, etype, data in self._events:
            out.append(f"event\tdev={dev}\tt={_fmt(at)}\ttype={etype}\tdata={data}")
        for func, dev, code, sleep, frm, to in self._injections:
            out.append(f"inject\tfunc={func}\tdev={dev}\tcode={code}\tsleep={sleep!r}"
                       f"\tfrom={_fmt(frm)}\tto={_fmt(to)}")
        return "\n".join(out) + "\n"

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the scenario file atomically; return its path."""
        p = Path(path)
        tmp = p.with_name(p.name + f".{os.getpid()}.tmp")
        tmp.write_text(self.render(), encoding="utf-8")
        os.replace(tmp, p)
        return p
