"""Credential shapes from the rule set of gitleaks, used as data, matched the way gitleaks matches.

The rules are ``data/gitleaks.toml``, gitleaks' own default configuration as released (MIT licence,
``data/LICENSE-gitleaks``; version and commit in :data:`GITLEAKS_VERSION`). Each rule has a regular
expression in RE2 syntax (gitleaks is written in Go, whose regexp package is RE2), keywords, an
optional secret group, an optional entropy floor and allowlists; gitleaks applies them as follows,
and so does this module (``detect/detect.go``, ``config/allowlist.go`` of the same release):

- a rule runs only where the lower-cased text contains one of its keywords (here: one pass of an
  RE2 set over all keywords, then each triggered rule's regular expression);
- the secret is the rule's ``secretGroup``, else the first non-empty group, else the whole match;
- a secret whose Shannon entropy is not above the rule's ``entropy`` is skipped;
- an allowlist (the global one, then the rule's) skips a finding when its regular expressions match
  the secret, the match or the line (``regexTarget``), or the secret contains one of its stopwords;
  a condition ``AND`` needs every check, and a check on paths, which a log line does not have,
  never passes (a line is read at most :data:`LINE_CONTEXT` bytes either side of the match).

Every expression is compiled by RE2 (``google-re2``), whose matching time is linear in the text
whatever the pattern: no input makes redaction superlinear. Texts are matched as UTF-8 bytes;
offsets are byte offsets.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import re2

__all__ = ["EXCLUDED_RULES", "GITLEAKS_COMMIT", "GITLEAKS_VERSION", "Finding", "GitleaksRules",
           "shannon_entropy"]

GITLEAKS_VERSION = "v8.30.0"
GITLEAKS_COMMIT = "6eaad039603a4de39fddd1cf5f727391efe9974e"

#: rules not used, with the reason
EXCLUDED_RULES: dict[str, str] = {
    # a rule on file names only (no regex): a log line has no path
    "pkcs12-file": "matches file paths, not text",
    # its keywords (key, token, auth, api, access, ...) are in most log lines and its value class
    # takes any 10+ word characters after them: hashes, run ids and paths under keys such as
    # 'checkpoint_key' or 'access_log' were redacted. The keyword contexts (contexts.py) catch
    # the same assignments by the shape of the name, with no entropy guess.
    "generic-api-key": "replaced by the keyword contexts (contexts.py): too many false redactions on logs",
}


def _options() -> re2.Options:
    """RE2's defaults: 8 MiB of memory per expression at most (its DFA's cache within it; past it
    RE2 falls back to its NFA, slower, still linear): 220 expressions stay within bounded memory."""
    return re2.Options()


def _compile(pattern: str) -> Any:
    return re2.compile(pattern.encode(), options=_options())


def shannon_entropy(data: bytes) -> float:
    """Shannon entropy of a secret in bits per character (gitleaks' shannonEntropy, on code points)."""
    text = data.decode("utf-8", "surrogateescape")
    if not text:
        return 0.0
    inv = 1.0 / len(text)
    return -sum(n * inv * math.log2(n * inv) for n in Counter(text).values())


@dataclass(frozen=True)
class _Allowlist:
    target: str  # "secret" | "match" | "line"
    regex: Any | None
    stopwords: tuple[bytes, ...]
    and_condition: bool
    has_paths: bool

    def allows(self, secret: bytes, match: bytes, line: Callable[[], bytes]) -> bool:
        """Whether this allowlist lets the finding go (``line`` gives the line around it, asked
        for only by an allowlist that targets it)."""
        if self.regex is None:
            regex_ok = False
        else:
            target = match if self.target == "match" else line() if self.target == "line" else secret
            regex_ok = self.regex.search(target) is not None
        lowered = secret.lower()
        stop_ok = any(w in lowered for w in self.stopwords)
        if self.and_condition:
            checks = ([False] if self.has_paths else []) + ([regex_ok] if self.regex is not None else []) \
                + ([stop_ok] if self.stopwords else [])
            return bool(checks) and all(checks)
        return regex_ok or stop_ok


def _allowlist(doc: dict[str, Any]) -> _Allowlist:
    regexes = doc.get("regexes") or []
    return _Allowlist(
        target=str(doc.get("regexTarget") or "secret"),
        regex=_compile("|".join(f"(?:{r})" for r in regexes)) if regexes else None,
        stopwords=tuple(sorted({str(w).lower().encode() for w in doc.get("stopwords") or []})),
        and_condition=str(doc.get("condition", "OR")).upper() == "AND",
        has_paths=bool(doc.get("paths")),
    )


@dataclass(frozen=True)
class _Rule:
    id: str
    regex: Any
    secret_group: int
    entropy: float
    allowlists: tuple[_Allowlist, ...]


@dataclass(frozen=True)
class Finding:
    """One secret found: the rule that found it and the secret's byte span in the text."""
    rule: str
    start: int
    end: int


class GitleaksRules:
    """The compiled rule set. :meth:`findings` yields each secret of a text (UTF-8 bytes)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.rules: list[_Rule] = []
        self._keywords: list[bytes] = []
        self._keyword_rules: list[list[int]] = []
        index: dict[bytes, int] = {}
        for doc in config.get("rules", []):
            if doc["id"] in EXCLUDED_RULES or "regex" not in doc:
                continue
            rule_no = len(self.rules)
            self.rules.append(_Rule(
                id=doc["id"], regex=_compile(doc["regex"]), secret_group=int(doc.get("secretGroup", 0)),
                entropy=float(doc.get("entropy", 0.0)),
                allowlists=tuple(_allowlist(a) for a in doc.get("allowlists") or [])))
            for word in {str(k).lower().encode() for k in doc.get("keywords") or []}:
                if word not in index:
                    index[word] = len(self._keywords)
                    self._keywords.append(word)
                    self._keyword_rules.append([])
                self._keyword_rules[index[word]].append(rule_no)
        self._global = _allowlist(config.get("allowlist") or {})
        self._keyword_set = re2.Set.SearchSet(_options())
        for word in self._keywords:
            self._keyword_set.Add(re.escape(word.decode()).encode())
        self._keyword_set.Compile()

    def triggered(self, data: bytes) -> list[_Rule]:
        """The rules one of whose keywords is in the lower-cased text (one RE2 pass for all)."""
        hits = self._keyword_set.Match(data.lower()) or []
        numbers = sorted({n for k in hits for n in self._keyword_rules[k]})
        return [self.rules[n] for n in numbers]

    def findings(self, data: bytes) -> Iterator[Finding]:
        for rule in self.triggered(data):
            for m in rule.regex.finditer(data):
                start, end = _yaml_value(data, *_pem_body(data, *self._secret_span(rule, m)))
                if end <= start:
                    continue
                secret = data[start:end]
                if rule.entropy and shannon_entropy(secret) <= rule.entropy:
                    continue
                match = m.group(0)

                def line(start: int = m.start(), end: int = m.end()) -> bytes:
                    return _line_around(data, start, end)
                if self._global.allows(secret, match, line) or \
                        any(a.allows(secret, match, line) for a in rule.allowlists):
                    continue
                yield Finding(rule.id, start, end)

    @staticmethod
    def _secret_span(rule: _Rule, m: Any) -> tuple[int, int]:
        groups = m.re.groups
        if groups >= 1:
            if rule.secret_group and rule.secret_group <= groups:
                return _stripped(m, rule.secret_group)
            for g in range(1, groups + 1):
                if m.start(g) >= 0 and m.end(g) > m.start(g):
                    return _stripped(m, g)
        return _stripped(m, 0)


def _stripped(m: Any, group: int) -> tuple[int, int]:
    """A group's span without leading and trailing newlines (gitleaks trims them from the match)
    nor the quotes around it (a few rules' groups take them: the secret is what they quote, the
    same value and so the same pseudonym as in the environment)."""
    start, end = m.start(group), m.end(group)
    if start < 0:
        return 0, 0
    data = m.string
    while start < end and data[start] in b"\r\n\"'`":
        start += 1
    while end > start and data[end - 1] in b"\r\n\"'`":
        end -= 1
    return start, end


def _pem_body(data: bytes, start: int, end: int) -> tuple[int, int]:
    """A PEM block's body alone (private-key rules take the whole block): the BEGIN and END lines
    say what was there, and the pseudonym is the body's, as the context finder's."""
    if not data.startswith(b"-----BEGIN ", start):
        return start, end
    head = data.find(b"-----", start + 11, end)
    foot = data.rfind(b"-----END ", start, end)
    if head < 0 or foot <= head:
        return start, end
    return head + 5, foot


_YAML_KEY_RE = re.compile(rb"[A-Za-z0-9_.\-]{1,253}:[ \t]*(?:[|>][+-]?[ \t]*\r?\n[ \t]*)?[\"']?")


def _yaml_value(data: bytes, start: int, end: int) -> tuple[int, int]:
    """The value alone where a rule's group takes a whole YAML pair (kubernetes-secret-yaml's
    ``password: c2VjcmV0``): the key stays readable, the pseudonym is the value's."""
    m = _YAML_KEY_RE.match(data, start, end)
    return (m.end(), end) if m is not None and m.end() < end else (start, end)


#: how far the line of a finding is read on each side of it (an allowlist on lines looks at it):
#: a bound, so that many findings on one long line cost no more than their own neighbourhoods
LINE_CONTEXT = 4096


def _line_around(data: bytes, start: int, end: int) -> bytes:
    """The line a match is on, at most :data:`LINE_CONTEXT` bytes either side of the match."""
    low = max(0, start - LINE_CONTEXT)
    newline = data.rfind(b"\n", low, start)
    line_start = low if newline < 0 else newline + 1
    line_end = data.find(b"\n", end, end + LINE_CONTEXT)
    return data[line_start:line_end if line_end >= 0 else min(len(data), end + LINE_CONTEXT)]


#: the rule file's text, read when this module is imported: a process that later drops its
#: privileges (capture's unprivileged checks, a collector under another user) can still compile it
_RULES_TOML = resources.files("forensics.bundle.secrets").joinpath("data/gitleaks.toml").read_text("utf-8")


@cache
def default_rules() -> GitleaksRules:
    """The rules of the gitleaks release kept in ``data/gitleaks.toml`` (compiled once a process,
    when first used: 0.1 s that a command redacting nothing does not pay)."""
    return GitleaksRules(tomllib.loads(_RULES_TOML))
