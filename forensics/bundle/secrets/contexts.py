"""Secrets found by the context they are printed in, whatever their shape.

A detector of shapes (gitleaks.py) knows ``hf_...`` or ``ghp_...``; a password is any string, known
only by what stands around it. The contexts:

- assignments whose name says secret (:func:`forensics.bundle.secrets.names.secret_name`): shell
  and env ``NAME=value``, JSON ``"name": "value"``, YAML ``name: value``, Python dict reprs
  ``'name': 'value'``, ``name => value``, CLI flags ``--api-key=X`` and ``--token X``, HTTP headers
  ``X-Api-Key: X``, connection strings ``Password=...;`` ``AccountKey=...;``, URL queries
  ``&sig=...``; JSON escaped inside JSON (``\\"password\\": \\"...\\"``) too;
- Kubernetes env entries ``{"name": K, "value": V}`` (JSON, Python reprs, YAML ``- name: K`` then
  ``value: V``): V is redacted where K is not on the environment allow-list and is written as an
  environment variable (``DB_PASSWORD``) or is a secret name;
- ``Authorization:`` and ``Proxy-Authorization:`` of any scheme (``Bearer``, ``Basic``, ``Token``,
  ``Digest``, ``AWS4-HMAC-SHA256``, ...): the credentials after the scheme; ``Bearer X`` and
  ``Basic X`` anywhere;
- credentials in URLs (``scheme://user:password@host``), ``curl -u user:password``;
- the ``-p`` password of the programs known to take one there (``mysql -pX``, ``docker login -p X``:
  :mod:`forensics.bundle.secrets.programs`);
- netrc lines (``machine H login U password P``, a line ``password P``);
- PEM blocks (the body; BEGIN and END lines kept: they say what it was), also a block a log's
  window cut (body lines after a BEGIN with no END, before an END with no BEGIN), and PEM blocks
  printed base64-encoded (``LS0tLS1CRUdJTi...``: a kubeconfig's ``client-key-data``); JWTs and AWS
  access key ids in any text.

Every expression is RE2 (linear time on any input) and matched on UTF-8 bytes. Each finder yields
the byte spans of secrets; the redactor joins overlapping spans.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from collections.abc import Callable, Iterator
from typing import Any

import re2

from forensics.bundle.secrets.names import (
    looks_secret_value,
    name_words,
    secret_name,
    weak_secret_name,
)
from forensics.bundle.secrets.programs import text_password_spans

__all__ = ["FINDERS", "context_spans"]

Span = tuple[int, int]
EnvAllowed = Callable[[str], bool]


_GROUPS: dict[int, dict[bytes, int]] = {}


def _c(pattern: str) -> Any:
    regex = re2.compile(pattern.encode(), options=re2.Options())  # 8 MiB at most, as gitleaks.py
    _GROUPS[id(regex)] = dict(regex.groupindex)
    return regex


def _span(m: Any, name: bytes) -> Span:
    """The span of a named group (-1, -1 where it did not take part; IndexError where the
    expression has no such group)."""
    index = _GROUPS[id(m.re)].get(name)
    if index is None:
        raise IndexError(name)
    # the match's spans as google-re2 keeps them (its span() asks RE2 for the number of groups
    # on every call: a third of the time on a text dense with matches); span() where it has none
    spans = getattr(m, "_spans", None)
    start, end = spans[index] if spans is not None else m.span(index)
    return int(start), int(end)


def _group(m: Any, name: bytes) -> bytes | None:
    """A named group's bytes; None where it did not take part in the match."""
    start, end = _span(m, name)
    return None if start < 0 else bytes(m.string[start:end])


def _text_of(m: Any, name: bytes) -> bytes:
    """A named group that always takes part in its expression's matches."""
    start, end = _span(m, name)
    return bytes(m.string[max(start, 0):max(end, 0)])


def _d(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


# the end of a name that may be secret: any name characters, then one of the words that may end a
# secret name (names.secret_name decides, from the whole name)
_ENDINGS = ("password|passwd|pwd|pass|passphrase|passcode|secret|token|credentials?|creds|auth"
            "|authorization|cookie|dsn|signature|sig|pat|key|pw|psk|otp|apikey|connectionstring")
_NAME = rf"(?P<name>[A-Za-z0-9_.\-]*(?i:{_ENDINGS}))"
# a value: double-quoted (JSON escapes allowed), single-quoted, JSON-escaped inside JSON, or bare
_VALUE = (r"(?:\\\"(?P<ev>[^\"\\\n]*)\\\"|\"(?P<dq>(?:[^\"\\\n]|\\.)*)\"|\"(?P<dr>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'"
          r"|(?P<bare>[^\s\"',;&]+))")
# "=>" (Perl, Ruby, PHP) only between blanks: "--password=>x" assigns ">x"
_PAIR_RE = _c(_NAME + r"(?P<nq>\\?[\"'])?(?P<sep>[ \t]+=>[ \t]+|[ \t]*(?::=|=|:)[ \t]*)" + _VALUE)
_FLAG_RE = _c(r"(?:^|[\s\"'])--?" + _NAME + r"[ \t]+" +
              r"(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"'\-][^\s\"']*))")
_ENV_ENTRY_RE = _c(
    r"\\?[\"']name\\?[\"'][ \t]*:[ \t]*\\?[\"'](?P<name>[^\"'\\\n]{1,256})\\?[\"'][ \t]*,[ \t]*"
    r"\\?[\"']value\\?[\"'][ \t]*:[ \t]*"
    r"(?:\\\"(?P<ev>[^\"\\\n]*)\\\"|\"(?P<dq>(?:[^\"\\\n]|\\.)*)\"|'(?P<sq>[^'\n]*)')")
# a log line's own timestamp, as Docker and the kubelet prefix each line (timestamps=1): the next
# line of a YAML env entry or a netrc file starts with it
_LINE_TIME = r"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)[ \t])?"
_ENV_ENTRY_YAML_RE = _c(
    r"(?m)name:[ \t]*[\"']?(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)[\"']?[ \t]*\r?\n" + _LINE_TIME
    + r"[ \t]*-?[ \t]*value:[ \t]*"
    r"(?:\"(?P<dq>(?:[^\"\\\n]|\\.)*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"'#][^\n]*))")
# where an Authorization value starts (the value itself is measured in Python, up to the line's
# end, its closing quote or the next header, whichever is first: every byte is looked at once)
_AUTH_HEADER_RE = _c(r"(?i)(?:proxy-)?authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*(?P<quote>\\?[\"'])?")
_AUTH_SCHEME_RE = re.compile(rb"([A-Za-z][A-Za-z0-9_.+\-]*)[ \t]+(?=\S)")
_TOKEN_RE = re.compile(rb"[^ \t,;]*")
_SCHEME_TOKEN_RE = _c(r"(?i)\b(?P<scheme>bearer|basic)[ \t]+(?P<cred>[A-Za-z0-9._~+/\-]{8,}=*)")
_URL_CRED_RE = _c(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@\"'<>]*:(?P<cred>[^\s@\"'<>]+)@")
_CURL_USER_RE = _c(r"(?:^|\s)(?:-u|--user|--proxy-user)(?:[ \t]+|=)[\"']?[^\s:\"']*:(?P<cred>[^\s\"']+)")
_NETRC_RE = _c(r"(?i)\blogin[ \t]+\S+[ \t]+password[ \t]+(?P<cred>\S+)")
_NETRC_LINE_RE = _c(r"(?im)^" + _LINE_TIME + r"[ \t]*password[ \t]+(?P<cred>\S+)[ \t]*\r?$")
_PEM_RE = _c(r"-----BEGIN [A-Z0-9 ]{1,64}-----(?P<body>(?s:.*?))-----END [A-Z0-9 ]{1,64}-----")
_PEM_HEAD_RE = _c(r"-----BEGIN [A-Z0-9 ]{1,64}-----")
_PEM_TAIL_RE = _c(r"-----END [A-Z0-9 ]{1,64}-----")
# a line of a PEM body (base64, blanks around it: a log line's blanked timestamp)
_PEM_BODY_LINE_RE = _c(r"[ \t]*[A-Za-z0-9+/]+=*[ \t]*\r?")
# a PEM block printed base64-encoded (kubeconfig client-key-data, a Secret's tls.key): "-----BEGIN"
_B64_PEM_RE = _c(r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{16,}={0,2}")
_JWT_RE = _c(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*")
_AWS_KEY_ID_RE = _c(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")

#: schemes whose credentials are one token; any other scheme's run to the end of the value
_ONE_TOKEN_SCHEMES = frozenset({"bearer", "basic", "token", "apikey", "api-key", "key", "ssws", "jwt",
                                "oauth2", "pat", "sso-key", "klaviyo-api-key", "dsn"})


def _value_span(m: Any) -> Span | None:
    for group in (b"ev", b"dq", b"dr", b"sq", b"bare"):
        try:
            span = _span(m, group)
        except IndexError:  # not a group of this expression
            continue
        if span[0] >= 0:
            return span
    return None


def _pairs(data: bytes, env_allowed: EnvAllowed) -> Iterator[Span]:
    for regex in (_PAIR_RE, _FLAG_RE):
        for m in regex.finditer(data):
            span = _value_span(m)
            name = _d(_text_of(m, b"name"))
            if span is None or not secret_name(name) or name_words(name)[-1] == "authorization":
                continue  # (an Authorization value is the header finder's: scheme, then credentials)
            value = _d(data[span[0]:span[1]])
            low = value.lower()
            if low in ("bearer", "basic", "token", "digest"):
                continue  # the scheme of an Authorization value: the header finder takes it
            if regex is _PAIR_RE and _tight_colon(m):
                continue  # passwd:amd64 (a package and its architecture), not an assignment
            if weak_secret_name(name) and (value.isdigit() or value.startswith(("/", "~"))):
                continue  # sig=11, pass: 3, PWD=/home/user (the working directory)
            if looks_secret_value(value):
                yield span


def _tight_colon(m: Any) -> bool:
    """``name:value`` with neither quotes nor a blank: YAML needs a blank after the colon, JSON
    quotes its names; this is a package name (``passwd:amd64``), a time or an address."""
    return (_group(m, b"sep") == b":" and _group(m, b"nq") is None
            and _span(m, b"bare")[0] >= 0)


def _env_entries(data: bytes, env_allowed: EnvAllowed) -> Iterator[Span]:
    for regex in (_ENV_ENTRY_RE, _ENV_ENTRY_YAML_RE):
        for m in regex.finditer(data):
            name = _d(_text_of(m, b"name"))
            span = _value_span(m)
            if span is None or env_allowed(name):
                continue
            if (_is_env_name(name) or secret_name(name)) and looks_secret_value(_d(data[span[0]:span[1]])):
                yield _rstrip(data, span)


def _is_env_name(name: str) -> bool:
    return name[:1].isalpha() and name.replace("_", "").isalnum() and name.upper() == name


def _rstrip(data: bytes, span: Span) -> Span:
    start, end = span
    while end > start and data[end - 1] in b" \t\r":
        end -= 1
    return start, end


def _auth_headers(data: bytes, env_allowed: EnvAllowed) -> Iterator[Span]:
    heads = list(_AUTH_HEADER_RE.finditer(data))
    for i, m in enumerate(heads):
        start = m.end()
        end = heads[i + 1].start() if i + 1 < len(heads) else len(data)
        newline = data.find(b"\n", start, end)
        end = end if newline < 0 else newline
        if _group(m, b"quote") is not None:  # a quoted value ends at the next quote
            end = _quote_end(data, start, end)
        scheme = _AUTH_SCHEME_RE.match(data, start, end)
        if scheme is not None:
            start = scheme.end()
        if scheme is None or scheme.group(1).lower().decode("ascii") in _ONE_TOKEN_SCHEMES:
            token = _TOKEN_RE.match(data, start, end)
            end = token.end() if token is not None else start
        span = _rstrip(data, (start, end))
        if span[1] > span[0] and looks_secret_value(_d(data[span[0]:span[1]])):
            yield span
    for m in _SCHEME_TOKEN_RE.finditer(data):
        cred = _text_of(m, b"cred")
        if _text_of(m, b"scheme").lower() == b"basic":
            if _basic_credentials(cred):
                yield _span(m, b"cred")
        elif any(c in b"0123456789+/=_.-" for c in cred) or len(cred) >= 20:
            yield _span(m, b"cred")


def _quote_end(data: bytes, start: int, end: int) -> int:
    """Where a quoted header value ends: at its first quote (or escaped quote) before ``end``."""
    ends = [i for i in (data.find(b'"', start, end), data.find(b"'", start, end), data.find(b"\\", start, end))
            if i >= 0]
    return min(ends) if ends else end


def _basic_credentials(cred: bytes) -> bool:
    """A ``Basic`` credential is base64 of ``user:password`` ('Basic settings' is not one)."""
    try:
        decoded = base64.b64decode(cred, validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _shapes(data: bytes, env_allowed: EnvAllowed) -> Iterator[Span]:
    for regex in (_URL_CRED_RE, _CURL_USER_RE, _NETRC_RE, _NETRC_LINE_RE):
        for m in regex.finditer(data):
            cred = _text_of(m, b"cred")
            if regex is _URL_CRED_RE and b"/" in cred and cred.partition(b"/")[0].isdigit():
                continue  # host:port/path@...: a path with an '@' (npm scopes), no credential
            if looks_secret_value(_d(cred)):
                yield _span(m, b"cred")
    if b"-----BEGIN " in data or b"-----END " in data:
        yield from _pem_bodies(data)
    if b"LS0tLS1CRUdJTi" in data:
        for m in _B64_PEM_RE.finditer(data):
            yield m.span()
    if b"eyJ" in data:
        for m in _JWT_RE.finditer(data):
            yield m.span()
    for m in _AWS_KEY_ID_RE.finditer(data):
        yield m.span()


_PEM_BODY_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\\")
# a body written on the armour's own line with JSON escapes ("-----BEGIN X-----\nMIIE...\n...)
_ESCAPED_BODY_RE = _c(r"(?:\\[nr]|[A-Za-z0-9+/=])+")
_B64_LINE_RE = _c(r"[A-Za-z0-9+/]{40}")  # a PEM body line is 64 characters (the last one fewer)


def _cut_body(data: bytes, armour: Any, span: Span) -> Span | None:
    """A cut block's body span, when it is one: its armour names a key, or it holds a line of
    base64 as long as a PEM body's ('-----END OF REPORT-----' after a few words is no key)."""
    if span[1] <= span[0]:
        return None
    if b"KEY" in armour.group(0) or _B64_LINE_RE.search(data, span[0], span[1]) is not None:
        return span
    return None


def _pem_bodies(data: bytes) -> Iterator[Span]:
    """The bodies of PEM blocks, whole or cut by a log's window: a body between its BEGIN and END
    lines; after a BEGIN line with no END (a log that ends inside the block) the body lines that
    follow it; before an END line with no BEGIN (a log whose kept lines start inside the block)
    the body lines that precede it (a body JSON-escaped on the armour's line too). The armour
    lines are kept: they say what was there."""
    whole: list[Span] = []
    for m in _PEM_RE.finditer(data):
        whole.append(m.span())
        body = _span(m, b"body")
        if body[1] > body[0]:
            yield body
    starts = [w[0] for w in whole]

    def inside(pos: int) -> bool:
        i = bisect.bisect_right(starts, pos) - 1
        return i >= 0 and pos < whole[i][1]

    for m in _PEM_HEAD_RE.finditer(data):
        if inside(m.start()):
            continue
        start = end = m.end()
        line_end = data.find(b"\n", start)
        escaped = _ESCAPED_BODY_RE.match(data, start, len(data) if line_end < 0 else line_end)
        if escaped is not None:
            end = escaped.end()
        while line_end >= 0 and end >= line_end - 1:  # the following lines, while they are body lines
            nxt = data.find(b"\n", line_end + 1)
            stop = len(data) if nxt < 0 else nxt
            if not _PEM_BODY_LINE_RE.fullmatch(data, line_end + 1, stop):
                break
            end, line_end = stop, nxt
        found = _cut_body(data, m, (start, end))
        if found is not None:
            yield found
    for m in _PEM_TAIL_RE.finditer(data):
        if inside(m.start()):
            continue
        line_start = data.rfind(b"\n", 0, m.start()) + 1
        escaped_start = m.start()  # a body JSON-escaped before it on its line
        while escaped_start > line_start and data[escaped_start - 1] in _PEM_BODY_BYTES:
            escaped_start -= 1
        if data[line_start:escaped_start].strip():  # other text first: the lines above are not its body
            found = _cut_body(data, m, (escaped_start, m.start()))
        else:
            start = line_start
            while start > 0:  # the lines before it, while they are body lines
                prev = data.rfind(b"\n", 0, start - 1) + 1
                if not _PEM_BODY_LINE_RE.fullmatch(data, prev, start - 1):
                    break
                start = prev
            if start < line_start:
                found = _cut_body(data, m, (start, m.start() if escaped_start < m.start() else line_start - 1))
            else:
                found = _cut_body(data, m, (escaped_start, m.start()))
        if found is not None:
            yield found


FINDERS: tuple[Callable[[bytes, EnvAllowed], Iterator[Span]], ...] = (
    _pairs, _env_entries, _auth_headers, _shapes, text_password_spans)


def context_spans(data: bytes, env_allowed: EnvAllowed) -> Iterator[Span]:
    """Byte spans of the secrets every context finder finds in ``data`` (possibly overlapping)."""
    for finder in FINDERS:
        yield from finder(data, env_allowed)
