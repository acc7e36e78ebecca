"""Redaction of secrets in evidence, with keyed pseudonyms.

A secret is replaced by ``<redacted:HMAC8>``, where HMAC8 is the first 8 bytes (hex) of
HMAC-SHA256 under a per-capture random key that is never written anywhere. Equal secrets within
one capture get equal pseudonyms (so "these two containers share a token" stays visible), but the
values cannot be recovered, and pseudonyms from two captures cannot be compared.

What is redacted by default:

- command-line arguments that carry a secret: ``--password=x``, ``--token x``, ``-pSECRET`` is *not*
  guessed at (too many false positives), ``KEY=value`` arguments whose key looks secret;
- environment values, except names on an allow-list (``NVIDIA_*``, ``CUDA_*``, ``PATH``, ...): those
  are evidence (GPU grants, library paths) and carry no secrets; a name under an allowed prefix
  that says secret (``NVIDIA_API_KEY``, ``NCCL_IB_AUTH``) is redacted;
- free text (:meth:`Redactor.text`, :meth:`Redactor.text_bytes`: logs, kernel records, messages,
  each command-line argument): the credential shapes of gitleaks' rule set
  (:mod:`forensics.bundle.secrets.gitleaks`) and the keyword contexts
  (:mod:`forensics.bundle.secrets.contexts`: assignments whose name says secret in any syntax,
  Kubernetes env entries, ``Authorization`` of any scheme, URL and netrc credentials, PEM bodies,
  JWTs), every expression RE2 (linear time on any input); see docs/redaction.md;
- label, annotation and event-attribute values (:meth:`Redactor.label_value`) whose key names a
  secret (:func:`looks_secret_label_key`: the key's name, after any ``prefix/``, judged by its last
  words as every secret name is, :func:`forensics.bundle.secrets.names.secret_name`:
  ``db.password``, ``API_KEY``, ``vault.io/agent-token``, ``session-id``), whole, unless the value is
  a placeholder (``true``, ``enabled``, ``$TOKEN``); the values of other keys go through the
  free-text rules above (credential shapes), so a JWT under ``note`` is caught too. A key is never
  judged by a word inside it: ``tokenizer``, ``max_tokens``, ``cert-manager.io/issuer``,
  ``private-registry`` and ``monkey`` keep their values. Keys are always kept. A few well-known
  keys whose name says secret but that never hold one stay readable (:data:`LABEL_KEYS_NOT_SECRET`).

The manifest records how many values were redacted per category, never the values.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from forensics.bundle.secrets.contexts import context_spans
from forensics.bundle.secrets.cut import cut_edge_spans
from forensics.bundle.secrets.gitleaks import default_rules
from forensics.bundle.secrets.names import (
    looks_secret_value,
    name_words,
    secret_name,
    weak_secret_name,
)
from forensics.bundle.secrets.programs import argv_password_spans
from forensics.bundle.secrets.spans import merge_spans
from forensics.bundle.secrets.view import finder_view

__all__ = ["ENV_ALLOW_NAMES", "ENV_ALLOW_PREFIXES", "LABEL_KEYS_NOT_SECRET", "LABEL_SECRET_TAILS",
           "Redactor", "looks_secret_label_key", "looks_secret_name"]

ENV_ALLOW_PREFIXES = ("NVIDIA_", "CUDA_", "NCCL_", "LC_", "OMP_", "MKL_", "KUBERNETES_SERVICE_")
ENV_ALLOW_NAMES = frozenset(
    {
        "PATH", "HOME", "HOSTNAME", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "SHELL", "PWD",
        "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA",
        "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "WORLD_SIZE", "RANK", "LOCAL_RANK",
        "MASTER_PORT", "NODE_NAME", "POD_NAME", "POD_NAMESPACE", "container",
        # a distributed job's rank identity (torchrun, torch.distributed): which rank a process is
        "MASTER_ADDR", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE", "ROLE_RANK",
    }
)

_PSEUDONYM_RE = re.compile(r"^<redacted:[0-9a-f]{16}>$")
_PSEUDONYM_BYTES_RE = re.compile(rb"<redacted:[0-9a-f]{16}>")

#: Last words of a label, annotation or attribute key that name a secret beside those every secret
#: name has (:func:`~forensics.bundle.secrets.names.secret_name`): a session's id is its credential.
LABEL_SECRET_TAILS = frozenset({("session", "id"), ("sessionid",)})
#: Well-known keys whose name says secret and that never hold one, with the reason.
LABEL_KEYS_NOT_SECRET: dict[str, str] = {
    # OCI image-spec pre-defined annotation (also set as a Docker image label by buildx and
    # most Dockerfiles): "contact details of the people or organization responsible for the image"
    "org.opencontainers.image.authors": "OCI image spec: the image's authors' contact details",
}


def looks_secret_name(name: str) -> bool:
    """True for names such as ``DB_PASSWORD``, ``--api-token`` or ``aws_secret_access_key``; False
    for ``--tokenizer``, ``--max-tokens``, ``monkey`` (the name's last word decides:
    :func:`forensics.bundle.secrets.names.secret_name`)."""
    bare = name.lstrip("-").strip()
    return bool(bare) and secret_name(bare)


def looks_secret_label_key(key: str) -> bool:
    """True for label/annotation/attribute keys whose name (after any ``prefix/``) ends in a secret's
    name: ``token``, ``db.password``, ``API_KEY``, ``vault.hashicorp.com/agent-inject-token``,
    ``session-id``; False for a key that only holds such a word (``tokenizer``, ``max_tokens``,
    ``cert-manager.io/issuer``, ``private-registry``, ``key``), for ``io.kubernetes.pod.name`` and the
    well-known keys in :data:`LABEL_KEYS_NOT_SECRET`."""
    if key in LABEL_KEYS_NOT_SECRET:
        return False
    name = key.rpartition("/")[2]
    words = tuple(name_words(name))
    return secret_name(name) or words[-2:] in LABEL_SECRET_TAILS or words[-1:] in LABEL_SECRET_TAILS


def env_name_allowed(name: str) -> bool:
    """Whether a variable's value is kept verbatim: an allow-listed name, or an allow-listed prefix
    whose name does not say secret (``NVIDIA_VISIBLE_DEVICES`` is kept, ``NVIDIA_API_KEY`` not)."""
    return name in ENV_ALLOW_NAMES or (name.startswith(ENV_ALLOW_PREFIXES) and not looks_secret_name(name))


_CLEAN_TEXT_MAX_LEN = 512
#: texts remembered as clean: a long-running process (the recorder's samplers, redacting every new
#: process's and container's texts all day) starts over when this many are kept, so what is kept
#: is the texts that repeat now, not every text ever redacted
_CLEAN_TEXTS_MAX = 8192


def _utf8(s: str) -> tuple[bytes, str]:
    """The text as UTF-8 bytes, and the error handler that turns them back into the same text
    (``surrogateescape`` for text decoded that way, ``surrogatepass`` for other lone surrogates)."""
    try:
        return s.encode("utf-8", "surrogateescape"), "surrogateescape"
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass"), "surrogatepass"


class Redactor:
    """Replaces secrets with keyed pseudonyms and counts what it replaced.

    ``Redactor(enabled=False)`` passes everything through unchanged (``--no-redact``).
    """

    def __init__(self, enabled: bool = True, key: bytes | None = None) -> None:
        self.enabled = enabled
        self._key = key if key is not None else os.urandom(32)
        self.counts: Counter[str] = Counter()
        # short texts :meth:`text` left unchanged (nothing counted for them): labels repeat across
        # listings, statuses and runtime specs, and each costs four regular expressions
        self._clean_texts: set[str] = set()

    def prepare(self) -> None:
        """Compile the secret rules now (0.1 s, once a process) rather than at the first text
        redacted: capture calls it while its first collector child runs, so the manifest's
        redaction after the last child does not wait for it, and later children inherit the
        compiled rules instead of compiling their own."""
        if self.enabled:
            default_rules()

    # -- primitives -------------------------------------------------------------------------
    def pseudonym(self, value: str, category: str = "value") -> str:
        """The pseudonym of one secret value (counted under ``category``)."""
        if not self.enabled:
            return value
        if _PSEUDONYM_RE.match(value):
            return value
        self.counts[category] += 1
        digest = hmac.new(self._key, value.encode("utf-8", "surrogateescape"), hashlib.sha256)
        return f"<redacted:{digest.hexdigest()[:16]}>"

    # -- command lines ----------------------------------------------------------------------
    def argv(self, args: Iterable[str]) -> list[str]:
        """Redact secret-carrying arguments of a command line; other arguments are kept as they are."""
        out: list[str] = []
        take_next = False
        args = list(args)
        passwords = argv_password_spans(args) if self.enabled else {}
        for i, arg in enumerate(args):
            if not self.enabled:
                out.append(arg)
                continue
            if i in passwords:  # mysql -pX, docker login -p X: the program's own password option
                at = passwords[i]
                out.append(arg[:at] + self.pseudonym(arg[at:], "argv"))
                take_next = False
                continue
            if take_next:
                out.append(self.pseudonym(arg, "argv"))
                take_next = False
                continue
            if arg.startswith("-") and "=" in arg:
                name, _, value = arg.partition("=")
                if looks_secret_name(name) and value:
                    out.append(f"{name}={self.pseudonym(value, 'argv')}")
                    continue
            elif arg.startswith("-") and looks_secret_name(arg) and len(arg) > 2:
                out.append(arg)
                take_next = True
                continue
            elif "=" in arg and not arg.startswith("-"):
                name, _, value = arg.partition("=")
                if looks_secret_name(name) and value and " " not in name:
                    out.append(f"{name}={self.pseudonym(value, 'argv')}")
                    continue
            out.append(self.text(arg, category="argv"))
        return out

    # -- environments -----------------------------------------------------------------------
    def env_value(self, name: str, value: str) -> str:
        """Keep allow-listed names (NVIDIA_*, CUDA_*, PATH, ...) verbatim; redact every other value."""
        if not self.enabled or env_name_allowed(name) or value == "":
            return value
        return self.pseudonym(value, "env")

    def env_list(self, env: Iterable[str] | None) -> list[str] | None:
        """Redact a Docker-style ``["NAME=value", ...]`` list; ``None`` stays ``None``."""
        if env is None:
            return None
        out = []
        for item in env:
            if not isinstance(item, str):
                out.append(item)
                continue
            name, sep, value = item.partition("=")
            out.append(f"{name}{sep}{self.env_value(name, value)}" if sep else item)
        return out

    def env_map(self, env: Mapping[str, str]) -> dict[str, str]:
        return {k: self.env_value(k, v) for k, v in env.items()}

    # -- free text --------------------------------------------------------------------------
    def text(self, s: str, category: str = "text", *, cut_start: bool = False, cut_end: bool = False) -> str:
        """Redact URL credentials, bearer tokens and ``secret_name=value`` pairs in free text.

        ``cut_start``/``cut_end``: the text was cut there (a log kept to a byte limit), possibly
        inside a token; the part of a secret left at that edge is redacted too
        (:func:`forensics.bundle.secrets.cut.cut_edge_spans`)."""
        if not self.enabled or not s:
            return s
        cut = cut_start or cut_end
        if not cut and s in self._clean_texts:
            return s
        data, errors = _utf8(s)
        red = self._redact_bytes(data, category, errors, cut_start=cut_start, cut_end=cut_end)
        out = s if red is data else red.decode("utf-8", errors)
        if out == s and not cut and len(s) <= _CLEAN_TEXT_MAX_LEN:
            if len(self._clean_texts) >= _CLEAN_TEXTS_MAX:
                self._clean_texts.clear()
            self._clean_texts.add(s)
        return out

    def text_bytes(self, data: bytes, category: str = "text", *, cut_start: bool = False,
                   cut_end: bool = False) -> bytes:
        """:meth:`text` on bytes (a log or kernel buffer as read: UTF-8, any invalid byte kept as
        it is); the same bytes object back when nothing was redacted."""
        if not self.enabled or not data:
            return data
        return self._redact_bytes(bytes(data), category, "surrogateescape", cut_start=cut_start, cut_end=cut_end)

    def _redact_bytes(self, data: bytes, category: str, errors: str, *, cut_start: bool = False,
                      cut_end: bool = False) -> bytes:
        """Every secret the context finders and the gitleaks rules find, replaced by its pseudonym
        (spans found twice or overlapping joined; pseudonyms already there kept as they are)."""
        view = finder_view(data)  # a timestamped log's prefixes blanked: the same offsets
        spans = list(context_spans(view, env_name_allowed))
        spans.extend((f.start, f.end) for f in default_rules().findings(view))
        if cut_start or cut_end:
            spans.extend(cut_edge_spans(data, cut_start=cut_start, cut_end=cut_end))
        if not spans:
            return data
        kept = [(m.start(), m.end()) for m in _PSEUDONYM_BYTES_RE.finditer(data)] if b"<redacted:" in data else []
        out = bytearray()
        pos = 0
        for start, end in merge_spans(spans, kept):
            out += data[pos:start]
            out += self.pseudonym(data[start:end].decode("utf-8", errors), category).encode("utf-8", errors)
            pos = end
        if pos == 0:
            return data
        out += data[pos:]
        return bytes(out)

    # -- labels, annotations, event attributes ----------------------------------------------
    def label_value(self, key: str, value: Any, category: str = "labels") -> Any:
        """The value of a key that names a secret (:func:`looks_secret_label_key`) becomes a
        pseudonym, whole, unless it is a placeholder (``true``, ``enabled``, ``$TOKEN``) or, under a
        name of other meanings (``auth``, ``pass``), a number or a path; any other value goes through
        :meth:`text` (credential shapes, URL credentials, bearer tokens). Non-strings are kept."""
        if not self.enabled or not isinstance(value, str) or value == "":
            return value
        name = str(key)
        if looks_secret_label_key(name) and looks_secret_value(value) and not (
                weak_secret_name(name.rpartition("/")[2]) and (value.isdigit() or value.startswith(("/", "~")))):
            return self.pseudonym(value, category)
        return self.text(value, category)

    def label_map(self, labels: Any, category: str = "labels") -> Any:
        """Redact a ``{key: value}`` map (Docker ``Labels``, ``Actor.Attributes``, Kubernetes
        ``labels``/``annotations``) in place and return it; anything but a dict is returned as is."""
        if self.enabled and isinstance(labels, dict):
            for key, value in labels.items():
                labels[key] = self.label_value(key, value, category)
        return labels

    def json_env_lists(self, obj: Any, *paths: tuple[str, ...]) -> Any:
        """Redact the env lists found at the given key paths of a JSON object, in place; returns it."""
        for path in paths:
            node = obj
            for key in path[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
                if node is None:
                    break
            if isinstance(node, dict) and isinstance(node.get(path[-1]), list):
                node[path[-1]] = self.env_list(node[path[-1]])
        return obj

    def summary(self) -> dict[str, Any]:
        """What goes into the manifest: enabled flag and counts per category, never values."""
        return {"enabled": self.enabled, "counts": dict(sorted(self.counts.items())),
                "method": "HMAC-SHA256 with a per-capture key that is not stored; first 8 bytes shown"}
