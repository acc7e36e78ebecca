"""Where a new kernel sampler starts reading /dev/kmsg: the hint ``kmsg_last_seq`` the recorder
hands it (forensics.collectors.kernel ``sample``: after that sequence number; -1, :data:`FROM_START`,
every record; no hint, from the end).

Sequence numbers start again at each boot, so a number from the ring means something only in the
boot that wrote it. At its start the recorder asks :func:`resume_seq`, which reads the ring's
segments newest first (a segment's boot is its header's ``boot_id``; a sealed one's is in the index,
so a segment of another boot costs no read) and answers:

- the last sequence number of the newest kernel record (``kernel/kmsg-window.txt``) in a segment
  of this boot, found before any segment of another boot: resume after it (however many runs
  without kernel records came since: a crash loop of short runs, a quiet kernel);
- :data:`FROM_START` when a segment of another boot comes first (the node rebooted since the ring's
  last kernel record of this boot, if any: every record of this boot is new to the ring), or when
  :data:`RESUME_READ_BYTES` of segment text were read without finding either (the ring may already
  hold some of what is read again: the kernel loader keeps one copy of a record by its time and
  text, so a copy costs bytes, never a finding; a start at the end would lose what the kernel
  logged while no recorder ran);
- None when every segment is of this boot (or says no boot) and none holds a kernel record (a new
  ring, or one that never recorded ``kernel``): the sampler starts at the end of /dev/kmsg.

Once running, the recorder keeps the number of the last record its kernel child sent
(:func:`last_seq` of each ``kernel/kmsg-window.txt`` record) and hands it to every new kernel child,
so one restarted after a hang resumes where its predecessor's records stopped.
"""

from __future__ import annotations

from pathlib import Path

from forensics.errors import RingError
from forensics.ring import RingReader
from forensics.ring.segment import valid_prefix
from forensics.specs.kernel import KMSG_WINDOW

__all__ = ["FROM_START", "RESUME_READ_BYTES", "last_seq", "resume_seq"]

FROM_START = -1
RESUME_READ_BYTES = 64 << 20  # of segment text (inflated), newest first: about 16 full default segments
_NEEDLE = b'"member":"' + KMSG_WINDOW.encode() + b'"'  # as encode_record writes it: no parse without it


def last_seq(data: bytes) -> int | None:
    """The sequence number of the last record in ``data``, records as /dev/kmsg gives them
    (``prio,seq,ts,flags;msg`` lines, each maybe followed by continuation lines that begin with a
    space); None when no line is one. Read from the end: usually only the last line."""
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        line = data[start:end]
        end = start
        if line[:1] == b" ":
            continue
        head = line.split(b";", 1)[0].split(b",")
        if len(head) > 1 and head[1].isdigit():
            return int(head[1])
    return None


def resume_seq(ring: Path, boot: str | None, read_bytes: int = RESUME_READ_BYTES) -> int | None:
    """Where the kernel sampler of a recorder starting now, in boot ``boot`` (its ``boot_id``; None:
    unknown), resumes: a sequence number, :data:`FROM_START`, or None (at the end); see the module's
    docstring. Reads at most about ``read_bytes`` of segment text, one segment at a time."""
    try:
        reader = RingReader(ring)
        segments = reader.segments()
    except (RingError, OSError):  # no ring yet, or unreadable
        return None
    read = 0
    for seg in reversed(segments):
        if seg.sealed and _other_boot(seg.boot_id, boot):
            return FROM_START
        if read >= read_bytes:
            return FROM_START
        try:
            data = reader.read_text(seg)
        except OSError:
            continue
        read += len(data)
        header = valid_prefix(data[:data.find(b"\n") + 1]).lines
        if header and _other_boot(header[0][1].get("boot_id"), boot):
            return FROM_START
        if _NEEDLE not in data:
            continue
        for _, rec in reversed(valid_prefix(data).lines[1:]):
            if rec["member"] == KMSG_WINDOW:
                seq = last_seq(rec["data"].encode("utf-8", "surrogateescape"))
                if seq is not None:
                    return seq
    return None


def _other_boot(seen: object, boot: str | None) -> bool:
    """Whether a segment's ``boot_id`` says another boot (an unknown one on either side does not)."""
    return isinstance(seen, str) and bool(seen) and boot is not None and seen != boot
