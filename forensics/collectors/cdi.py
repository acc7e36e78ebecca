"""``cdi``: the CDI spec files of the node's spec directories, verbatim (members ``cdi/*``).

For each directory (``cdi.static_dir``, default ``/etc/cdi``, then ``cdi.dynamic_dir``, default
``/var/run/cdi``: a later one takes precedence, as in the CDI cache) the regular files named
``*.json`` or ``*.yaml`` are read (at most ``cdi.max_files`` per directory, each at most
``cdi.max_bytes``: a larger file is listed with its size, not kept) and written to
``cdi/<directory>/<file>`` as read, but for their environment entries: every ``NAME=value`` of a
``containerEdits.env`` or a hook's ``env`` whose name is not allow-listed (``NVIDIA_*``, ``PATH``,
...) has its value replaced by a pseudonym in place, as container environments are, and the
whole text then goes through the free-text redaction. A file whose env entries cannot be found
in its text to be replaced (an escaped scalar) is not kept: listed with why. Links are not
followed out of the directory (a spec is the directory's own file). ``cdi/index.json`` records
every directory (exists, error), every file (member, size, mtime, kept or why not) and the
directories' precedence. Read-only; a directory that does not exist is a fact (no CDI here),
not an error.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from forensics.bundle.format import iso_from_unix
from forensics.collect.context import CollectContext
from forensics.hostfs.files import describe_os_error, read_small
from forensics.specs.cdi import INDEX, SPEC, SUFFIXES, spec_member

__all__ = ["COLLECTOR", "CdiCollector", "redact_spec_text"]


def _env_entries(doc: Any) -> list[str]:
    """Every env entry of a spec document: spec-wide and per-device edits, and their hooks."""
    edits: list[Any] = []
    if isinstance(doc, dict):
        edits.append(doc.get("containerEdits"))
        for dev in doc.get("devices") or []:
            if isinstance(dev, dict):
                edits.append(dev.get("containerEdits"))
    out: list[str] = []
    for e in edits:
        if not isinstance(e, dict):
            continue
        out.extend(v for v in e.get("env") or [] if isinstance(v, str))
        for hook in e.get("hooks") or []:
            if isinstance(hook, dict):
                out.extend(v for v in hook.get("env") or [] if isinstance(v, str))
    return out


def redact_spec_text(name: str, text: str, ctx: CollectContext) -> str | None:
    """The spec's text with its env values redacted in place; None when an entry to redact is not
    in the text as written (it cannot be replaced without rewriting the file)."""
    import json

    import yaml  # type: ignore[import-untyped]

    try:
        doc = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        doc = None  # not a spec: kept as text, free-text redaction only
    for entry in _env_entries(doc):
        redacted = (ctx.redactor.env_list([entry]) or [entry])[0]
        if redacted == entry:
            continue
        if entry not in text:
            return None
        text = text.replace(entry, redacted)
    return ctx.redactor.text(text, "cdi")


class CdiCollector:
    """``cdi``: CDI spec files, verbatim but for redacted env values."""

    name = SPEC.name
    order = SPEC.order
    timeout_s = 10.0

    def snapshot(self, ctx: CollectContext) -> None:
        settings = SPEC.read_settings(ctx.options.extra)
        dirs = [settings.static_dir, settings.dynamic_dir]
        index: dict[str, Any] = {"precedence": "a later directory wins; two files of one directory "
                                               "defining one device name conflict", "directories": []}
        kept = 0
        for priority, directory in enumerate(dirs):
            entry = self._directory(ctx, directory, priority, settings.max_files, settings.max_bytes)
            index["directories"].append(entry)
            kept += sum(1 for f in entry["files"] if f.get("member"))
        ctx.sink.write_json(INDEX, index)
        present = [d["path"] for d in index["directories"] if d["exists"]]
        if not present:
            ctx.note(f"no CDI spec directory at {', '.join(dirs)}: CDI is not set up where the capture looks "
                     "(a capture pod sees the host's directories only where they are mounted: --set cdi.*)")
        else:
            ctx.note(f"{kept} CDI spec files kept from {', '.join(present)}")

    def _directory(self, ctx: CollectContext, directory: str, priority: int, max_files: int,
                   max_bytes: int) -> dict[str, Any]:
        entry: dict[str, Any] = {"path": directory, "priority": priority, "exists": False, "error": None,
                                 "files": []}
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return entry
        except OSError as exc:
            entry.update(exists=True, error=describe_os_error(exc))
            ctx.partial(f"CDI spec directory {directory}: {entry['error']}")
            return entry
        entry["exists"] = True
        taken = 0
        for name in names:
            path = os.path.join(directory, name)
            record: dict[str, Any] = {"name": name}
            entry["files"].append(record)
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError as exc:
                record["error"] = describe_os_error(exc)
                continue
            record.update(size=st.st_size, mtime=iso_from_unix(st.st_mtime))
            if not name.endswith(SUFFIXES):
                record["skipped"] = "not .json or .yaml: the CDI cache does not read it"
            elif not stat.S_ISREG(st.st_mode):
                record["skipped"] = "not a regular file (a link is not followed)"
            elif st.st_size > max_bytes:
                record["skipped"] = f"larger than cdi.max_bytes ({max_bytes})"
            elif taken >= max_files:
                record["skipped"] = f"over cdi.max_files ({max_files})"
            if "skipped" in record:
                continue
            try:
                data = read_small(path, max_bytes + 1)
            except OSError as exc:
                record["error"] = describe_os_error(exc)
                continue
            if len(data) > max_bytes:
                record["skipped"] = f"grew past cdi.max_bytes ({max_bytes}) while read"
                continue
            text = redact_spec_text(name, data.decode("utf-8", "replace"), ctx)
            if text is None:
                record["skipped"] = "an env entry to redact is escaped in the file: not kept"
                continue
            member = spec_member(directory, name)
            ctx.sink.write_bytes(member, text.encode("utf-8") if text != data.decode("utf-8", "replace") else data)
            record["member"] = member
            taken += 1
        return entry


COLLECTOR = CdiCollector()
