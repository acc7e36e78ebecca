"""Workload logs, whichever source took them: the Docker engine (``docker/containers/<id>/logs.txt``)
or the Kubernetes API server (``kubernetes/logs/<ns>/<pod>/<container>[.previous].log``), both
``timestamps=true`` text. Each becomes typed log signals (:mod:`forensics.parsing.logsignals`) in
``model.series(LogSignal)``, CUDA out-of-memory lines also in ``model.series(CudaOom)``, and where it ends in
``model.series(LogTail)``. Not a loader of its own (no ``LOADER``): the docker and kubernetes loaders call it.
"""

from __future__ import annotations

from forensics.analysis.events import CudaOom, LogSignal, LogTail
from forensics.analysis.model import Model
from forensics.analysis.source import Source
from forensics.parsing.logsignals.cuda import CudaOom as LogCudaOom
from forensics.parsing.logsignals.line import last_timestamp
from forensics.parsing.logsignals.scan import scan_log

__all__ = ["load_log_signals"]

_MAX_SIGNALS_PER_LOG = 2000  # a crash loop repeats itself; the first thousands say it


def load_log_signals(src: Source, model: Model, node: str, member: str, container_id: str | None,
                     pod_key: str | None) -> None:
    """Every signal of one log member (engine or kubelet ``timestamps=true`` text) and where it ends."""
    lines = src.text_lines(member, cache=False)
    if lines is None:
        return
    text = "\n".join(lines)
    for no, sig in scan_log(text, max_signals=_MAX_SIGNALS_PER_LOG):
        line = lines[no - 1] if 0 < no <= len(lines) else ""
        ev = src.ev_line(member, no, line)
        model.add(LogSignal(node, container_id, pod_key, sig, ev))
        if isinstance(sig, LogCudaOom) and container_id is not None:
            model.add(CudaOom(node, sig.t, container_id, line, ev))
    tail = last_timestamp(text)
    model.add(LogTail(node, container_id, pod_key, member, tail[1] if tail else None,
                                   src.ev_line(member, tail[0], lines[tail[0] - 1]) if tail else None))
