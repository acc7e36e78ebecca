"""Whether a name (of a variable, key, flag or header) says that its value is a secret, and whether a
value looks like one rather than a placeholder.

A name is split into words (any separator, camelCase too: ``AccountKey``, ``x-api-key``,
``_authToken``, ``HF_TOKEN``) and judged by its last words: ``password``, ``secret``, ``token``,
``credentials``, ``auth``, ``cookie``, ``dsn``, ``signature`` ... end a secret name; ``key`` does
when a qualifier stands before it (``api_key``, ``AccountKey``, ``aws_secret_access_key``), not
alone (``sort_key``, ``cache key``). The word must end the name: ``AuthenticationError``,
``max_tokens``, ``tokenizer``, ``secret_name`` and ``password_file`` are not secret names; the
special tokens of tokenizers (``pad_token``, ``eos_token``) are not either.
"""

from __future__ import annotations

import re

__all__ = ["looks_secret_value", "name_words", "secret_name"]

_WORD_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

#: last words that make a name secret whatever stands before them
SECRET_LAST_WORDS = frozenset({
    "password", "passwd", "pwd", "pass", "passphrase", "passcode", "secret", "token", "credential",
    "credentials", "creds", "auth", "authorization", "cookie", "dsn", "signature", "sig", "pat",
    "apikey", "accesskey", "secretkey", "privatekey", "accountkey", "authtoken", "accesstoken",
    "apitoken", "sastoken", "clientsecret", "connectionstring", "pw", "psk", "otp",
})
#: endings that make a secret name glued to a prefix without separator (``PGPASSWORD``, ``ghtoken``)
_GLUED_ENDINGS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "accesskey",
                  "secretkey", "privatekey", "accountkey")
#: qualifiers that make a final ``key`` secret (``api_key``, ``AccountKey``, ``SharedAccessKey``)
KEY_QUALIFIERS = frozenset({
    "api", "access", "secret", "private", "account", "client", "master", "encryption", "encrypt",
    "signing", "license", "licence", "subscription", "auth", "app", "application", "service",
    "shared", "storage", "sas", "hmac", "admin", "consumer", "webhook", "session", "ssh", "gpg",
    "pgp", "root", "deploy", "integration", "server", "write", "ingest", "ingestion", "partner",
    "personal", "project", "publishable", "restricted", "live", "test", "mgmt", "management",
})
#: words before ``token`` that name something that is not a credential (tokenizers' special tokens,
#: counts, paging cursors)
NOT_SECRET_TOKEN_QUALIFIERS = frozenset({
    "pad", "eos", "bos", "unk", "cls", "sep", "mask", "special", "start", "end", "eot", "additional",
    "decoder", "image", "vision", "video", "audio", "max", "num", "total", "first", "last", "input",
    "output", "prompt", "completion", "next", "page", "continuation", "csrf", "xsrf", "sample",
})
#: values that stand for no secret: empty settings, placeholders, masks
_PLACEHOLDERS = frozenset({
    "", "none", "null", "nil", "true", "false", "undefined", "unset", "yes", "no", "on", "off",
    "redacted", "[redacted]", "<redacted>", "(redacted)", "hidden", "<hidden>", "(hidden)", "masked",
    "<masked>", "[masked]", "[filtered]", "filtered", "***", "...", "changeme", "<none>", "(none)",
    "enabled", "disabled", "required", "optional", "present", "missing", "set", "not set",
})
_PLACEHOLDER_RE = re.compile(
    r"\$\{[^}]*\}|\$\([^)]*\)|\$[A-Za-z_][A-Za-z0-9_]*|\{\{.*\}\}|%\([^)]*\)s|%s|<[^<>]{0,40}>"
    r"|\[[A-Z_]{1,20}\]|\*+|x+|X+|\.+|-+|#+|\\+|<redacted:[0-9a-f]{16}>"
)


#: last words that are secret names but also short words of other meanings (``sig=11`` is a signal,
#: ``pass: 3`` a count, ``PWD=/root`` the working directory): their value is taken for a secret
#: unless it is a number or a path
WEAK_LAST_WORDS = frozenset({"sig", "pat", "pw", "otp", "psk", "pass", "auth", "pwd"})


def weak_secret_name(name: str) -> bool:
    """A secret name whose last word also has other meanings (:data:`WEAK_LAST_WORDS`)."""
    words = name_words(name)
    return bool(words) and words[-1] in WEAK_LAST_WORDS


def name_words(name: str) -> list[str]:
    """The lower-cased words of a name: ``x-api-key`` -> x, api, key; ``AccountKey`` -> account, key."""
    return [w.lower() for w in _WORD_RE.findall(name[-128:])]


def secret_name(name: str) -> bool:
    """True for a name whose value is a secret: ``DB_PASSWORD``, ``api-key``, ``AccountKey``,
    ``_authToken``, ``aws_secret_access_key``; False for ``AuthenticationError``, ``max_tokens``,
    ``pad_token``, ``sort_key``, ``secret_name``."""
    words = name_words(name)
    if not words:
        return False
    last = words[-1]
    before = words[-2] if len(words) > 1 else ""
    if last == "token":
        return before not in NOT_SECRET_TOKEN_QUALIFIERS
    if last == "pat":  # GH_PAT, gitlab_pat; PAT alone is Intel's Page Attribute Table (x86/PAT:)
        return bool(before)
    if last in SECRET_LAST_WORDS or last.endswith(_GLUED_ENDINGS):
        return True
    if last == "key":
        return before in KEY_QUALIFIERS
    return False


def looks_secret_value(value: str) -> bool:
    """False for what holds no secret: empty values, placeholders (``${TOKEN}``, ``$PASS``,
    ``<your key>``, ``***``, ``None``, ``true``)."""
    whole = value.strip().strip("\"'")
    v = whole.rstrip(")]},.:")  # punctuation that ends a sentence or a structure around it
    # ``${TOKEN}`` and ``$(cat key)`` end in a bracket of their own: judged with it too
    return not (v.lower() in _PLACEHOLDERS or _PLACEHOLDER_RE.fullmatch(v)
                or _PLACEHOLDER_RE.fullmatch(whole.rstrip(",.:;")))
