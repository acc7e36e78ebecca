"""The live view: the recorder's live state (the node now, folded from the records the samplers
already send) and its Prometheus exposition.

The package, one concept a module:

- :mod:`~forensics.record.live.state`: :class:`LiveState`, the fold (below);
- :mod:`~forensics.record.live.views`: the immutable records its readers give (:class:`GpuLive`,
  :class:`ProcessLive`, :class:`CgroupLive`, :class:`LiveEvent`);
- :mod:`~forensics.record.live.summaries`: what a sampler child sends of the per-tick lines
  (:func:`summarize`, :class:`Summarizer`), so the parent never parses them; their NVML part
  :mod:`~forensics.record.live.nvml`, their cgroup part (and the cgroup fold)
  :mod:`~forensics.record.live.cgroups`;
- :mod:`~forensics.record.live.events`: OOM kills, Xids and lost GPUs from the event members;
- :mod:`~forensics.record.live.decode`: member bytes as text and JSON lines;
- :mod:`~forensics.record.live.exposition` and :mod:`~forensics.record.live.metrics`: ``record
  --metrics-addr``, the live state as Prometheus metrics.

Nothing is imported here: each user imports the module it needs, so ``record`` without
``--trigger`` or ``--metrics-addr`` never loads the state (nor the analysis' attribution under
it), and the state never loads prometheus_client.

:class:`LiveState` is fed every record the recorder receives (``feed(t, mono, member, op, data)``,
from ``Recorder._handle``) and keeps only the latest figures, bounded; it never reads a source
itself. The triggers (forensics.record.triggers) and the metrics exporter read it through this
small typed API:

- :meth:`LiveState.gpus` -> :class:`GpuLive` per GPU (index, UUID, name, ``util_pct``,
  ``memory_used_bytes``/``memory_total_bytes``, ``lost``), from ``nvml/samples.jsonl`` device lines
  (nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo) and ``nvml/devices.json``;
- :meth:`LiveState.processes` -> :class:`ProcessLive` per (PID, GPU) NVML listed at the last tick
  (``used_memory_bytes`` from nvmlDeviceGetComputeRunningProcesses, ``sm_util_pct`` from
  nvmlDeviceGetProcessUtilization), each with its :class:`~forensics.analysis.attribution.OwnerInfo`
  (container id/name, pod namespace/name from ``proc/<pid>/cgroup``, docker inspect and its
  kubelet labels, the pods the Kubernetes follower records) and :class:`~forensics.analysis.attribution.Grant` (``allocated``, ``grant`` =
  explicit|shared|blanket|none);
- :meth:`LiveState.cgroups` -> :class:`CgroupLive` per sampled cgroup (container id and name,
  ``throttled_pct`` = throttled periods / periods over the last interval, ``psi_pct`` = PSI
  stall time / wall time over the last interval, per resource and some|full); :meth:`host_psi`
  the same for the host (``/proc/pressure``);
- for the triggers, what changed only: :meth:`LiveState.take_cgroup_rows` (the cgroups read since
  the last call with their shares over that whole interval, the cgroup sampler's clock, the host's
  shares; the cgroup lines are kept as text and parsed only when read: forensics.record.live.cgroups),
  :meth:`LiveState.cgroup_clock` (the newest cgroup line's time, no parse),
  :meth:`LiveState.process_keys` (changes with :attr:`LiveState.process_gen`) and
  :meth:`LiveState.process_figures` (one process' memory and SM %);
- :meth:`LiveState.take_events` -> :class:`LiveEvent` seen since the last call: ``oom`` (kernel OOM
  kills, ``kernel/window.jsonl``), ``xid`` (kernel Xid lines and NVML XidCriticalError events),
  ``gpu-lost`` (an NVML reading that answered GpuIsLost, or Xid 79);
- :meth:`LiveState.refresh` re-runs the attribution when identities changed (a new GPU PID, a new
  container inspect, new ``proc/<pid>/`` files): the analysis' own loaders and joins
  (forensics.analysis.attribution), so a live label never disagrees with a finding. Only on
  change, never per tick.

Everything is keyed on what the samplers wrote; times are the records' wall clocks (``t``).
"""
