"""The part of a secret that a cut left at the edge of a text.

A log kept up to a byte limit (the kubelet's ``limitBytes`` keeps the oldest bytes, mid-line;
:func:`forensics.parsing.logsignals.line.newest_lines` keeps the end of a line longer than the cap)
can end or begin inside a token. What is left no longer has the token's shape (``ghp_`` and 36
characters, three dot-separated JWT parts), so no shape rule finds it, and its part reaches the
bundle. Where the caller knows a text was cut there:

- at the end: a known token prefix (``ghp_``, ``hf_``, ``xoxb-``, ``AKIA``, ``eyJ``, ``sk-``, ...)
  followed by token characters up to the cut is a secret's beginning;
- at the start: the token characters before the first other character (the rest of a word the cut
  began in) are a secret's end where they hold both letters and digits, as a random token does,
  and are not longer than a token (:data:`MAX_TOKEN_CHARS`): the end of a word or of a number
  (``ializing``, ``0042``) is kept.

Only the edge a caller says was cut is looked at: a text that ends in ``hf_`` whole is no cut
token. RE2 (linear time), on bytes.
"""

from __future__ import annotations

from typing import Any

import re2

__all__ = ["MAX_TOKEN_CHARS", "TOKEN_PREFIXES", "cut_edge_spans"]

# prefixes of the credential shapes whose beginning says what they are (gitleaks' rules, and AWS,
# Google, OpenAI, Stripe, Slack, GitLab, npm, PyPI, DigitalOcean, Shopify, SendGrid, Hugging Face)
TOKEN_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "glptt-", "gldt-",
                  "hf_", "api_org_", "xoxa-", "xoxb-", "xoxe-", "xoxo-", "xoxp-", "xoxr-", "xoxs-",
                  "xapp-", "AKIA", "ASIA", "eyJ", "sk-", "sk_live_", "rk_live_", "npm_", "pypi-", "AIza",
                  "ya29.", "dop_v1_", "shpat_", "SG.")
MAX_TOKEN_CHARS = 1024  # longer than any token (a JWT with claims is a few hundred)

_TOKEN_CHARS = r"[A-Za-z0-9_\-.+/=]"
_PREFIX = "|".join(p.replace(".", r"\.") for p in TOKEN_PREFIXES)
_WINDOW = 2 * MAX_TOKEN_CHARS


def _c(pattern: str) -> Any:
    return re2.compile(pattern.encode(), options=re2.Options())


# a prefix starts a word (not "...bghp_"), then token characters to the very end (a prefix alone
# holds none of the secret)
_CUT_END_RE = _c(rf"(?:^|[^A-Za-z0-9])(?P<token>(?:{_PREFIX}){_TOKEN_CHARS}+)\z")
_CUT_START_RE = _c(rf"\A{_TOKEN_CHARS}+")


def cut_edge_spans(data: bytes, *, cut_start: bool = False, cut_end: bool = False) -> list[tuple[int, int]]:
    """Byte spans of the partial secrets at the edges of ``data`` that the caller says were cut."""
    out: list[tuple[int, int]] = []
    if cut_start:
        m = _CUT_START_RE.match(data[:MAX_TOKEN_CHARS + 1])
        if m is not None:
            run = m.group(0)
            if (len(run) <= MAX_TOKEN_CHARS and any(c in b"0123456789" for c in run)
                    and any(65 <= c <= 90 or 97 <= c <= 122 for c in run)):
                out.append((0, len(run)))
    if cut_end:
        base = max(0, len(data) - _WINDOW)
        m = _CUT_END_RE.search(data[base:])
        if m is not None:
            start, end = m.span(1)
            out.append((base + start, base + end))
    return out
