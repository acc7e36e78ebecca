"""Builders of analysis JSON documents (docs/analysis-format.md) for the report tests and bench.

The documents follow the worked example of DESIGN.md: host ``gpu-07``, two H100 GPUs, ``trainer``
allocated GPU 0 with ``--gpus device=0`` and ``notebook`` taking GPU 0 through its image's
``NVIDIA_VISIBLE_DEVICES=all``. ``hostile=True`` puts markup and template syntax in every string
that comes from a bundle, as a malicious container name or label would.
"""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime
from typing import Any

HOSTILE_IMG = "<img src=file:///etc/passwd>"
HOSTILE_STYLE = "</style><script>alert(1)</script>"
HOSTILE_TEMPLATE = "{{ 7*7 }}{% raw %}"
HOSTILE_MATH = "$\\alpha$_x"

T0 = datetime(2026, 11, 29, 14, 0, 0, tzinfo=UTC).timestamp()
BUNDLE = "gpuforensics-gpu-07-20261129T140500Z.tgz"


def iso(t: float) -> str:
    """Unix seconds -> ISO 8601 UTC with Z."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sha(text: str) -> str:
    """A deterministic SHA-256 hex digest standing in for a member's hash."""
    return hashlib.sha256(text.encode()).hexdigest()


def cid(name: str) -> str:
    """A deterministic 64-hex container id."""
    return sha("container:" + name)


def _subject(role: str, typ: str, id_: str, name: str, node: str = "gpu-07") -> dict[str, Any]:
    return {"role": role, "type": typ, "id": id_, "name": name, "node": node}


def _ev(member: str, locator: str, excerpt: str, bundle: str = BUNDLE) -> dict[str, Any]:
    return {"bundle": bundle, "member": member, "locator": locator, "excerpt": excerpt}


def _collectors(bundle: str, failed: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    out = []
    for i, name in enumerate(
        ["host", "nvml", "procfs", "cgroups", "kernel", "docker", "kubernetes"]
    ):
        status, error = failed.get(name, ("ok", ""))
        out.append(
            {
                "bundle": bundle,
                "name": name,
                "status": status,
                "duration_s": round(0.2 + 0.37 * i, 2),
                "error": error or None,
                "notes": [],
            }
        )
    return out


def build_incident_doc(
    hostile: bool = False, seconds: int = 300, interval_s: float = 1.0
) -> dict[str, Any]:
    """The GPU-theft incident: notebook takes GPU 0 from trainer, trainer is OOM-killed."""
    culprit_name = f"notebook{HOSTILE_IMG}{HOSTILE_STYLE}" if hostile else "notebook"
    victim_name = f"trainer{HOSTILE_TEMPLATE}" if hostile else "trainer"
    culprit_comm = f"python{HOSTILE_MATH}" if hostile else "python"
    host = f"gpu-07{HOSTILE_IMG}" if hostile else "gpu-07"
    image = f"jupyter/cuda:12.4 {HOSTILE_STYLE}" if hostile else "nvcr.io/nvidia/pytorch:24.05-py3"
    c_id, v_id = cid("notebook"), cid("trainer")
    gpu0, gpu1 = (
        "GPU-8f2c1a9e-55d1-4b7e-9a51-0c7d2e6b9f10",
        "GPU-1d3b77a0-0e4c-4f41-8c3e-7b2a9d5e6c21",
    )
    n = int(seconds / interval_s)
    t = [T0 + i * interval_s for i in range(n)]
    t_take = T0 + 130  # notebook starts on GPU 0
    t_oom = T0 + 221
    gib = 1024**3

    def starts(x: float) -> bool:
        return x >= t_take

    trainer_sm = [None if x > t_oom else (7.0 if starts(x) else 95.0 + 2 * math.sin(x)) for x in t]
    notebook_sm = [88.0 + 3 * math.sin(x / 7) if starts(x) else None for x in t]
    gpu_util = [min(100.0, (trainer_sm[i] or 0) + (notebook_sm[i] or 0)) for i in range(n)]
    trainer_mem = [None if x > t_oom else (17.5 * gib if x < t_take else 17.9 * gib) for x in t]
    notebook_mem = [min(62.0, (x - t_take) / 1.5) * gib if starts(x) else None for x in t]
    mem_used = [(trainer_mem[i] or 0) + (notebook_mem[i] or 0) + 0.6 * gib for i in range(n)]
    members = {
        "manifest.json": sha("manifest"),
        "nvml/devices.json": sha("devices"),
        "nvml/processes.json": sha("processes"),
        "nvml/samples.jsonl": sha("samples"),
        "proc/48213/cgroup": sha("cg48213"),
        "proc/47001/cgroup": sha("cg47001"),
        f"docker/containers/{c_id}/inspect.json": sha("insp-c"),
        f"docker/containers/{v_id}/inspect.json": sha("insp-v"),
        "docker/images/sha256-1c2d/inspect.json": sha("img"),
        "docker/events.jsonl": sha("events"),
        "kernel/kmsg.txt": sha("kmsg"),
        "kernel/xid.json": sha("xid"),
        "cgroup/samples.jsonl": sha("cgsamples"),
    }
    culprit = _subject("culprit", "container", c_id, culprit_name)
    victim = _subject("victim", "container", v_id, victim_name)
    gpu_w = _subject("witness", "gpu", gpu0, "GPU 0")
    findings = [
        {
            "id": "F1",
            "kind": "unallocated-gpu-use",
            "severity": "high",
            "confidence": 0.95,
            "summary": f"{culprit_name} (pid 48213, {culprit_comm}) used GPU 0, allocated to {victim_name}; its GPU "
            "access came only from the image's NVIDIA_VISIBLE_DEVICES=all under the default nvidia runtime",
            "start": iso(t_take),
            "end": iso(T0 + seconds),
            "node": "gpu-07",
            "subjects": [
                culprit,
                dict(victim),
                gpu_w,
                _subject("witness", "process", "48213", culprit_comm),
            ],
            "metrics": {"gpu_memory_used_bytes": 62 * gib, "sm_util_share_pct": 88.0},
            "evidence": [
                _ev(
                    "nvml/samples.jsonl",
                    "line 131",
                    '{"pid": 48213, "usedGpuMemory": 66571993088, "smUtil": 88}',
                ),
                _ev("proc/48213/cgroup", "line 1", f"0::/system.slice/docker-{c_id}.scope"),
                _ev(f"docker/containers/{c_id}/inspect.json", "/HostConfig/DeviceRequests", "null"),
                _ev(
                    "docker/images/sha256-1c2d/inspect.json",
                    "/Config/Env/3",
                    "NVIDIA_VISIBLE_DEVICES=all" + (HOSTILE_IMG if hostile else ""),
                ),
            ],
            "causes": ["F2"],
        },
        {
            "id": "F2",
            "kind": "gpu-compute-hog",
            "severity": "high",
            "confidence": 0.9,
            "summary": f"{culprit_name} held 88% of GPU 0's SM time; {victim_name}'s share fell from 95% to 7%",
            "start": iso(t_take + 2),
            "end": iso(t_oom),
            "node": "gpu-07",
            "subjects": [culprit, victim, gpu_w],
            "metrics": {
                "culprit_sm_share_pct": 88.0,
                "victim_sm_before_pct": 95.0,
                "victim_sm_after_pct": 7.0,
            },
            "evidence": [
                _ev(
                    "nvml/samples.jsonl",
                    "line 133",
                    '{"pid": 47001, "smUtil": 7, "timeStamp": 1764424932000000}',
                )
            ],
            "causes": ["F3"],
        },
        {
            "id": "F3",
            "kind": "oom-kill",
            "severity": "critical",
            "confidence": 0.85,
            "summary": f"{victim_name} (pid 47001) died with CUDA out of memory at 14:03:41Z while GPU 0 held 80.1 of 80 GiB",
            "start": iso(t_oom),
            "end": iso(t_oom),
            "node": "gpu-07",
            "subjects": [victim, gpu_w],
            "metrics": {"gpu_memory_used_bytes": int(79.9 * gib)},
            "evidence": [
                _ev(
                    "docker/events.jsonl",
                    "line 7",
                    '{"Action": "die", "Actor": {"Attributes": {"exitCode": "1"}}}',
                ),
                _ev(f"docker/containers/{v_id}/inspect.json", "/State/ExitCode", "1"),
            ],
            "causes": [],
        },
        {
            "id": "F4",
            "kind": "cpu-throttling",
            "severity": "low",
            "confidence": 0.7,
            "summary": f"{culprit_name} was CFS-throttled in 12% of periods (quota 2 cores)",
            "start": iso(T0 + 140),
            "end": iso(T0 + 290),
            "node": "gpu-07",
            "subjects": [_subject("victim", "container", c_id, culprit_name)],
            "metrics": {"cpu_throttled_ratio": 0.12},
            "evidence": [
                _ev(
                    "cgroup/samples.jsonl",
                    "line 402",
                    "nr_periods 1500 nr_throttled 180 throttled_usec 2210334",
                )
            ],
            "causes": [],
        },
    ]
    chain = [
        {
            "finding": "F1",
            "time": iso(t_take),
            "text": f"{culprit_name} started using GPU 0 (allocated to {victim_name}) without a GPU allocation",
            "leads_to": ["F2"],
        },
        {
            "finding": "F2",
            "time": iso(t_take + 2),
            "text": f"{victim_name}'s share of GPU 0 fell from 95% to 7% while {culprit_name} took 88%",
            "leads_to": ["F3"],
        },
        {
            "finding": "F3",
            "time": iso(t_oom),
            "text": f"{victim_name} died with a CUDA out-of-memory error (GPU 0 memory full)",
            "leads_to": [],
        },
    ]
    trainer_thr = [0.0 for _ in t]
    notebook_thr = [0.12 + 0.05 * math.sin(x / 11) if starts(x) else 0.0 for x in t]
    bundle = {
        "path": f"/var/tmp/{BUNDLE}",
        "file_sha256": sha("bundle-file"),
        "host": host,
        "captured_start": iso(T0),
        "captured_end": iso(T0 + seconds),
        "interrupted": False,
        "tool_version": "0.1.0",
        "bundle_format_version": 1,
        "members": members,
    }
    return {
        "format": "gpuforensics-analysis",
        "format_version": 1,
        "tool_version": "0.1.0",
        "generated_at": "2026-11-30T06:00:00Z",
        "bundle": bundle,
        "bundles": [bundle],
        "verdict": {
            "headline": f"container {culprit_name} used GPU 0 allocated to {victim_name} without an allocation; "
            f"{victim_name} died with a CUDA OOM 91 s later",
            "clean": False,
            "severity": "critical",
            "culprits": [culprit],
            "victims": [victim],
            "impact": f"{victim_name}: CUDA out-of-memory at 14:03:41Z; GPU 0 SM share fell from 95% to 7%",
            "start": iso(t_take),
            "end": iso(t_oom),
        },
        "findings": findings,
        "chain": chain,
        "ruled_out": [
            {
                "kind": "gpu-xid-fault",
                "statement": "no Xid error in the kernel log (412 records, 14:00:00Z-14:05:00Z)",
                "evidence": [
                    _ev("kernel/kmsg.txt", "", "412 records"),
                    _ev("kernel/xid.json", "", "[]"),
                ],
            },
            {
                "kind": "gpu-clock-throttle",
                "statement": "no thermal or power clock throttling on GPU 0 (reasons 0x0 in 300 samples)",
                "evidence": [_ev("nvml/samples.jsonl", "line 1", '{"clocksEventReasons": 0}')],
            },
            {
                "kind": "cpu-throttling",
                "statement": f"{victim_name} not CPU-throttled (0 of 1500 periods)",
                "evidence": [
                    _ev("cgroup/samples.jsonl", "line 401", "nr_periods 1500 nr_throttled 0")
                ],
            },
        ],
        "limitations": [
            "collector kubernetes unavailable (no kubeconfig): pod allocations unknown"
        ],
        "collectors": _collectors(
            BUNDLE, {"kubernetes": ("unavailable", "no kubeconfig and not in a cluster")}
        ),
        "gpus": [
            {
                "index": 0,
                "uuid": gpu0,
                "name": "NVIDIA H100 80GB HBM3",
                "node": "gpu-07",
                "pci_bus_id": "00000000:3B:00.0",
                "memory_total_bytes": 80 * gib,
                "mig_enabled": False,
                "allocated_to": [_subject("witness", "container", v_id, victim_name)],
                "used_by": [
                    _subject("witness", "container", v_id, victim_name),
                    _subject("witness", "container", c_id, culprit_name),
                ],
                "processes": [
                    {
                        "pid": 48213,
                        "name": culprit_comm,
                        "container": c_id,
                        "pod": None,
                        "used_memory_bytes": 62 * gib,
                        "sm_util_avg_pct": 88.0,
                    },
                    {
                        "pid": 47001,
                        "name": "python3",
                        "container": v_id,
                        "pod": None,
                        "used_memory_bytes": int(17.9 * gib),
                        "sm_util_avg_pct": 61.2,
                    },
                ],
                "series": {
                    "t": t,
                    "gpu_util_pct": gpu_util,
                    "memory_used_bytes": mem_used,
                    "temperature_c": [61.0 for _ in t],
                    "power_w": [540.0 for _ in t],
                    "process_sm_util_pct": {"47001": trainer_sm, "48213": notebook_sm},
                    "process_memory_bytes": {"47001": trainer_mem, "48213": notebook_mem},
                },
            },
            {
                "index": 1,
                "uuid": gpu1,
                "name": "NVIDIA H100 80GB HBM3",
                "node": "gpu-07",
                "pci_bus_id": "00000000:5E:00.0",
                "memory_total_bytes": 80 * gib,
                "mig_enabled": False,
                "allocated_to": [],
                "used_by": [],
                "processes": [],
                "series": {
                    "t": t,
                    "gpu_util_pct": [0.0 for _ in t],
                    "memory_used_bytes": [0.5 * gib for _ in t],
                    "temperature_c": [34.0 for _ in t],
                    "power_w": [71.0 for _ in t],
                    "process_sm_util_pct": {},
                    "process_memory_bytes": {},
                },
            },
        ],
        "containers": [
            {
                "id": c_id,
                "name": culprit_name,
                "node": "gpu-07",
                "pod": None,
                "image": image,
                "state": "running",
                "exit_code": None,
                "oom_killed": False,
                "gpu_allocation": {
                    "kind": "runtime-default",
                    "explicit": False,
                    "gpus": [gpu0, gpu1],
                    "source": "image Config.Env",
                    "detail": "NVIDIA_VISIBLE_DEVICES=all",
                },
                "cpu_quota_cores": 2.0,
                "memory_limit_bytes": 16 * gib,
                "oom_kills": 0,
                "series": {
                    "t": t,
                    "cpu_throttled_ratio": notebook_thr,
                    "memory_bytes": [(3 + 6 * (x - T0) / seconds) * gib for x in t],
                },
            },
            {
                "id": v_id,
                "name": victim_name,
                "node": "gpu-07",
                "pod": None,
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "state": "exited",
                "exit_code": 1,
                "oom_killed": False,
                "gpu_allocation": {
                    "kind": "device-request",
                    "explicit": True,
                    "gpus": [gpu0],
                    "source": "HostConfig.DeviceRequests",
                    "detail": "device=0",
                },
                "cpu_quota_cores": 8.0,
                "memory_limit_bytes": 64 * gib,
                "oom_kills": 0,
                "series": {
                    "t": t,
                    "cpu_throttled_ratio": trainer_thr,
                    "memory_bytes": [None if x > t_oom else 21.0 * gib for x in t],
                },
            },
        ],
        "pods": [],
        "nodes": [{"host": host, "bundles": [BUNDLE], "clock_offset_s": 0.0}],
        "unattributed": [],
        "thresholds": {"cpu_throttled_ratio_medium": 0.1, "gpu_memory_full_ratio": 0.95},
    }


def build_clean_doc() -> dict[str, Any]:
    """A clean host: no findings, nothing ruled against, one collector missing."""
    doc = build_incident_doc(seconds=60)
    doc["verdict"] = {
        "headline": "no incident found: no GPU contention, OOM kill, throttling or Xid fault",
        "clean": True,
        "severity": None,
        "culprits": [],
        "victims": [],
        "impact": "",
        "start": None,
        "end": None,
    }
    doc["findings"], doc["chain"] = [], []
    for gpu in doc["gpus"]:
        gpu["used_by"], gpu["processes"] = [], []
        gpu["series"]["process_sm_util_pct"], gpu["series"]["process_memory_bytes"] = {}, {}
        gpu["series"]["gpu_util_pct"] = [0.0 for _ in gpu["series"]["t"]]
    return doc


def build_snapshot_doc() -> dict[str, Any]:
    """A snapshot capture: series are empty lists, NVML failed, many values unknown (null)."""
    doc = build_incident_doc(seconds=60)
    for item in doc["gpus"] + doc["containers"]:
        item["series"] = {k: ({} if isinstance(v, dict) else []) for k, v in item["series"].items()}
    doc["containers"][0]["memory_limit_bytes"] = None
    doc["containers"][0]["cpu_quota_cores"] = None
    doc["gpus"][0]["memory_total_bytes"] = None
    doc["collectors"][1].update(status="failed", error="timed out after 20 s")
    doc["limitations"].append(
        "collector nvml failed (timed out after 20 s): GPU attribution limited"
    )
    return doc


def build_large_doc(
    gpus: int = 8,
    containers: int = 120,
    seconds: int = 3600,
    interval_s: float = 1.0,
    extra_findings: int = 60,
    members: int = 3000,
) -> dict[str, Any]:
    """A one-hour recording of a busy 8-GPU node: many containers, findings, members."""
    doc = build_incident_doc(seconds=seconds, interval_s=interval_s)
    t = doc["gpus"][0]["series"]["t"]
    gib = 1024**3
    template_gpu = doc["gpus"][1]
    for g in range(2, gpus):
        gpu = {
            **template_gpu,
            "index": g,
            "uuid": f"GPU-{sha(str(g))[:8]}-0000-4000-8000-{sha(str(g))[:12]}",
            "pci_bus_id": f"00000000:{0x60 + g:02X}:00.0",
            "processes": [],
            "series": {
                "t": t,
                "gpu_util_pct": [50 + 40 * math.sin(x / (60 + g)) for x in t],
                "memory_used_bytes": [(30 + 10 * math.sin(x / 300)) * gib for x in t],
                "process_sm_util_pct": {},
                "process_memory_bytes": {},
            },
        }
        for p in range(6):
            pid = 50000 + g * 100 + p
            gpu["processes"].append(
                {
                    "pid": pid,
                    "name": f"worker{p}",
                    "container": cid(f"job-{g}-{p}"),
                    "pod": None,
                    "used_memory_bytes": (p + 1) * gib,
                    "sm_util_avg_pct": 10.0 + p,
                }
            )
            gpu["series"]["process_sm_util_pct"][str(pid)] = [
                8 + p + 5 * math.sin(x / (30 + p)) for x in t
            ]
        doc["gpus"].append(gpu)
    base = doc["containers"][0]
    for c in range(containers):
        name = f"job-{c // 6}-{c % 6}"
        doc["containers"].append(
            {
                **base,
                "id": cid(name),
                "name": name,
                "image": f"registry.local/team/job:{c}",
                "gpu_allocation": {
                    "kind": "count",
                    "explicit": True,
                    "gpus": [],
                    "source": "HostConfig.DeviceRequests",
                    "detail": "count=1",
                },
                "series": {
                    "t": t,
                    "cpu_throttled_ratio": [abs(math.sin(x / (50 + c))) * (c % 7) / 10 for x in t],
                    "memory_bytes": [(2 + c % 5 + math.sin(x / 200)) * gib for x in t],
                },
            }
        )
    for i in range(extra_findings):
        fid = f"F{5 + i}"
        name = f"job-{i // 6}-{i % 6}"
        doc["findings"].append(
            {
                "id": fid,
                "kind": "cpu-throttling" if i % 2 else "pressure-stall",
                "severity": ["medium", "low", "info"][i % 3],
                "confidence": 0.6,
                "summary": f"{name} was CFS-throttled in {10 + i % 30}% of periods",
                "start": iso(T0 + 10 * i),
                "end": iso(T0 + 10 * i + 120),
                "node": "gpu-07",
                "subjects": [_subject("victim", "container", cid(name), name)],
                "metrics": {},
                "evidence": [
                    _ev(
                        "cgroup/samples.jsonl",
                        f"line {1000 + i}",
                        f"nr_periods 600 nr_throttled {60 + i}",
                    )
                ],
                "causes": [],
            }
        )
    for m in range(members):
        doc["bundles"][0]["members"][f"proc/{60000 + m}/cgroup"] = sha(f"m{m}")
    for i in range(40):
        doc["unattributed"].append(
            {
                "type": "process",
                "id": str(70000 + i),
                "name": "python",
                "node": "gpu-07",
                "reason": f"no /proc/{70000 + i}/cgroup in the bundle",
                "gpu": doc["gpus"][2]["uuid"],
            }
        )
    return doc
