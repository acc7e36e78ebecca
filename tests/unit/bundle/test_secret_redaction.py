"""Free-text redaction (forensics/bundle/secrets, Redactor.text): the secret corpus of
tests/support/secret_corpus printed in every context leaks nothing; the benign lines of the same
workloads come through (GPU UUIDs, PCI ids, container ids, digests unchanged); every expression is
RE2 (linear time); adversarial strings neither raise nor leak."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.bundle.redact import Redactor
from forensics.bundle.secrets import contexts, gitleaks
from forensics.bundle.secrets.gitleaks import GITLEAKS_VERSION, default_rules
from forensics.collectors.kubernetes.redaction import redact_pod
from tests.support.secret_corpus import all_secrets, benign_lines, printed

KEY = b"k" * 32
PSEUDO = re.compile(r"<redacted:[0-9a-f]{16}>")
HF = "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"  # gitleaks v8.30.0 huggingface.go fixture


def test_corpus_has_200_secrets_in_25_shapes_and_none_leaks() -> None:
    secrets = all_secrets()
    assert len(secrets) >= 200 and len({s.shape for s in secrets}) >= 25
    r = Redactor(key=KEY)
    leaks: Counter[str] = Counter()
    examples = []
    texts = 0
    for secret, context, text in printed(secrets):
        texts += 1
        out = r.text(text)
        if secret.value in out:
            leaks[context] += 1
            examples.append((secret.shape, context, out[:160]))
    assert texts > 5000
    assert not leaks, (dict(leaks), examples[:5])


def test_benign_lines_are_not_redacted_and_join_keys_survive() -> None:
    r = Redactor(key=KEY)
    lines = benign_lines()
    changed = [(b.kind, r.text(b.line)) for b in lines if r.text(b.line) != b.line]
    assert len(changed) < 0.01 * len(lines), changed[:5]
    for b in lines:
        out = r.text(b.line)
        for key in b.keep:  # GPU UUIDs, PCI ids, container ids, digests, commits: analysis joins on them
            assert key in out, (b.kind, out)
    assert r.counts == {}


@pytest.mark.parametrize("line", [
    "openai.AuthenticationError: Error code: 401 - {'error': {'message': 'Incorrect API key provided'}}",
    "tokenizer: pad_token=<pad> eos_token=</s> max_tokens=4096 num_tokens: 512",
    "HF_TOKEN not set; using anonymous access (token=None)",
    "KeyError: 'lm_head.weight'; sort_key=loss; secret_name: regcred",
    "Basic settings loaded; Bearer token expired",
    "fetch https://registry.npmjs.org:443/@scope/pkg",
    "python[4242] killed by sig=11; pass: 3 of 5",
    "<6>[    0.000700] x86/PAT: Configuration [0-7]: WB  WC  UC- UC  WB  WP  UC- WT",
    "cd: PWD=/home/alice/jobs OLDPWD=/root",
    "2026-12-06 07:51:05 status installed passwd:amd64 1:4.13+dfsg1-1+deb12u2",
])
def test_words_near_secrets_are_not_secrets(line: str) -> None:
    assert Redactor(key=KEY).text(line) == line


@pytest.mark.parametrize("line,secret", [
    ('{"name": "DB_PASSWORD", "value": "s3cr3t-v@lue"}', "s3cr3t-v@lue"),
    ("{'name': 'WANDB_API_KEY', 'value': '0123456789abcdef0123456789abcdef01234567', 'value_from': None}",
     "0123456789abcdef0123456789abcdef01234567"),
    ("  - name: DB_PASSWORD\n    value: hunter22\n", "hunter22"),
    ('{"msg": "config {\\"client_secret\\": \\"abc-123-xyz\\"}"}', "abc-123-xyz"),
    ("Authorization: Digest username=\"u\", realm=\"r\", response=\"6629fae49393a05397450978507c4ef1\"",
     "6629fae49393a05397450978507c4ef1"),
    ("Authorization: AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/s3/aws4_request, Signature=fe5f80f77d5fa3be",
     "fe5f80f77d5fa3be"),
    ("Server=tcp:db;User ID=sa;Password=P@ssw0rd!;Encrypt=true", "P@ssw0rd!"),
    ("AccountName=a;AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4MTIzNA==;EndpointSuffix=core.windows.net",
     "Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4MTIzNA=="),
    ("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n", "0123456789abcdef"),
    ("pip install -i https://__token__:pypi-AgEIcHlwaS5vcmcCJDAx@pypi.example/simple x", "pypi-AgEIcHlwaS5vcmcCJDAx"),
    (f"huggingface-cli login --token {HF}", HF),
    (f"prefix {HF} suffix", HF),
    ("curl -u admin:Secr3tPass https://x", "Secr3tPass"),
    ("X-Api-Key: 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
    ('{"password":"c0mpact-json"}', "c0mpact-json"),
    ('curl -H "Authorization: Bearer abc123def456" -H "Proxy-Authorization: ApiKey zz99yy88xx77" x', "zz99yy88xx77"),
])
def test_keyword_contexts(line: str, secret: str) -> None:
    out = Redactor(key=KEY).text(line)
    assert secret not in out and PSEUDO.search(out), out


def test_one_secret_one_pseudonym_in_logs_and_environment() -> None:
    r = Redactor(key=KEY)
    env = r.env_list([f"HF_TOKEN={HF}"])
    assert env is not None
    pseudonym = env[0].partition("=")[2]
    for line in (f"huggingface-cli login --token {HF}", f'{{"name": "HF_TOKEN", "value": "{HF}"}}',
                 f"HF_TOKEN='{HF}' python run.py", f"prefix {HF} suffix", f"Authorization: Bearer {HF}"):
        assert pseudonym in r.text(line), line


def test_headers_keep_their_scheme_and_pem_blocks_their_armour() -> None:
    r = Redactor(key=KEY)
    assert r.text(f"Authorization: Bearer {HF}").startswith("Authorization: Bearer <redacted:")
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAn6/O8li+SX4m98LLYt/PKSzEmQ++ZBD7Loh9P13f4yQ92EF3\n-----END RSA PRIVATE KEY-----"
    out = r.text(f"key:\n{pem}\nafter")
    assert out.startswith("key:\n-----BEGIN RSA PRIVATE KEY-----<redacted:")
    assert out.endswith("-----END RSA PRIVATE KEY-----\nafter")


def test_text_bytes_keeps_invalid_utf8_and_returns_the_same_object_when_clean() -> None:
    r = Redactor(key=KEY)
    clean = b"\xff\xfe step=1 loss=0.5\n"
    assert r.text_bytes(clean) is clean
    out = r.text_bytes(b"\xff password=hunter2 \xfe\n")
    assert out.startswith(b"\xff password=<redacted:") and out.endswith(b" \xfe\n")


def test_rule_set_is_gitleaks_release_and_every_expression_is_re2() -> None:
    """RE2 matches in time linear in the input whatever the expression: no pattern can be
    superlinear. Python ``re`` is left only for anchored matches of single-class runs within the
    span of one header value (each byte is looked at once)."""
    rules = default_rules()
    assert GITLEAKS_VERSION == "v8.30.0" and len(rules.rules) >= 200
    assert all(type(rule.regex).__module__ == "re2" for rule in rules.rules)
    re2_type = type(rules.rules[0].regex)
    compiled = [v for v in vars(contexts).values() if isinstance(v, (re.Pattern, re2_type))]
    assert len(compiled) >= 12
    anchored = {contexts._AUTH_SCHEME_RE, contexts._TOKEN_RE}  # .match() of one class run, bounded by a span
    assert all(type(v).__module__ == "re2" for v in compiled if v not in anchored)
    assert "generic-api-key" in gitleaks.EXCLUDED_RULES


def test_pod_status_messages_and_container_args_are_redacted() -> None:
    pod = {"spec": {"containers": [{"name": "t", "args": ["--api-key", "sk-live-1234abcd", "--lr", "0.1"],
                                    "command": ["python", f"--hf-token={HF}"]}]},
           "status": {"message": "password=hunter2",
                      "containerStatuses": [{"lastState": {"terminated": {
                          "message": f"Traceback ... login failed with token {HF}", "exitCode": 1}}}]}}
    redact_pod(pod, Redactor(key=KEY))
    flat = repr(pod)
    for secret in ("sk-live-1234abcd", HF, "hunter2"):
        assert secret not in flat
    assert pod["spec"]["containers"][0]["args"][2:] == ["--lr", "0.1"]


def test_probes_and_lifecycle_hooks_are_redacted() -> None:
    """A probe's or lifecycle hook's exec command is a command line, an httpGet header a header:
    a readiness probe that curls with a bearer token, or sends ``X-Api-Key``, reached the bundle
    verbatim (in the pod and in its last-applied configuration)."""
    key = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"
    container = {"name": "t",
                 "readinessProbe": {"exec": {"command": ["sh", "-c", f"curl -H 'Authorization: Bearer {HF}' x"]}},
                 "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080,
                                               "httpHeaders": [{"name": "X-Api-Key", "value": key},
                                                               {"name": "Accept", "value": "text/plain"}]}},
                 "lifecycle": {"preStop": {"exec": {"command": ["/bin/drain", "--token", "s3cr3t-t0ken"]}}}}
    applied = {"spec": {"containers": [dict(container)]}}
    pod = {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)}},
           "spec": {"containers": [container]}}
    redact_pod(pod, Redactor(key=KEY))
    flat = json.dumps(pod)
    for secret in (HF, key, "s3cr3t-t0ken"):
        assert secret not in flat, secret
    headers = pod["spec"]["containers"][0]["livenessProbe"]["httpGet"]["httpHeaders"]
    assert headers[1] == {"name": "Accept", "value": "text/plain"}


# -- adversarial inputs ---------------------------------------------------------------------

_FRAGMENTS = ["password", "=", ":", "\"", "'", "\\\"", "--token ", "Authorization: ", "Bearer ", "://",
              "@", "-----BEGIN A-----", "-----END A-----", "eyJ", ".", "hf_", "AKIA", " ", "\n", "a" * 7,
              "QUJD", "{\"name\": \"X\", \"value\": ", "name: K\n  value: ", "machine h login u password ",
              "<redacted:", "x" * 16, ";", "&sig="]


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(_FRAGMENTS), max_size=60), repeat=st.integers(1, 40))
def test_adversarial_strings_neither_raise_nor_lose_a_pseudonym_on_a_second_pass(parts: list[str], repeat: int) -> None:
    """A pseudonym is never redacted again: a second pass keeps every one of the first (it may
    still find a secret the first pass's replacements uncovered in hostile text)."""
    r = Redactor(key=KEY)
    s = "".join(parts) * repeat
    once = r.text(s)
    twice = r.text(once)
    assert Counter(PSEUDO.findall(twice)) >= Counter(PSEUDO.findall(once))
    assert r.text(twice).count("<redacted:") >= twice.count("<redacted:")


@settings(max_examples=200, deadline=None)
@given(noise=st.lists(st.sampled_from(_FRAGMENTS), max_size=30), template=st.sampled_from(
    [f"--token {HF}", f"api_key={HF}", f"Authorization: Bearer {HF}", f" {HF} "]))
def test_a_secret_in_adversarial_noise_never_leaks(noise: list[str], template: str) -> None:
    half = len(noise) // 2
    s = "".join(noise[:half]) + " " + template + "\n" + "".join(noise[half:])
    assert HF not in Redactor(key=KEY).text(s)


def test_docker_state_text_healthcheck_and_cri_termination_message_are_redacted() -> None:
    from forensics.collectors.cri.redaction import redact_container_status
    from forensics.collectors.docker.redact import redact_container

    class Ctx:
        redactor = Redactor(key=KEY)

    doc = {"Config": {"Healthcheck": {"Test": ["CMD", "curl", "-H", f"Authorization: Bearer {HF}", "http://x"]}},
           "State": {"Error": "exec: login --password=hunter2 failed",
                     "Health": {"Log": [{"Output": f"token={HF} rejected", "ExitCode": 1}]}}}
    flat = repr(redact_container(doc, Ctx()))  # type: ignore[arg-type]
    assert HF not in flat and "hunter2" not in flat and "Bearer <redacted:" in flat
    status = {"status": {"message": f"Error: invalid token {HF}\nexiting", "annotations": {}}}
    out = redact_container_status(status, Redactor(key=KEY))
    assert HF not in out["status"]["message"] and out["status"]["message"].endswith("\nexiting")


@settings(max_examples=500, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 8)), max_size=12),
       gaps=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 6)), max_size=8))
def test_merge_spans_joins_overlaps_and_drops_what_touches_a_pseudonym(
        spans: list[tuple[int, int]], gaps: list[tuple[int, int]]) -> None:
    from forensics.bundle.secrets.spans import merge_spans

    kept, pos = [], 0
    for gap, length in gaps:  # disjoint kept spans, as pseudonyms in a text are
        kept.append((pos + gap, pos + gap + length))
        pos += gap + length
    found = [(a, a + n) for a, n in spans]
    merged = merge_spans(found, kept)
    survivors = [s for s in found if s[1] > s[0] and not any(k0 < s[1] and s[0] < k1 for k0, k1 in kept)]
    assert all(a < b for a, b in merged) and all(merged[i][1] < merged[i + 1][0] for i in range(len(merged) - 1))
    covered = {i for a, b in merged for i in range(a, b)}
    assert covered == {i for a, b in survivors for i in range(a, b)}
