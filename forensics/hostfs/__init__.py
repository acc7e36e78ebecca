"""The host's file system as the collectors read it: ``/proc`` and cgroup files, the cgroup
mounts and directories, and the ``cgroups.root`` resolver. Not a collector.

Why a package of its own, below the collectors: the procfs, cgroups, docker, podresources and
cri collectors all read ``/proc/<pid>/cgroup``, ``cgroup.procs`` and the mount table, and must
agree on how (one bounded reader, one description of a file that could not be read, one answer to
"which directory holds this cgroup", the same ``--set cgroups.root`` for all), yet no collector
may import another. It is a layer of its own under ``collectors`` (above the collector API of
:mod:`forensics.collect`, since the resolver takes the collector's context for its settings), so
any collector may use it and it imports no collector.

* :mod:`.files`: ``read_small``/``read_text`` and ``describe_os_error``;
* :mod:`.proc`: one streaming scan of ``/proc/*/cgroup`` with attribution;
* :mod:`.mounts`: the cgroup mounts (``/proc/self/mountinfo`` or the ``cgroups.root`` tree) and
  a cgroup path's directory in one of them;
* :mod:`.cgroupns`: the ``cgroups.root`` option and namespace-relative path resolution;
* :mod:`.netns`: each network namespace's ``net/dev`` per tick, kept open while its process lives;
* :mod:`.probes`: kept descriptors re-read each tick, all at once, and compared with the bytes they
  gave last (the cgroups collector's quiet check).
"""
