"""The collector API: what capture, the flight recorder and every collector share.

A bottom package (below the collectors, capture and the recorder; above the bundle store it writes
through), so the layers read as they run: capture and the recorder drive collectors through this
API, and collectors implement it, with no upward import.

* :mod:`.context`: :class:`~forensics.collect.context.CollectContext` (options, the evidence sink,
  the redactor, hints, the deadline), :class:`~forensics.collect.context.CaptureOptions`,
  :class:`~forensics.collect.context.Tick` and the :class:`~forensics.collect.context.Collector`
  protocol;
* :mod:`.lifeline`: the rules of a collector child (die with the parent, its own process group,
  a helper program tied to it), for capture's runner, the recorder's samplers and the collectors.

The sink itself is the bundle's staging directory (:mod:`forensics.bundle.sink`).
"""
