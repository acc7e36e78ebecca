"""A corpus of fake secrets in the shapes GPU and ML workloads print them, and of benign lines of the
same workloads, for measuring the redactor (tests/unit/bundle/test_secret_corpus.py,
bench/bench_redact.py, and the real-container tests).

Secrets (never real credentials):

- ``gitleaks_fixtures.tsv``: the literal true-positive fixtures of gitleaks' rule generators
  (https://github.com/gitleaks/gitleaks, MIT, tag v8.30.0, commit
  6eaad039603a4de39fddd1cf5f727391efe9974e, ``cmd/generate/config/rules/*.go``), each reduced to
  the secret its rule finds in it (built by ``build_gitleaks_fixtures.py``);
- :data:`GENERATED_RECIPES`: the shapes whose gitleaks fixtures are generated at test time rather
  than written out (``utils.GenerateSampleSecrets(..., "ghp_" + secrets.NewSecret(AlphaNumeric("36")))``
  in github.go, and the like), generated here by the same recipe from a fixed seed;
- :data:`CONTEXT_ONLY`: values that only their context says are secret (passwords, Weights &
  Biases keys, which are 40 hex digits, registry passwords): no detector of shapes can know them.

:func:`printed` prints every secret in every context :data:`CONTEXTS` names (JSON and YAML
key/value, Kubernetes env entries in JSON, a Python repr and YAML, CLI flags in both forms,
``Authorization`` headers, connection strings, netrc, URL credentials, shell exports). Benign lines:
:func:`benign_lines`.
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CONTEXTS", "CONTEXT_ONLY", "GENERATED_RECIPES", "BenignLine", "Secret", "all_secrets",
           "benign_lines", "corpus_log", "leaked", "printable", "printed"]

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Secret:
    shape: str  # the gitleaks rule id, or context:<what> for context-only secrets
    source: str
    value: str
    fixture: str = ""  # the gitleaks fixture it comes from, as gitleaks' tests print it


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}.get(s[i + 1], s[i + 1]))
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def fixture_secrets() -> list[Secret]:
    out = []
    for line in (HERE / "gitleaks_fixtures.tsv").read_text().splitlines():
        rule, source, value, fixture = line.split("\t")
        out.append(Secret(rule, f"gitleaks v8.30.0 cmd/generate/config/rules/{source}", _unescape(value),
                          _unescape(fixture)))
    return out


_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"
#: gitleaks' generator recipes (rule id, generator file, prefix, alphabet, length), from the files named
GENERATED_RECIPES: list[tuple[str, str, str, str, int]] = [
    ("github-pat", "github.go", "ghp_", _ALNUM, 36),
    ("github-fine-grained-pat", "github.go", "github_pat_", _ALNUM + "_", 82),
    ("github-oauth", "github.go", "gho_", _ALNUM, 36),
    ("github-app-token", "github.go", "ghs_", _ALNUM, 36),
    ("github-refresh-token", "github.go", "ghr_", _ALNUM, 36),
    ("gitlab-pat", "gitlab.go", "glpat-", _ALNUM, 20),
    ("gitlab-runner-authentication-token", "gitlab.go", "glrt-", _ALNUM, 20),
    ("pypi-upload-token", "pypi.go", "pypi-AgEIcHlwaS5vcmc", _HEX, 64),
    ("npm-access-token", "npm.go", "npm_", _ALNUM, 36),
    ("gcp-api-key", "gcp.go", "AIza", _ALNUM + "_-", 35),
    ("aws-access-token", "aws.go", "AKIA", string.ascii_uppercase + "234567", 16),
    ("sendgrid-api-token", "sendgrid.go", "SG.", _ALNUM + "_-.=", 66),
    ("databricks-api-token", "databricks.go", "dapi", _HEX, 32),
    ("digitalocean-pat", "digitalocean.go", "dop_v1_", _HEX, 64),
    ("grafana-cloud-api-token", "grafana.go", "glc_", _ALNUM, 32),
]
_PER_RECIPE = 3


def generated_secrets() -> list[Secret]:
    rng = random.Random(31)
    out = []
    for rule, source, prefix, alphabet, length in GENERATED_RECIPES:
        for _ in range(_PER_RECIPE):
            value = prefix + "".join(rng.choice(alphabet) for _ in range(length))
            out.append(Secret(rule, f"gitleaks v8.30.0 cmd/generate/config/rules/{source} (recipe)", value))
    return out


#: (what, value): secrets known only by their context; made up for this corpus
CONTEXT_ONLY: list[tuple[str, str]] = [
    ("password", "Tr0ub4dor&3-fake"),
    ("password", "correct-horse-battery-staple"),
    ("password", "hunter2"),
    ("wandb-api-key", "0123456789abcdef0123456789abcdef01234567"),
    ("mlflow-password", "mlfl0w-Pa55"),
    ("registry-password", "r3g1stry!pass"),
    ("db-password", "s3cr3t-v@lue"),
    ("comet-api-key", "Q2xVbTtEmZuBvVzTF9KqY1Z3R"),
]


def context_only_secrets() -> list[Secret]:
    return [Secret(f"context:{what}", "made up for this corpus", value) for what, value in CONTEXT_ONLY]


def all_secrets() -> list[Secret]:
    return fixture_secrets() + generated_secrets() + context_only_secrets()


def printable(s: Secret) -> bool:
    """A secret that a context can print as it is (one line, no quotes or blanks)."""
    return not any(c in s.value for c in "\n\r\t \"'`\\{}")


#: (context name, template): ``{v}`` is the secret. Each is a line a workload prints.
CONTEXTS: list[tuple[str, Callable[[str], str]]] = [
    ("json kv", lambda v: f'{{"level": "info", "api_key": "{v}", "step": 10}}'),
    ("json escaped in json", lambda v: f'{{"msg": "config {{\\"client_secret\\": \\"{v}\\"}}"}}'),
    ("yaml kv", lambda v: f"  password: {v}"),
    ("yaml quoted", lambda v: f"  auth_token: '{v}'"),
    ("k8s env json", lambda v: f'{{"name": "DB_PASSWORD", "value": "{v}"}}'),
    ("k8s env python repr", lambda v: f"{{'name': 'WANDB_API_KEY', 'value': '{v}', 'value_from': None}}"),
    ("k8s env yaml", lambda v: f"    - name: HF_TOKEN\n      value: {v}"),
    ("python dict repr", lambda v: f"config={{'lr': 0.001, 'hf_token': '{v}', 'epochs': 3}}"),
    ("cli flag space", lambda v: f"launching: python train.py --api-key {v} --epochs 3"),
    ("cli flag equals", lambda v: f"cmd: torchrun --nproc 8 run.py --token={v}"),
    ("authorization bearer", lambda v: f"> GET /v1/models HTTP/1.1\n> Authorization: Bearer {v}"),
    ("authorization token scheme", lambda v: f'headers: {{"Authorization": "token {v}"}}'),
    ("authorization custom scheme", lambda v: f"Authorization: Klaviyo-API-Key {v}"),
    ("api key header", lambda v: f"X-Api-Key: {v}"),
    ("connection string password", lambda v: f"Server=tcp:db.example;Database=ml;User ID=sa;Password={v};Encrypt=true"),
    ("connection string account key",
     lambda v: f"DefaultEndpointsProtocol=https;AccountName=ckpts;AccountKey={v};EndpointSuffix=core.windows.net"),
    ("netrc", lambda v: f"machine api.wandb.ai login user password {v}"),
    ("netrc lines", lambda v: f"machine registry.example\n  login ci\n  password {v}"),
    ("url credentials", lambda v: f"git clone https://oauth2:{v}@gitlab.example/team/model.git"),
    ("pip index url", lambda v: f"Looking in indexes: https://__token__:{v}@pypi.example/simple"),
    ("shell export", lambda v: f'export HUGGING_FACE_HUB_TOKEN="{v}"'),
    ("env line", lambda v: f"NGC_API_KEY={v}"),
    ("npmrc", lambda v: f"//registry.npmjs.org/:_authToken={v}"),
    ("docker login", lambda v: f"+ docker login -u ci --password {v} registry.example"),
]


def printed(secrets: list[Secret] | None = None) -> Iterator[tuple[Secret, str, str]]:
    """(secret, context name, text) for every printable secret in every context, and every
    gitleaks fixture as gitleaks' own test prints it (``gitleaks fixture``)."""
    for s in secrets if secrets is not None else all_secrets():
        if printable(s):
            for name, template in CONTEXTS:
                yield s, name, template(s.value)
        if s.fixture:
            yield s, "gitleaks fixture", s.fixture


@dataclass(frozen=True)
class BenignLine:
    kind: str
    line: str
    #: substrings an analysis joins on: they must come through unchanged
    keep: tuple[str, ...]


def benign_lines(n_per_kind: int = 40) -> list[BenignLine]:
    """Lines GPU training and serving workloads, the kernel and the runtimes print, with no secret:
    loss values, checkpoint hashes, git commit ids, UUIDs, container ids, image digests (sha256 and
    base64), PCI ids, GPU UUIDs, NVRM Xid lines, tokenizer settings, token counts (generated,
    ``n_per_kind`` of each kind); and every line of the real published workload lines of
    tests/support/log_lines.py and of the kernel log fixtures (tests/fixtures/kernel)."""
    from tests.support import log_lines

    rng = random.Random(7)
    out: list[BenignLine] = [BenignLine("published workload line", line, ())
                             for quoted in log_lines.ALL for line in quoted.text.splitlines()]
    for fixture in sorted((HERE.parent.parent / "fixtures" / "kernel").iterdir()):
        out.extend(BenignLine("kernel fixture", line, ()) for line in fixture.read_text().splitlines())

    def hexs(n: int) -> str:
        return "".join(rng.choice(_HEX) for _ in range(n))

    def b64(n: int) -> str:
        return "".join(rng.choice(_ALNUM + "+/") for _ in range(n)) + "=="

    for i in range(n_per_kind):
        gpu = f"GPU-{uuid.UUID(int=rng.getrandbits(128))}"
        pci = f"00000000:{rng.randrange(256):02X}:00.0"
        cid = hexs(64)
        commit = hexs(40)
        digest = hexs(64)
        ckpt = hexs(64)
        run = str(uuid.UUID(int=rng.getrandbits(128)))
        loss = rng.random() * 4
        add = out.append
        add(BenignLine("loss", f"step {i * 50} | loss={loss:.4f} | lr=3.0e-04 | grad_norm={rng.random():.3f}"
                               f" | tokens/s={rng.randrange(10**5)} | max_tokens=4096", ()))
        add(BenignLine("checkpoint", f"saved checkpoint step_{i}.pt sha256={ckpt} ({rng.randrange(10**9)} bytes)", (ckpt,)))
        add(BenignLine("git commit", f"code version: git commit {commit} (dirty=False)", (commit,)))
        add(BenignLine("uuid", f"wandb: run id {run[:8]}; trace_id={run} request_id={uuid.uuid5(uuid.NAMESPACE_DNS, run)}",
                       (run,)))
        add(BenignLine("container id", f"container {cid} started; cgroup /kubepods/pod{run}/{cid}", (cid,)))
        add(BenignLine("image digest", f"Pulled image nvcr.io/nvidia/pytorch@sha256:{digest}", (digest,)))
        add(BenignLine("base64 digest", f"layer digest: {b64(42)} size {rng.randrange(10**8)}", ()))
        add(BenignLine("gpu uuid", f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {gpu})", (gpu,)))
        add(BenignLine("pci id", f"NVRM: Xid (PCI:{pci[4:]}): 79, pid={rng.randrange(10**5)}, name=python3,"
                                 " GPU has fallen off the bus.", (pci[4:],)))
        add(BenignLine("nvidia-smi", f"{pci} {gpu} 81559MiB  {rng.randrange(100)}%", (pci, gpu)))
        add(BenignLine("tokenizer", "tokenizer: pad_token=<pad> eos_token=</s> bos_token=<s> "
                                    f"vocab_size=32000 total_tokens={rng.randrange(10**7)}", ()))
        add(BenignLine("openai error", "openai.AuthenticationError: Error code: 401 - {'error': {'message': "
                                       "'Incorrect API key provided', 'type': 'invalid_request_error'}}", ("Error code",)))
        add(BenignLine("nccl", f"NCCL INFO comm 0x{hexs(12)} rank {i % 8} nranks 8 cudaDev {i % 8} busId {pci[4:-2]}"
                               " - Init COMPLETE", ()))
        add(BenignLine("placeholder", "HF_TOKEN not set; using anonymous access (token=None)", ()))
        add(BenignLine("secret-like words", f"KeyError: 'model.layers.{i}.mlp.weight'; cache_key=step{i}; "
                                            f"sort_key=loss; secret_name: regcred; passed={i} failed=0", ()))
        add(BenignLine("auth prose", f"authentication succeeded for user ci (x-request-id: {run}); "
                                     "Bearer token expired, refreshing; use_auth_token=True", (run,)))
        add(BenignLine("hf hub", f"Downloading tokenizer_config.json from revision {commit}: token_type_ids kept",
                       (commit,)))
        add(BenignLine("kernel", f"[{rng.random() * 10**5:.6f}] Memory cgroup out of memory: Killed process "
                                 f"{rng.randrange(10**5)} (python) total-vm:{rng.randrange(10**8)}kB", ()))
    return out


def corpus_log() -> str:
    """Every printed text of the corpus, one after another: what a workload prints in the
    real-container tests."""
    return "\n".join(text for _, _, text in printed()) + "\n"


def leaked(blob: bytes, secrets: list[Secret] | None = None) -> list[Secret]:
    """The secrets whose value is anywhere in ``blob`` (a whole bundle's bytes)."""
    return [s for s in secrets if s.value.encode() in blob] if secrets is not None else \
        [s for s in all_secrets() if s.value.encode() in blob]
