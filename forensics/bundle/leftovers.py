"""Who owns a capture's temporary files, and removing those whose owner is gone.

A capture killed with SIGKILL (or by the OOM killer, or a node drain) cannot clean up after
itself: its staging directory (mode 0700, evidence not yet redacted away: sensitive), its
``.tgz.partial`` archive and its ``.reserved`` name reservation stay in the output directory.
Each of them therefore names its owner, and the next capture into that directory removes those
whose owner process no longer exists.

A capture a ``record --trigger`` started writes its stderr to ``.trigger-capture-<token>.<random>.log``
in the bundles directory, the token the recorder's (its owner: the recorder reads the log when the
capture ends, and removes it; the capture dies with it). A recorder SIGKILLed mid-capture leaves
the log; the next sweep (rotation of triggered bundles, the next capture into that directory)
removes it once that recorder is gone.

The owner is named by an :func:`owner_token`: ``<pid>-<start>-<boot>``, where ``start`` is the
process's start time in clock ticks after boot (``/proc/<pid>/stat`` field 22) and ``boot`` the
first 8 characters of ``/proc/sys/kernel/random/boot_id``. A PID alone is not enough (PIDs are
reused), and age is never used: a ``--duration 3600`` capture is old and alive. The token is in
the staging directory's and the partial archive's names, and is the reservation file's content.
Anything without a token we can read (another tool's file, a reservation being written right
now) is left alone.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Leftover", "STAGING_PREFIX", "TRIGGER_LOG_PREFIX", "owner_alive", "owner_token", "sweep_abandoned"]

STAGING_PREFIX = ".gpuforensics-staging-"
_TOKEN = r"(?P<pid>[1-9][0-9]{0,9})-(?P<start>[0-9]{1,20})-(?P<boot>[0-9a-f]{8})"
_STAGING_RE = re.compile(re.escape(STAGING_PREFIX) + _TOKEN + r"-")
_PARTIAL_RE = re.compile(r"^\.gpuforensics-.+\." + _TOKEN + r"\.[^.]+\.tgz\.partial$")
_RESERVED_RE = re.compile(r"^\.gpuforensics-.+\.tgz\.reserved$")
TRIGGER_LOG_PREFIX = ".trigger-capture-"
_TRIGGER_LOG_RE = re.compile("^" + re.escape(TRIGGER_LOG_PREFIX) + _TOKEN + r"\.[^.]+\.log$")
_TOKEN_RE = re.compile("^" + _TOKEN + "$")


def _boot8() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip().replace("-", "")[:8].lower() or "00000000"
    except OSError:
        return "00000000"


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()
    # after "pid (comm)": state is field 3, starttime field 22
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):  # a zombie has finished: it owns nothing
        return None
    return fields[19].decode("ascii")


def owner_token(pid: int | None = None) -> str:
    """``<pid>-<start ticks>-<boot id prefix>`` of this process (or ``pid``)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{_start_ticks(pid) or 0}-{_boot8()}"


def owner_alive(token: str) -> bool | None:
    """True while the process named by ``token`` runs; False once it is gone (or the host
    rebooted since); None when ``token`` is not a token (then nothing may be removed)."""
    m = _TOKEN_RE.match(token.strip())
    if m is None:
        return None
    if m["boot"] != _boot8():
        return False
    return _start_ticks(int(m["pid"])) == m["start"]


@dataclass(frozen=True)
class Leftover:
    """One removed file or directory and the capture process that had left it."""

    path: Path
    kind: str  # "staging directory", "partial archive", "name reservation", "trigger capture log"
    owner_pid: int


def _token_of(entry: os.DirEntry[str]) -> tuple[str, str] | None:
    name = entry.name
    if (m := _STAGING_RE.match(name)) and entry.is_dir(follow_symlinks=False):
        return "staging directory", f"{m['pid']}-{m['start']}-{m['boot']}"
    if (m := _PARTIAL_RE.match(name)) and entry.is_file(follow_symlinks=False):
        return "partial archive", f"{m['pid']}-{m['start']}-{m['boot']}"
    if (m := _TRIGGER_LOG_RE.match(name)) and entry.is_file(follow_symlinks=False):
        return "trigger capture log", f"{m['pid']}-{m['start']}-{m['boot']}"
    if _RESERVED_RE.match(name) and entry.is_file(follow_symlinks=False):
        try:
            with open(entry.path, encoding="ascii", errors="replace") as f:
                return "name reservation", f.read(100)
        except OSError:
            return None
    return None


def sweep_abandoned(out_dir: Path) -> list[Leftover]:
    """Remove the staging directories, partial archives, reservations and trigger capture logs in
    ``out_dir`` whose owner process is gone; return what was removed (what could not be removed is skipped)."""
    removed: list[Leftover] = []
    try:
        entries = list(os.scandir(out_dir))
    except OSError:
        return removed
    for entry in entries:
        found = _token_of(entry)
        if found is None:
            continue
        kind, token = found
        if owner_alive(token) is not False:
            continue
        path = Path(entry.path)
        try:
            if kind == "staging directory":
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:  # another capture swept it first
            continue
        except OSError:
            continue
        removed.append(Leftover(path=path, kind=kind, owner_pid=int(token.split("-", 1)[0])))
    return removed
