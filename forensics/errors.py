"""The one exception tree of gpuforensics.

Everything the library raises on purpose is a :class:`ForensicsError`; the CLI turns it into a
one-line message and an exit code. Anything else escaping to the CLI is a bug.

::

    ForensicsError
     ├── UsageError                  bad option values                              exit 2
     ├── BundleError                 a bundle that cannot be read                   exit 2
     │    ├── BundleInvalid          not a tarball, bad manifest, unknown version, malformed member
     │    ├── BundleUnsafe           a member that escapes, a link or a device node
     │    ├── BundleTooLarge         total size or member count over the cap
     │    └── BundleIntegrityError   hash mismatch, missing or extra member          exit 1 (verify)
     ├── CollectorError              raised inside collectors, recorded in the manifest
     │    ├── SourceUnavailable      no daemon, no library, no socket       status "unavailable"
     │    ├── SourcePermissionDenied not allowed to read the source         status "unavailable"
     │    └── SourceTimeout          the source did not answer in time      status "failed"/"partial"
     ├── ParseError                  the only error a parser raises on bad input
     ├── CaptureError                the bundle could not be made (no such output directory, ...)
     ├── OutputNotWritten            the storage refused a write: disk full (ENOSPC), quota (EDQUOT),
     │    │                          I/O error (EIO), read-only file system (EROFS), file too large
     │    │                          (EFBIG)                                             exit 4
     │    ├── BundleNotWritten       a bundle (capture); also a CaptureError
     │    └── ReportNotWritten       a report or ``analyze`` output; also a ReportError
     ├── ClusterError                cluster capture cannot ask the cluster at all (no kubeconfig,
     │                               API unreachable, nodes or pods not listable)    exit 2
     ├── RingError                   the recorder's ring cannot be opened, locked or read  exit 2
     ├── RecorderProtocolError       a message between a sampler child and the recorder that does not
     │                               decode: dropped and recorded as an event, never fatal
     └── ReportError
"""

from __future__ import annotations

import errno
import re

__all__ = [
    "BundleError",
    "BundleIntegrityError",
    "BundleInvalid",
    "BundleNotWritten",
    "BundleTooLarge",
    "BundleUnsafe",
    "CaptureError",
    "ClusterError",
    "CollectorError",
    "ForensicsError",
    "OutputNotWritten",
    "ParseError",
    "RecorderProtocolError",
    "ReportError",
    "ReportNotWritten",
    "RingError",
    "STORAGE_ERRNOS",
    "SourcePermissionDenied",
    "SourceTimeout",
    "SourceUnavailable",
    "UsageError",
    "sentence",
    "storage_refused",
    "write_failure",
]

#: errno values that mean the storage refused a write (not a wrong argument): exit 4.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG})


class ForensicsError(Exception):
    """Base of every error gpuforensics raises on purpose."""

    exit_code = 2


class UsageError(ForensicsError):
    """An option or argument value that cannot be used."""


class BundleError(ForensicsError):
    """A bundle that cannot be read or trusted."""


class BundleInvalid(BundleError):
    """Not a gpuforensics bundle, or a malformed one."""


class BundleUnsafe(BundleError):
    """A member that would escape the bundle, or a link or device member."""


class BundleTooLarge(BundleError):
    """The bundle exceeds the configured size or member-count caps."""


class BundleIntegrityError(BundleError):
    """Members that do not match the manifest (hash, size, missing or extra)."""

    exit_code = 1

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [])


class CollectorError(ForensicsError):
    """A source could not be collected (recorded in the manifest, never fatal)."""


class SourceUnavailable(CollectorError):
    """The source does not exist here: no daemon, no driver, no socket, no configuration."""


class SourcePermissionDenied(CollectorError):
    """The source exists but this user may not read it."""


class SourceTimeout(CollectorError):
    """The source did not answer before its deadline."""


class ParseError(ForensicsError):
    """Input a parser cannot understand. Parsers raise this and nothing else."""


class CaptureError(ForensicsError):
    """The bundle itself could not be written (output directory, disk full, ...)."""


class OutputNotWritten(ForensicsError):
    """The storage refused to take the output: full disk, quota, I/O error, read-only."""

    exit_code = 4


class RingError(ForensicsError):
    """The flight recorder's ring cannot be opened, locked or read (``record``, ``ring``)."""


class RecorderProtocolError(ForensicsError):
    """A frame or command between a sampler child and the recorder that does not decode
    (forensics.record.protocol): the recorder drops it and records why; it never stops the loop."""


class BundleNotWritten(OutputNotWritten, CaptureError):
    """The bundle could not be written: the storage refused it."""


class ClusterError(ForensicsError):
    """``cluster capture`` could not start: no configuration, the API unreachable, a listing
    refused. A node that fails is not an error but a row of the summary."""


class ReportError(ForensicsError):
    """A report could not be rendered or written."""


class ReportNotWritten(OutputNotWritten, ReportError):
    """A report (or ``analyze`` output) could not be written: the storage refused it."""


def storage_refused(exc: BaseException) -> bool:
    """True for an ``OSError`` whose errno is in :data:`STORAGE_ERRNOS`."""
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def write_failure(what: str, exc: OSError, refused: type[OutputNotWritten],
                  otherwise: type[ForensicsError]) -> ForensicsError:
    """``what: <strerror>`` as ``refused`` (exit 4) when the storage refused the write, else as
    ``otherwise``: one seam for every writer of bundles and reports."""
    cls = refused if storage_refused(exc) else otherwise
    return cls(f"{what}: {exc.strerror or exc}")


# An exception's repr inside a message: FileNotFoundError(2, 'No such file or directory'),
# NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f...>: Failed to ...').
_EXC_REPR = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Timeout|Refused)\((?:-?\d+, )?(['\"])(.*?)\1(?:, [^()]*)?\)")
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>:?\s*")
# A tuple of texts, as requests wraps a urllib3 error: ('Connection aborted.', <cause>)
_TUPLE = re.compile(r"\((['\"])([^'\"()]*?)\.?\1, ([^()]*)\)")
_ERRNO = re.compile(r"\[Errno -?\d+\]\s*")


def sentence(text: str) -> str:
    """A library's error text as a sentence for the manifest and the terminal: its first line,
    without Python exception reprs, tuple wrappers, object addresses or ``[Errno N]`` tags.
    ``"Error while fetching server API version: ('Connection aborted.', FileNotFoundError(2,
    'No such file or directory'))"`` becomes ``"Error while fetching server API version:
    connection aborted: no such file or directory"``."""
    lines = text.strip().splitlines()
    out = lines[0].strip() if lines else ""
    for _ in range(4):  # nested reprs unwrap from the inside out
        new = _EXC_REPR.sub(lambda m: m.group(2), _OBJECT_REPR.sub("", out))
        new = _TUPLE.sub(lambda m: f"{m.group(2)[:1].lower()}{m.group(2)[1:]}: {_lower_first(m.group(3))}", new)
        if new == out:
            break
        out = new
    out = _ERRNO.sub("", out)
    return " ".join(out.split())


def _lower_first(text: str) -> str:
    """``No such file`` -> ``no such file`` (an acronym such as ``HTTP`` is kept)."""
    return text[:1].lower() + text[1:] if text[:2].istitle() else text
