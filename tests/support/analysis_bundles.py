"""Build realistic bundles for analyzer tests with the real BundleWriter.

Members follow the collectors' own formats (forensics/collectors/*.py and docs/bundle-format):
NVML values keyed by the NVML call as ``{"value": ...}``, Docker inspect JSON as the Engine API
returns it, ``/proc/<pid>/cgroup`` verbatim, cgroup samples as the cgroups collector writes them,
``/dev/kmsg`` records verbatim, Kubernetes PodList JSON and pod-resources ``List`` JSON::

    b = BundleSpec(host="gpu-07")
    g0 = b.gpu(0)
    trainer = b.container("trainer", env=["NVIDIA_VISIBLE_DEVICES=0"])
    b.process(4242, "python", container=trainer)
    b.gpu_series(0, t0, 60, util=95, used=30 << 30, procs={4242: (30 << 30, 90)})
    path = b.write(tmp_path)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.bundle.writer import BundleWriter

__all__ = ["GIB", "T0", "BundleSpec", "cid_of", "gpu_uuid"]

GIB = 1 << 30
T0 = 1764424800.0  # 2025-11-29T14:00:00Z
BOOT = T0 - 86_400.0
ALL_COLLECTORS = ("host", "nvml", "procfs", "docker", "cgroups", "kernel", "kubernetes")


def cid_of(name: str) -> str:
    """A stable 64-hex container id for a test container name."""
    return hashlib.sha256(name.encode()).hexdigest()


def gpu_uuid(index: int, host: str = "gpu-07") -> str:
    h = hashlib.sha256(f"{host}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _v(value: Any) -> dict[str, Any]:
    return {"value": value}


@dataclass
class BundleSpec:
    """Everything one bundle will hold; ``write()`` produces the .tgz."""

    host: str = "gpu-07"
    start: float = T0
    duration_s: float = 60.0
    default_runtime: str = "nvidia"
    lookback_s: float | None = None  # capture --lookback, recorded in the manifest when set
    since: float | None = None  # capture --since (unix seconds), recorded in the manifest when set
    status: dict[str, str] = field(default_factory=lambda: {c: "ok" for c in ALL_COLLECTORS})
    members: dict[str, bytes] = field(default_factory=dict)
    jsonl: dict[str, list[str]] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    kmsg_lines: list[str] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    podresources: list[dict[str, Any]] = field(default_factory=list)
    _seq: int = 1000
    _psi: dict[tuple[str, bool, str], tuple[float, int, int]] = field(default_factory=dict)
    cgroup_index: list[dict[str, Any]] = field(default_factory=list)

    # -- NVML -----------------------------------------------------------------------------------
    def gpu(self, index: int, memory_total: int = 80 * GIB, name: str = "NVIDIA H100 80GB HBM3") -> str:
        uuid = gpu_uuid(index, self.host)
        bus = ["3B", "86", "AF", "D8", "18", "5E", "87", "DB"][index % 8]
        self.gpus.append({"index": index, "nvml": {
            "nvmlDeviceGetHandleByIndex_v2": _v("ok"),
            "nvmlDeviceGetUUID": _v(uuid),
            "nvmlDeviceGetName": _v(name),
            "nvmlDeviceGetPciInfo_v3": _v({"busId": f"00000000:{bus}:00.0", "bus": int(bus, 16),
                                           "domain": 0, "device": 0}),
            "nvmlDeviceGetMigMode": _v([0, 0]),
            "nvmlDeviceGetMemoryInfo_v2": _v({"total": memory_total, "used": 0, "free": memory_total,
                                              "reserved": 0, "version": 33554472}),
            "nvmlDeviceGetUtilizationRates": _v({"gpu": 0, "memory": 0}),
        }, "mig_devices": []})
        return uuid

    def gpu_tick(self, index: int, t: float, util: float, used: int, *, reasons: int = 0,
                 temp: float = 60, power_mw: int = 400_000, procs: dict[int, tuple[int, float | None]] | None = None,
                 total: int = 80 * GIB, mig: dict[int, str] | None = None) -> None:
        """One ``nvml/samples.jsonl`` device line; ``procs``: pid -> (usedGpuMemory, smUtil or None)."""
        uuid = gpu_uuid(index, self.host)
        util_samples = [{"pid": pid, "timeStamp": int(t * 1e6), "smUtil": sm, "memUtil": 0,
                         "encUtil": 0, "decUtil": 0} for pid, (_, sm) in (procs or {}).items() if sm is not None]
        nvml: dict[str, Any] = {
            "nvmlDeviceGetUtilizationRates": _v({"gpu": util, "memory": 0}),
            "nvmlDeviceGetMemoryInfo_v2": _v({"total": total, "used": used, "free": total - used,
                                              "reserved": 0, "version": 33554472}),
            "nvmlDeviceGetCurrentClocksEventReasons": {"value": reasons},
            "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)": _v(temp),
            "nvmlDeviceGetPowerUsage": _v(power_mw),
        }
        if util_samples:
            nvml["nvmlDeviceGetProcessUtilization"] = {"value": util_samples, "lastSeenTimeStamp": 0}
        else:
            nvml["nvmlDeviceGetProcessUtilization"] = {"missing": "not_found", "error": "NVMLError_NotFound",
                                                       "nvml_return": 6, "message": "Not Found",
                                                       "lastSeenTimeStamp": 0}
        line = {"kind": "device", "tick": int(t - self.start), "t": t, "time": iso_from_unix(t),
                "gpu_index": index, "uuid": uuid, "nvml": nvml,
                "processes": [{"pid": pid, "usedGpuMemory": mem, "gpuInstanceId": 0xFFFFFFFF,
                               "computeInstanceId": 0xFFFFFFFF, "type": "compute",
                               "mig_uuid": (mig or {}).get(pid)}
                              for pid, (mem, _) in (procs or {}).items()]}
        self.add_jsonl("nvml/samples.jsonl", line)

    def gpu_series(self, index: int, seconds: Iterable[float],
                   fn: Callable[[float], tuple[float, int, dict[int, tuple[int, float | None]]]],
                   **kw: Any) -> None:
        """A tick per second: ``fn(offset) -> (util, used, procs)``."""
        for s in seconds:
            util, used, procs = fn(s)
            self.gpu_tick(index, self.start + s, util, used, procs=procs, **kw)

    def nvml_processes(self, identities: dict[int, tuple[int, str, int]]) -> None:
        """``nvml/processes.json``: pid -> (gpu index, comm, start ticks) as NVML's collector saw them."""
        self.add_json("nvml/processes.json", {"t": self.start, "complete": True, "devices": [], "processes": [
            {"pid": pid, "gpu_index": g, "gpu_uuid": gpu_uuid(g, self.host), "mig_uuid": None,
             "gpu_instance_id": None, "compute_instance_id": None, "type": "compute",
             "used_memory_bytes": GIB, "pid_valid": True, "in_proc": True, "comm": comm,
             "proc_start_ticks": start} for pid, (g, comm, start) in identities.items()]})

    def nvml_xid_event(self, index: int, t: float, code: int) -> None:
        self.add_jsonl("nvml/events.jsonl", {
            "kind": "event", "tick": int(t - self.start), "t": t, "time": iso_from_unix(t),
            "gpu_index": index, "uuid": gpu_uuid(index, self.host), "mig_uuid": None,
            "eventType": 8, "eventType_decoded": ["XidCriticalError"], "eventData": code, "xid": code,
            "gpuInstanceId": None, "computeInstanceId": None})

    # -- processes and containers ----------------------------------------------------------------
    def process(self, pid: int, comm: str, *, container: str | None = None, cgroup: str | None = None,
                pod_uid: str | None = None, environ: list[str] | None = None) -> None:
        """``proc/<pid>/cgroup`` (v2, systemd driver) and ``proc/<pid>/stat``."""
        if cgroup is None:
            if container and pod_uid:
                cgroup = (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                          f"{pod_uid.replace('-', '_')}.slice/cri-containerd-{container}.scope")
            elif container:
                cgroup = f"/system.slice/docker-{container}.scope"
            else:
                cgroup = "/user.slice/user-1000.slice/session-3.scope"
        self.members[f"proc/{pid}/cgroup"] = f"0::{cgroup}\n".encode()
        if environ is not None:
            self.members[f"proc/{pid}/environ"] = ("\0".join(environ) + "\0").encode()
        self.members[f"proc/{pid}/stat"] = (f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 1 0 0 0 "
                                            f"10 5 0 0 20 0 4 0 100 1000000 100 18446744073709551615\n").encode()

    def container(self, name: str, *, image: str = "nvcr.io/nvidia/pytorch:24.05-py3",
                  env: list[str] | None = None, image_env: list[str] | None = None,
                  device_requests: list[dict[str, Any]] | None = None, runtime: str | None = None,
                  privileged: bool = False, nano_cpus: int = 0, memory: int = 0,
                  state: str = "running", exit_code: int = 0, oom_killed: bool = False,
                  started: float | None = None, finished: float | None = None,
                  labels: dict[str, str] | None = None) -> str:
        cid = cid_of(name)
        image_id = "sha256:" + hashlib.sha256(image.encode()).hexdigest()
        img_env = list(image_env if image_env is not None else ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=all",
                                                               "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
                                                               "CUDA_VERSION=12.4.1"])
        overrides = {e.split("=", 1)[0]: e for e in (env or [])}
        cont_env = [overrides.pop(e.split("=", 1)[0], e) for e in img_env] + list(overrides.values())
        inspect = {
            "Id": cid, "Name": f"/{name}", "Image": image_id, "Created": iso_from_unix(self.start - 600),
            "State": {"Status": state, "Running": state == "running", "Pid": 0, "ExitCode": exit_code,
                      "OOMKilled": oom_killed, "StartedAt": iso_from_unix(started or self.start - 300),
                      "FinishedAt": iso_from_unix(finished) if finished else "0001-01-01T00:00:00Z"},
            "HostConfig": {"Runtime": runtime or self.default_runtime, "Privileged": privileged,
                           "DeviceRequests": device_requests, "NanoCpus": nano_cpus, "CpuQuota": 0,
                           "CpuPeriod": 0, "Memory": memory, "Devices": []},
            "Config": {"Image": image, "Env": cont_env, "Labels": labels or {}},
        }
        self.add_json(f"docker/containers/{cid}/inspect.json", inspect)
        self.add_json(f"docker/images/{image_id.split(':')[1]}/inspect.json",
                      {"Id": image_id, "RepoTags": [image], "Config": {"Env": img_env}})
        return cid

    # -- cgroups ----------------------------------------------------------------------------------
    def cgroup_tick(self, t: float, cgroup: str, *, nr_periods: int | None = None, nr_throttled: int = 0,
                    throttled_usec: int = 0, memory: int | None = None,
                    psi: dict[str, tuple[float, float | None]] | None = None, host_psi: bool = False) -> None:
        values: dict[str, Any] = {}
        if nr_periods is not None:
            values["cpu"] = {"nr_periods": nr_periods, "nr_throttled": nr_throttled,
                             "throttled_ns": throttled_usec * 1000, "usage_ns": 0, "stat_version": 2}
        if memory is not None:
            values["memory"] = {"current_bytes": memory}
        if psi:
            # As the cgroups collector samples PSI: cumulative stall counters, advanced here so
            # that each interval's stall share is the given percentage.
            section: dict[str, Any] = {}
            for res, (some_pct, full_pct) in psi.items():
                key = (cgroup, host_psi, res)
                last_t, some_total, full_total = self._psi.get(key, (t - 1.0, 1_000_000, 500_000))
                dt_us = (t - last_t) * 1e6
                some_total += round(some_pct / 100 * dt_us)
                full_total += round((full_pct or 0.0) / 100 * dt_us)
                self._psi[key] = (t, some_total, full_total)
                section[res] = {"some_total_usec": some_total,
                                **({"full_total_usec": full_total} if full_pct is not None else {})}
            values["host_pressure" if host_psi else "pressure"] = section
        self.add_jsonl("cgroup/samples.jsonl", {"t": t, "time": iso_from_unix(t), "tick": int(t - self.start),
                                                "cgroup": cgroup, "values": values})

    def io_tick(self, t: float, cgroup: str, devices: dict[str, tuple[int, int]], *, v1: bool = False) -> None:
        """A cgroup samples line with block IO counters per device (bytes read, written): v2
        ``io.stat`` or, with ``v1``, ``blkio.throttle.io_service_bytes``, as the collector parses them."""
        io = ({"service_bytes": {d: {"read": r, "write": w, "total": r + w} for d, (r, w) in devices.items()}}
              if v1 else {"stat": {d: {"rbytes": r, "wbytes": w, "rios": r // 4096, "wios": w // 4096}
                                   for d, (r, w) in devices.items()}})
        self.add_jsonl("cgroup/samples.jsonl", {"t": t, "time": iso_from_unix(t), "tick": int(t - self.start),
                                                "cgroup": cgroup, "values": {"io": io}})

    def io_limit(self, cgroup: str, device: str, rbps: int | None = None, wbps: int | None = None,
                 *, v1: bool = False) -> None:
        """The cgroup's IO limit in ``cgroup/index.json`` (v2 ``io.max`` or v1 ``*_bps_device``)."""
        io = ({**({"read_bps_device": {device: rbps}} if rbps else {}),
               **({"write_bps_device": {device: wbps}} if wbps else {})} if v1 else
              {"max": {device: {"rbps": rbps, "wbps": wbps, "riops": None, "wiops": None}}})
        self.cgroup_index.append({"path": cgroup, "values": {"io": io}})

    # -- net --------------------------------------------------------------------------------------
    def net_tick(self, t: float, *, interfaces: dict[str, dict[str, Any]] | None = None,
                 ib: dict[str, dict[str, Any]] | None = None, netns: dict[str, dict[str, Any]] | None = None) -> None:
        """A ``net/samples.jsonl`` line as the net collector writes it (rates left out: the
        analysis derives its own from the counters)."""
        self.add_jsonl("net/samples.jsonl", {"t": t, "time": iso_from_unix(t), "tick": int(t - self.start),
                                             "interfaces": interfaces or {}, "ib": ib or {}, "disks": {},
                                             "netns": netns or {}, "rates": {}})

    # -- kernel -----------------------------------------------------------------------------------
    def kmsg(self, t: float, message: str, level: int = 4) -> None:
        self._seq += 1
        ts = int((t - BOOT) * 1e6)
        self.kmsg_lines.append(f"{level},{self._seq},{ts},-;{message}")

    def kernel_oom(self, t: float, pid: int, comm: str, memcg: str, usage_kb: int, limit_kb: int) -> None:
        self.kmsg(t, f"{comm} invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0")
        self.kmsg(t, f"memory: usage {usage_kb}kB, limit {limit_kb}kB, failcnt 42")
        self.kmsg(t, f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
                     f"oom_memcg={memcg},task_memcg={memcg},task={comm},pid={pid},uid=0")
        self.kmsg(t, f"Memory cgroup out of memory: Killed process {pid} ({comm}) total-vm:900000kB, "
                     f"anon-rss:{usage_kb}kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:2000kB oom_score_adj:0", 3)

    # -- Kubernetes -------------------------------------------------------------------------------
    def pod(self, namespace: str, name: str, uid: str, containers: list[tuple[str, str, int]],
            env: list[tuple[str, str]] | None = None, oom_killed: list[str] | None = None) -> None:
        """``containers``: (container name, container id, nvidia.com/gpu limit)."""
        spec_containers = []
        statuses = []
        for cname, cid, gpus in containers:
            limits = {"cpu": "4", "memory": "16Gi"}
            if gpus:
                limits["nvidia.com/gpu"] = str(gpus)
            spec_containers.append({"name": cname, "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                    "resources": {"limits": limits, "requests": dict(limits)},
                                    "env": [{"name": k, "value": v} for k, v in (env or [])]})
            status: dict[str, Any] = {"name": cname, "containerID": f"containerd://{cid}", "ready": True,
                                      "restartCount": 0, "image": "x", "imageID": "y",
                                      "state": {"running": {"startedAt": iso_from_unix(self.start - 100)}},
                                      "lastState": {}}
            if cname in (oom_killed or []):
                status["lastState"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                                      "containerID": f"containerd://{cid}",
                                                      "startedAt": iso_from_unix(self.start - 50),
                                                      "finishedAt": iso_from_unix(self.start + 30)}}
                status["restartCount"] = 1
            statuses.append(status)
        self.pods.append({"metadata": {"uid": uid, "namespace": namespace, "name": name},
                          "spec": {"nodeName": self.host, "containers": spec_containers},
                          "status": {"phase": "Running", "qosClass": "Burstable", "containerStatuses": statuses}})

    def pod_devices(self, namespace: str, name: str, container: str, device_ids: list[str]) -> None:
        self.podresources.append({"name": name, "namespace": namespace, "containers": [
            {"name": container, "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": device_ids}]}]})

    # -- raw members --------------------------------------------------------------------------------
    def add_json(self, member: str, obj: Any) -> None:
        self.members[member] = (json.dumps(obj, sort_keys=True, indent=1) + "\n").encode()

    def add_jsonl(self, member: str, obj: Any) -> None:
        self.jsonl.setdefault(member, []).append(json.dumps(obj, sort_keys=True, separators=(",", ":")))

    def write(self, out_dir: Path) -> Path:
        """Write the bundle with the real BundleWriter; collectors whose status is not ok/partial
        have their members left out (as a failed collector would have written nothing)."""
        def wanted(member: str) -> bool:
            prefix = member.split("/", 1)[0]
            owner = {"nvml": "nvml", "proc": "procfs", "docker": "docker", "cgroup": "cgroups",
                     "kernel": "kernel", "kubernetes": "kubernetes", "host": "host"}.get(prefix, prefix)
            return self.status.get(owner, "ok") in ("ok", "partial")

        when = datetime.fromtimestamp(self.start + self.duration_s, UTC)
        writer = BundleWriter(out_dir, self.host, when=when)
        if self.gpus:
            self.add_json("nvml/devices.json", {"t": self.start, "time": iso_from_unix(self.start),
                                                "complete": True, "system": {}, "devices": self.gpus})
        self.add_json("docker/info.json", {"DefaultRuntime": self.default_runtime,
                                           "Runtimes": {"nvidia": {"path": "nvidia-container-runtime"},
                                                        "runc": {"path": "runc"}}})
        self.add_json("host/host.json", {"hostname": self.host, "boot_time_unix": int(BOOT),
                                         "clocks": {"boot_time_from_monotonic_unix": BOOT}})
        if self.kmsg_lines or self.status.get("kernel") == "ok":
            base = [f"6,{i},{int((self.start - BOOT - 100 + i) * 1e6)},-;systemd[1]: routine message {i}"
                    for i in range(1, 4)]
            self.members["kernel/kmsg.txt"] = ("\n".join(base + self.kmsg_lines) + "\n").encode()
        if self.pods:
            self.add_json("kubernetes/pods.json", {"kind": "PodList", "apiVersion": "v1", "items": self.pods})
        if self.podresources:
            self.add_json("kubernetes/podresources/list.json", {"pod_resources": self.podresources})
        if self.cgroup_index:
            self.add_json("cgroup/index.json", {"cgroups": self.cgroup_index})
        for member, lines in self.jsonl.items():
            self.members[member] = ("\n".join(lines) + "\n").encode()
        for member, data in sorted(self.members.items()):
            if wanted(member):
                writer.sink.write_bytes(member, data)
        collectors = []
        for name in (*ALL_COLLECTORS, *(n for n in self.status if n not in ALL_COLLECTORS)):
            st = self.status.get(name, "ok")
            collectors.append({"name": name, "status": st, "started": iso_from_unix(self.start),
                               "duration_s": 0.5, "error": None if st in ("ok", "partial", "skipped")
                               else f"{name}: simulated {st}", "notes": []})
        return writer.finish({
            "host": {"hostname": self.host, "machine_id": "m", "boot_id": "b",
                     "captured_at_unix": self.start, "time_zone_offset_s": 0},
            "capture": {"started": iso_from_unix(self.start), "finished": iso_from_unix(self.start + self.duration_s),
                        "elapsed_s": self.duration_s, "interrupted": False,
                        "window": {"duration_s": self.duration_s, "interval_s": 1,
                                   **({"lookback_s": self.lookback_s} if self.lookback_s is not None else {}),
                                   **({"since": iso_from_unix(self.since)} if self.since is not None else {})}},
            "collectors": collectors,
        })
