"""Which names ``gpuforensics sanitize`` replaces: found where the evidence says what they are.

Like ``sos clean``'s parsers, the names are learnt first and replaced afterwards, everywhere: a host
name learnt from the manifest is replaced in a container's log line too. Sources, by category:

- ``hostname``: the manifest's ``host.hostname`` and ``host.node_name``, ``host/host.json``,
  Docker's ``info.json`` ``Name``, containers' ``Config.Hostname`` and ``Config.Domainname`` (not
  the container-id default), Kubernetes Node names and ``status.addresses`` of type Hostname or
  DNS, pods' ``spec.nodeName``, events' ``source.host``, an image's private registry host (whole); a
  dotted host name gives its domain to ``domain`` (``gpu-07.corp.example.com``: ``gpu-07`` and
  ``corp.example.com``), so does a known host name followed by a domain in any member's text;
  a domain of three labels or more gives its parents of two or more too (``example.com``);
- ``user``: ``USER``, ``LOGNAME``, ``SUDO_USER`` and ``HOME=/home/<user>`` in environments
  (``proc/<pid>/environ``, containers' ``Config.Env``), a container's ``Config.User``, any
  ``/home/<user>`` path in any member;
- ``namespace``, ``pod``, ``container``: Kubernetes objects (``metadata``, pod spec and status,
  events' ``involvedObject``), the kubelet's pod-resources list, the container labels
  ``io.kubernetes.pod.name``/``.namespace``/``io.kubernetes.container.name``, Docker container
  names (a ``k8s_...`` name by its parts), CRI metadata, the pod-log member paths
  ``kubernetes/logs/<namespace>/<pod>/<container>[.previous].log``;
- ``object``: the names of Kubernetes objects that embed a pod's or a node's name (DRA
  ResourceClaims ``train-0-gpu-x7k2p`` and ResourceSlices ``gpu-07-gpu.nvidia.com-x2m4k``, claim
  names in pods and pod-resources, a workload's ``generateName`` and ``ownerReferences``);
- ``image``: the repository of every image reference (containers, images' ``RepoTags`` and
  ``RepoDigests``, pod specs and statuses) whose registry is not a public one
  (:data:`PUBLIC_REGISTRIES`; a reference without a registry is Docker Hub's);
- addresses (IPv4, IPv6, MAC) by their shape, in every member (:mod:`forensics.bundle.sanitize_text`).

Kept as they are (:data:`KEPT`): names every cluster has (``default``, ``kube-system``, ``root``,
``localhost``, ...), names without a letter or shorter than 2 characters, JSON's literals, hex ids;
and a name that is also a field name of the evidence's JSON (a container called ``server``, a key
of ``kubernetes/requests.json``) where it stands as a JSON key: the field keeps its name, so every
reader still finds it (:attr:`Names.field_names`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from forensics.bundle.pseudonyms import CATEGORIES

__all__ = ["KEPT", "PUBLIC_REGISTRIES", "Names", "image_repository", "names_in_member"]

#: registries whose image names are public (kept); any other registry's are private (replaced)
PUBLIC_REGISTRIES = frozenset({
    "docker.io", "index.docker.io", "registry-1.docker.io", "nvcr.io", "ghcr.io", "quay.io",
    "registry.k8s.io", "k8s.gcr.io", "gcr.io", "mcr.microsoft.com", "public.ecr.aws",
    "registry.access.redhat.com", "registry.redhat.io", "docker.elastic.co",
})
#: names every node or cluster has, which identify nobody and which the evidence's meaning needs
KEPT: dict[str, frozenset[str]] = {
    "hostname": frozenset({"localhost", "localhost.localdomain", "localdomain", "ip6-localhost"}),
    "domain": frozenset({"localdomain", "local", "cluster.local", "svc.cluster.local", "internal",
                         "example", "example.com", "example.org", "example.net", "invalid", "lan", "home"}),
    "user": frozenset({"root", "nobody", "daemon", "bin", "sys", "adm", "sync", "games", "man", "lp",
                       "mail", "news", "uucp", "proxy", "www-data", "backup", "list", "irc", "gnats",
                       "systemd-network", "systemd-resolve", "messagebus", "syslog", "sshd", "ubuntu",
                       "nvidia", "docker", "containerd", "kubelet", "user"}),
    "namespace": frozenset({"default", "kube-system", "kube-public", "kube-node-lease"}),
    "pod": frozenset(),
    "container": frozenset({"POD"}),
    "object": frozenset(),
    "image": frozenset(),
}
_LITERALS = frozenset({"true", "false", "null", "none", "None", "NaN", "Infinity"})
_HEX_ID = re.compile(r"^(?:sha256:)?[0-9a-f]{12,}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_DNS = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_URL_HOST = re.compile(r"^[a-z]+://(?:[^@/]*@)?([A-Za-z0-9.-]+)")
_POD_LOG = re.compile(r"^kubernetes/logs/([^/]+)/([^/]+)/([^/]+?)(?:\.previous)?\.log$")
_USER_KEYS = ("USER", "LOGNAME", "SUDO_USER")
_FIELD = re.compile(r"^[A-Za-z_]{2,64}$")
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-")
#: endings of file names, not of domains (``gpu-07.log.gz`` names no domain ``log.gz``)
_FILE_SUFFIXES = frozenset({"log", "gz", "tgz", "tar", "txt", "json", "jsonl", "yaml", "yml", "py", "sh", "conf",
                            "csv", "pt", "bin", "so", "out", "err", "pid", "sock", "lock", "tmp", "bak", "zst",
                            "xz", "bz", "html", "pdf", "md", "service", "scope", "slice", "mount"})
_RING_SEGMENTS = "ring/segments/"
#: lists of Kubernetes objects whose names embed a pod's or a node's (DRA claims and slices)
_OBJECT_LISTS = ("kubernetes/resourceclaims", "kubernetes/resourceslices")
#: members whose JSON names nothing (samples of counters keyed by ids): not walked (their
#: addresses and /home paths are still found, and every name learnt elsewhere replaced in them)
_NO_NAMES = ("nvml/", "cgroup/", "net/", "prometheus/", "kernel/records", "kernel/window", "proc/window")


class Names:
    """The originals found, each with its category (the first in :data:`CATEGORIES` it was met in)."""

    def __init__(self) -> None:
        self.found: dict[str, set[str]] = {c: set() for c in CATEGORIES}
        self._host_re: re.Pattern[bytes] | None = None  # built by learn_domains from the host names found
        #: the JSON keys of the evidence made of letters and underscores (``server``, ``status``): a
        #: name that is one of them is a field name where it stands as a key, and is kept there
        self.field_names: set[str] = set()

    def add(self, category: str, value: Any) -> None:
        if not isinstance(value, str):
            return
        value = value.strip()
        if category in ("hostname", "domain"):
            self.add_dns(category, value)
            return
        if category == "image":
            repo = image_repository(value)
            if repo is not None:
                self.found["image"].add(repo)
                # the registry as one host name (its first label alone, often "registry", is no name)
                self.add_dns("hostname", repo.split("/", 1)[0].split(":", 1)[0], split=False)
            return
        if category == "user":
            value = value.split(":", 1)[0]
            if value.isdigit():
                return
        if self._usable(category, value):
            self.found[category].add(value)

    def add_dns(self, category: str, value: str, split: bool = True) -> None:
        value = value.rstrip(".")
        if _IPV4.match(value) or ":" in value or not _DNS.match(value):
            return
        if category == "hostname" and "." in value and split:
            short, domain = value.split(".", 1)
            self.add_dns("hostname", short)
            self.add_dns("domain", domain)
            return
        if self._usable(category, value) and value.lower() not in KEPT[category]:
            self.found[category].add(value)
            if category == "domain" and value.count(".") >= 2:
                self.add_dns("domain", value.split(".", 1)[1])  # its parents of two labels or more

    def learn_domains(self, data: bytes) -> None:
        """Domains that follow a known host name in free text (``gpu-08.dc1.corp.net``)."""
        if self._host_re is None:
            hosts = sorted((h.encode() for h in self.found["hostname"] if "." not in h), key=len, reverse=True)
            if not hosts:
                return
            # literal first (the engine skips to a host name at C speed), over the lower-cased text
            self._host_re = re.compile(b"(?:" + b"|".join(re.escape(h.lower()) for h in hosts)
                                       + rb")\.([a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63}){1,8})(?![a-z0-9-])")
        lowered = bytes(data).lower()
        for m in self._host_re.finditer(lowered):
            if m.start() and lowered[m.start() - 1] in _WORD_BYTES:
                continue
            domain = m.group(1).decode("ascii")
            last = domain.rsplit(".", 1)[-1]
            if last.isalpha() and 2 <= len(last) <= 24 and last not in _FILE_SUFFIXES:
                self.add_dns("domain", domain)  # not gpu-07.log.gz: a file named after the host

    @staticmethod
    def _usable(category: str, value: str) -> bool:
        return (len(value) >= 2 and len(value) <= 253 and bool(_NAME.match(value))
                and any(c.isalpha() for c in value) and value not in _LITERALS
                and not _HEX_ID.match(value.lower()) and value not in KEPT.get(category, ()))

    def by_original(self) -> dict[str, str]:
        """original -> category, the first category of :data:`CATEGORIES` each was found in."""
        out: dict[str, str] = {}
        for category in CATEGORIES:
            for original in sorted(self.found[category]):
                out.setdefault(original, category)
        return out


def image_repository(ref: str) -> str | None:
    """The repository part (registry and path, without tag or digest) of an image reference whose
    registry is private; None for a public one, an image id, or no reference at all."""
    ref = ref.strip()
    if not ref or _HEX_ID.match(ref) or ref.startswith("sha256:") or any(c.isspace() for c in ref):
        return None
    repo = ref.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    if "/" not in repo:
        return None  # Docker Hub's official images
    registry = repo.split("/", 1)[0]
    if not ("." in registry or ":" in registry or registry == "localhost"):
        return None  # Docker Hub
    if registry.split(":", 1)[0].lower() in PUBLIC_REGISTRIES:
        return None
    return repo


def _env_users(names: Names, entries: Iterator[str]) -> None:
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep:
            continue
        if key in _USER_KEYS:
            names.add("user", value)
        elif key == "HOME" and value.startswith("/home/"):
            names.add("user", value[len("/home/"):].split("/", 1)[0])


def _labels(names: Names, labels: Any) -> None:
    if not isinstance(labels, dict):
        return
    names.add("pod", labels.get("io.kubernetes.pod.name"))
    names.add("namespace", labels.get("io.kubernetes.pod.namespace"))
    names.add("container", labels.get("io.kubernetes.container.name"))


def _walk(names: Names, node: Any, depth: int = 0) -> None:
    """Kubernetes and CRI objects, pod-resources entries, labels and env lists, wherever they are."""
    if depth > 64:
        return
    if isinstance(node, list):
        for item in node:
            _walk(names, item, depth + 1)
        return
    if not isinstance(node, dict):
        return
    names.field_names.update(k for k in node if isinstance(k, str) and _FIELD.match(k))
    meta = node.get("metadata")
    kind = node.get("kind")
    if isinstance(meta, dict):
        names.add("namespace", meta.get("namespace"))
        if kind in ("ResourceClaim", "ResourceSlice"):
            names.add("object", meta.get("name"))
        generate = meta.get("generateName")
        if isinstance(generate, str):
            names.add("object", generate.rstrip("-"))  # a workload's name (trainer- of trainer-0)
        for owner in meta.get("ownerReferences") or [] if isinstance(meta.get("ownerReferences"), list) else []:
            if isinstance(owner, dict):
                names.add("object", owner.get("name"))
        if kind == "Node":
            names.add("hostname", meta.get("name"))
        elif kind == "Pod" or isinstance(node.get("spec"), dict) and "containers" in node["spec"] \
                or "namespace" in meta and "uid" in meta and "attempt" in meta:
            names.add("pod", meta.get("name"))  # a Pod, or a CRI pod sandbox
        elif "attempt" in meta:
            names.add("container", meta.get("name"))  # a CRI container
        _labels(names, meta.get("labels"))
    spec = node.get("spec")
    if isinstance(spec, dict):
        names.add("hostname", spec.get("nodeName"))
        for key in ("containers", "initContainers", "ephemeralContainers"):
            for c in spec.get(key) or [] if isinstance(spec.get(key), list) else []:
                if isinstance(c, dict):
                    names.add("container", c.get("name"))
                    names.add("image", c.get("image"))
    status = node.get("status")
    if isinstance(status, dict):
        for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
            for c in status.get(key) or [] if isinstance(status.get(key), list) else []:
                if isinstance(c, dict):
                    names.add("container", c.get("name"))
                    names.add("image", c.get("image"))
        for a in status.get("addresses") or [] if isinstance(status.get("addresses"), list) else []:
            if isinstance(a, dict) and a.get("type") in ("Hostname", "InternalDNS", "ExternalDNS"):
                names.add("hostname", a.get("address"))
    involved = node.get("involvedObject") or node.get("regarding")
    if isinstance(involved, dict):
        names.add("namespace", involved.get("namespace"))
        category = {"Pod": "pod", "Node": "hostname"}.get(str(involved.get("kind")))
        if category is not None:
            names.add(category, involved.get("name"))
    source = node.get("source")
    if isinstance(source, dict):
        names.add("hostname", source.get("host"))
    if isinstance(node.get("pod_resources"), list):
        for pr in node["pod_resources"]:
            if isinstance(pr, dict):
                names.add("pod", pr.get("name"))
                names.add("namespace", pr.get("namespace"))
                for c in pr.get("containers") or []:
                    if isinstance(c, dict):
                        names.add("container", c.get("name"))
    for key in ("Labels", "labels"):
        _labels(names, node.get(key))
    for key in ("Env", "env"):
        env = node.get(key)
        if isinstance(env, list):
            _env_users(names, (e for e in env if isinstance(e, str)))
    for key in ("image", "Image"):
        if isinstance(node.get(key), str):
            names.add("image", node[key])
    for key in ("resourceClaimName", "claim_name", "resourceClaimTemplateName"):
        names.add("object", node.get(key))
    for key in ("RepoTags", "RepoDigests"):
        for ref in node.get(key) or [] if isinstance(node.get(key), list) else []:
            names.add("image", ref)
    for value in node.values():
        if isinstance(value, dict | list):
            _walk(names, value, depth + 1)


def _docker_container(names: Names, inspect: Any) -> None:
    if not isinstance(inspect, dict):
        return
    name = inspect.get("Name")
    if isinstance(name, str) and not name.lstrip("/").startswith("k8s_"):
        names.add("container", name.lstrip("/"))
    config = inspect.get("Config")
    if isinstance(config, dict):
        hostname = config.get("Hostname")
        if isinstance(hostname, str) and not (isinstance(inspect.get("Id"), str) and inspect["Id"].startswith(hostname)):
            names.add("hostname", hostname)
        names.add("domain", config.get("Domainname"))
        names.add("user", config.get("User"))


def _ring_segment(names: Names, data: bytes) -> None:
    """A flight-recorder segment's records: each whole member's text (``write``, ``append``) read
    as that member (a container the ring saw and the capture did not, its inspect, its events)."""
    for line in data.splitlines():
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict) and rec.get("op") in ("write", "append") and isinstance(rec.get("member"), str) \
                and isinstance(rec.get("data"), str) and not rec["member"].startswith(_RING_SEGMENTS):
            names_in_member(names, rec["member"], rec["data"].encode("utf-8", "surrogateescape"))


def names_in_member(names: Names, member: str, data: bytes) -> None:
    """Add what ``member`` (its path and bytes) says of names to ``names``."""
    m = _POD_LOG.match(member)
    if m:
        names.add("namespace", m.group(1))
        names.add("pod", m.group(2))
        names.add("container", m.group(3))
    if member.endswith("/environ"):
        _env_users(names, (e.decode("utf-8", "replace") for e in data.split(b"\0")))
        return
    if member.startswith(_RING_SEGMENTS):
        _ring_segment(names, data)
        return
    if not member.endswith((".json", ".jsonl")) or member.startswith(_NO_NAMES):
        return
    if member.startswith(_OBJECT_LISTS) and member.endswith(".json"):  # items without a kind
        try:
            listed = json.loads(data)
        except (ValueError, RecursionError):
            listed = None
        for item in listed.get("items") or [] if isinstance(listed, dict) else []:
            if isinstance(item, dict) and isinstance(item.get("metadata"), dict):
                names.add("object", item["metadata"].get("name"))
    docs: list[Any] = []
    try:
        if member.endswith(".jsonl"):
            docs = [json.loads(line) for line in data.splitlines() if line.strip()]
        else:
            docs = [json.loads(data)]
    except (ValueError, RecursionError):
        return  # a member that is not JSON gives no names by structure (its addresses are still found)
    for doc in docs:
        if member in ("manifest.json", "host/host.json") and isinstance(doc, dict):
            host = doc.get("host") if member == "manifest.json" else doc
            if isinstance(host, dict):
                names.add("hostname", host.get("hostname"))
                names.add("hostname", host.get("node_name"))
        if member.endswith("docker/info.json") and isinstance(doc, dict):
            names.add("hostname", doc.get("Name"))
            for key in ("HttpProxy", "HttpsProxy"):  # the engine's proxies: the site's hosts
                proxy = _URL_HOST.match(doc.get(key) or "") if isinstance(doc.get(key), str) else None
                if proxy:
                    names.add_dns("hostname", proxy.group(1), split=False)
        if member.startswith("kubernetes/requests") and isinstance(doc, dict) and isinstance(doc.get("server"), str):
            host = _URL_HOST.match(doc["server"])  # the API server the capture asked (a cluster's name)
            if host:
                names.add_dns("hostname", host.group(1), split=False)
        if "/containers/" in member and member.rsplit("/", 1)[-1].startswith("inspect"):
            _docker_container(names, doc)
        if member.endswith("docker/containers.json") and isinstance(doc, list):
            for c in doc:
                if isinstance(c, dict):
                    for n in c.get("Names") or []:
                        if isinstance(n, str) and not n.lstrip("/").startswith("k8s_"):
                            names.add("container", n.lstrip("/"))
        if "events" in member and isinstance(doc, dict) and isinstance(doc.get("Actor"), dict):
            attrs = doc["Actor"].get("Attributes")
            if isinstance(attrs, dict) and doc.get("Type") == "container":
                name = attrs.get("name")
                if isinstance(name, str) and not name.startswith("k8s_"):
                    names.add("container", name)
        _walk(names, doc)
