"""Builds ``gitleaks_fixtures.tsv`` from a gitleaks checkout: the literal true-positive fixtures of
gitleaks' rule generators (``cmd/generate/config/rules/*.go``, the ``tps`` of each rule, which
gitleaks' own tests check its rules against), each with the secret that rule finds in it.

    python tests/support/secret_corpus/build_gitleaks_fixtures.py /path/to/gitleaks > \\
        tests/support/secret_corpus/gitleaks_fixtures.tsv

Source: https://github.com/gitleaks/gitleaks (MIT), tag v8.30.0, commit
6eaad039603a4de39fddd1cf5f727391efe9974e, the release whose config/gitleaks.toml the redactor
uses (forensics/bundle/secrets/data). The fixtures are fakes published as test data: no real
credential. Columns: rule id, source file, the secret, the fixture it was found in (backslash escapes for tab,
newline, carriage return, backslash).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from forensics.bundle.secrets.gitleaks import default_rules

_FUNC_RE = re.compile(r"^func ", re.M)
_RULE_ID_RE = re.compile(r'RuleID:\s*"([^"]+)"')
_LITERAL_RE = re.compile(r"`([^`]*)`|\"((?:[^\"\\\n]|\\.)*)\"")


def _unquote(go: str) -> str:
    return go.encode("latin-1", "backslashreplace").decode("unicode_escape")


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def main(root: str) -> None:
    rules = default_rules()
    seen: set[tuple[str, str]] = set()
    for path in sorted(Path(root, "cmd/generate/config/rules").glob("*.go")):
        source = path.read_text()
        for body in _FUNC_RE.split(source)[1:]:
            rule_id = _RULE_ID_RE.search(body)
            start = body.find("tps")
            if rule_id is None or start < 0:
                continue
            stop = min([i for i in (body.find("fps", start), body.find("return utils.Validate", start)) if i >= 0]
                       or [len(body)])
            for m in _LITERAL_RE.finditer(body, start, stop):
                text = m.group(1) if m.group(1) is not None else _unquote(m.group(2))
                data = text.encode("utf-8", "surrogateescape")
                for f in rules.findings(data):
                    secret = data[f.start:f.end].decode("utf-8", "surrogateescape")
                    if f.rule == rule_id.group(1) and (f.rule, secret) not in seen:
                        seen.add((f.rule, secret))
                        print(f"{f.rule}\t{path.name}\t{_escape(secret)}\t{_escape(text)}")


if __name__ == "__main__":
    main(sys.argv[1])
