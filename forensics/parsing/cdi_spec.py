"""CDI (Container Device Interface) spec files: which GPUs a CDI device name stands for.

Pure: it reads the spec files' bytes as the ``cdi`` collector stored them (``cdi/<dir>/<file>``,
``.json`` or ``.yaml``), never the host. The format is the CDI specification's
(cncf-tags/container-device-interface, SPEC.md): ``kind`` (``vendor/class``), ``devices[]`` each
with a ``name`` and its own ``containerEdits``, and ``containerEdits`` for every device of the
spec. A qualified device name is ``<kind>=<name>`` (``nvidia.com/gpu=0``).

What a device grants is read from its own ``containerEdits.deviceNodes``: a node ``/dev/nvidia<N>``
(or, with no such path, a character node of major 195 and minor N < 254) is GPU minor N, the
device minor NVML reports (``nvmlDeviceGetMinorNumber``). The spec-wide edits are given with any
device of the spec: ``/dev/nvidiactl`` and ``NVIDIA_VISIBLE_DEVICES=void`` grant no GPU, but a
``/dev/nvidia<N>`` there (a spec that lists every GPU node once, for its ``all`` device) is every
device's GPU too. A MIG
device's nodes are its parent's ``/dev/nvidia<N>`` and ``/dev/nvidia-caps/nvidia-cap<M>``: its GPU
is the parent.

Precedence, as the CDI cache resolves it: a spec directory later in the list wins over an earlier
one (``/var/run/cdi`` over ``/etc/cdi``); two specs of one directory defining the same name
conflict, and a conflicting name resolves to nothing (the runtime refuses it too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from forensics.errors import ParseError

__all__ = [
    "NVIDIA_MAJOR",
    "CdiDevice",
    "CdiRegistry",
    "CdiSpecFile",
    "nvidia_cdi_token",
    "parse_spec",
    "qualified_name",
]

NVIDIA_MAJOR = 195
_CONTROL_MINORS = frozenset({254, 255})  # nvidia-modeset, nvidiactl: not GPUs
_GPU_NODE_RE = re.compile(r"^/dev/nvidia([0-9]+)$")
_KIND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_TYPE_INDEX_GPU = re.compile(r"^gpu([0-9]+)$")
_TYPE_INDEX_MIG = re.compile(r"^mig([0-9]+):([0-9]+)$")


@dataclass(frozen=True)
class CdiDevice:
    """One device of a spec: its qualified name, the GPU minors its own edits give, and where it is
    written (``member``, the RFC 6901 ``pointer`` of ``/devices/N`` and, in YAML, the 1-based
    ``line`` of the device's entry)."""

    qualified: str
    minors: tuple[int, ...]
    env: tuple[str, ...]
    member: str
    pointer: str
    line: int | None
    priority: int


@dataclass(frozen=True)
class CdiSpecFile:
    """A parsed spec file: its kind, its devices, and the spec-wide env (``NVIDIA_VISIBLE_DEVICES=void``)."""

    member: str
    kind: str
    devices: tuple[CdiDevice, ...]
    env: tuple[str, ...]
    priority: int


def qualified_name(kind: str, name: str) -> str:
    return f"{kind}={name}"


def _load(member: str, data: bytes) -> tuple[Any, Any]:
    """The document and, for YAML, its node tree (for line numbers); ParseError when neither."""
    text = data.decode("utf-8", "replace")
    if member.endswith(".json"):
        try:
            return json.loads(text), None
        except ValueError as exc:
            raise ParseError(f"{member}: not JSON: {exc}") from exc
    import yaml  # type: ignore[import-untyped]  # PyYAML, a declared dependency

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParseError(f"{member}: not YAML: {str(exc).splitlines()[0]}") from exc
    return doc, node


def _device_lines(node: Any) -> list[int | None]:
    """1-based line of each ``devices[]`` entry of a composed YAML document."""
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return []
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "devices" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ParseError(f"{what}: expected a list of strings")
    return tuple(value)


def _gpu_minors(edits: Any, what: str) -> tuple[int, ...]:
    if edits is None:
        return ()
    if not isinstance(edits, Mapping):
        raise ParseError(f"{what}: expected an object")
    nodes = edits.get("deviceNodes")
    if nodes is None:
        return ()
    if not isinstance(nodes, list):
        raise ParseError(f"{what}/deviceNodes: expected a list")
    minors: list[int] = []
    for i, node in enumerate(nodes):
        if not isinstance(node, Mapping) or not isinstance(node.get("path"), str):
            raise ParseError(f"{what}/deviceNodes/{i}: expected an object with a path")
        m = _GPU_NODE_RE.match(node["path"])
        if m:
            minor = int(m.group(1))
        elif node.get("major") == NVIDIA_MAJOR and isinstance(node.get("minor"), int) \
                and not isinstance(node.get("minor"), bool):
            minor = node["minor"]
        else:
            continue
        if minor not in _CONTROL_MINORS and minor not in minors:
            minors.append(minor)
    return tuple(minors)


def parse_spec(member: str, data: bytes, priority: int = 0) -> CdiSpecFile:
    """One spec file's bytes -> :class:`CdiSpecFile`; ParseError (only) when it is not a CDI spec."""
    doc, node = _load(member, data)
    if not isinstance(doc, Mapping):
        raise ParseError(f"{member}: a CDI spec is an object")
    kind = doc.get("kind")
    if not isinstance(kind, str) or not _KIND_RE.match(kind):
        raise ParseError(f"{member}: kind {kind!r} is not vendor/class")
    devices_any = doc.get("devices")
    if not isinstance(devices_any, list):
        raise ParseError(f"{member}: devices: expected a list")
    common = doc.get("containerEdits")
    if common is not None and not isinstance(common, Mapping):
        raise ParseError(f"{member}: containerEdits: expected an object")
    env = _strings((common or {}).get("env"), f"{member}: /containerEdits/env")
    # the spec-wide edits come with every device of the spec: GPU nodes there are each device's too
    common_minors = _gpu_minors(common, f"{member}: /containerEdits")
    lines = _device_lines(node) if node is not None else []
    devices: list[CdiDevice] = []
    for i, dev in enumerate(devices_any):
        where = f"{member}: /devices/{i}"
        if not isinstance(dev, Mapping) or not isinstance(dev.get("name"), str) or not dev["name"]:
            raise ParseError(f"{where}: expected an object with a name")
        edits = dev.get("containerEdits")
        dev_env = _strings(edits.get("env") if isinstance(edits, Mapping) else None, f"{where}/containerEdits/env")
        own = _gpu_minors(edits, f"{where}/containerEdits")
        devices.append(CdiDevice(qualified_name(kind, dev["name"]),
                                 (*own, *(m for m in common_minors if m not in own)),
                                 dev_env, member, f"/devices/{i}", lines[i] if i < len(lines) else None,
                                 priority))
    return CdiSpecFile(member, kind, tuple(devices), env, priority)


@dataclass
class CdiRegistry:
    """The devices of every spec file, resolved by qualified name with the CDI cache's precedence."""

    specs: list[CdiSpecFile] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_files(cls, files: Iterable[tuple[str, bytes, int]]) -> CdiRegistry:
        """``(member, bytes, priority)`` of each spec file; files that are not specs become problems."""
        reg = cls()
        for member, data, priority in files:
            try:
                reg.specs.append(parse_spec(member, data, priority))
            except ParseError as exc:
                reg.problems.append(str(exc))
        return reg

    def _candidates(self, qualified: str) -> list[CdiDevice]:
        return [d for s in self.specs for d in s.devices if d.qualified == qualified]

    def resolve(self, qualified: str) -> CdiDevice | None:
        """The device a runtime would inject for ``qualified``; None when no spec defines it or two
        specs of the highest-priority directory defining it conflict."""
        found = self._candidates(qualified)
        if not found:
            return None
        top = max(d.priority for d in found)
        best = [d for d in found if d.priority == top]
        return best[0] if len(best) == 1 else None

    def conflicts(self, qualified: str) -> Sequence[CdiDevice]:
        """The devices of one directory that define ``qualified`` twice (empty when it resolves)."""
        found = self._candidates(qualified)
        if not found:
            return ()
        top = max(d.priority for d in found)
        best = [d for d in found if d.priority == top]
        return best if len(best) > 1 else ()

    def kinds(self) -> set[str]:
        return {s.kind for s in self.specs}

    def device_at(self, member: str, pointer: str) -> CdiDevice | None:
        return next((d for s in self.specs if s.member == member for d in s.devices if d.pointer == pointer),
                    None)


def nvidia_cdi_token(name: str) -> str:
    """The GPU token of an NVIDIA CDI device name, as ``nvidia-ctk cdi generate`` names devices:
    ``0`` and ``GPU-<uuid>`` (index and uuid strategies) as they are, ``gpu0`` -> ``0`` and
    ``mig1:0`` -> ``1:0`` (the type-index strategy), ``all`` as it is."""
    m = _TYPE_INDEX_GPU.match(name)
    if m:
        return m.group(1)
    m = _TYPE_INDEX_MIG.match(name)
    if m:
        return f"{m.group(1)}:{m.group(2)}"
    return name
