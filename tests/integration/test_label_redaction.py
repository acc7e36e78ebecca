"""No secret reaches the bundle or any report: real containers with secrets in labels, env,
logs and an exec command line, captured through the real CLI with a sampling window (so the
window's events, with ``Actor.Attributes`` copying every label, and ``inspect-end.json`` exist
too), then analysed into every report format. Every member and every report (the PDF through
``pdftotext``) is searched for every secret: zero hits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from forensics.bundle.reader import Bundle, open_bundle
from forensics.bundle.writer import STAGING_PREFIX
from tests.support.docker_engine import BUSYBOX_IMAGE, DockerEngine

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJnZi1sYWJlbC10ZXN0In0."
       "c2lnbmF0dXJlLW9mLXRoZS1sYWJlbC10b2tlbg")
PEM_BODY = "MIIBOgIBAAJBAKjGfLabelRedactionTestBody0123456789"
SECRETS = {
    "label token": "tok-LABEL-9f3a61",
    "label db-password": "pw-LABEL-77c0de",
    "label JWT under a plain key": JWT,
    "label AWS key id": "AKIAGFTESTKEY0000001",
    "label URL credentials": "pw-URL-5521ab",
    "label PEM body": PEM_BODY,
    "window container label": "tok-WINDOW-0b5e2c",
    "label api-key under a prefix": "key-LABEL-5d19e0",
    "env token": "tok-ENV-4242aa",
    "log bearer": "bearerLOG8c1d2e3f",
    "log PEM body": "MIIBOgLogPemBodyRedaction9876543210",
    "exec password": "pw-EXEC-31f00d",
}

#: labels whose key holds a secret's word without naming a secret: evidence, kept as they are
HARMLESS = {"tokenizer": "llama-3-bpe", "cert-manager.io/cluster-issuer": "letsencrypt-prod",
            "private-registry": "registry.internal:5000", "max_tokens": "4096", "auth.enabled": "true"}


@dataclass
class Captured:
    bundle: Bundle
    path: Path
    reports: dict[str, Path]
    ids: dict[str, str]


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUFORENSICS_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "forensics", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def captured(docker_engine: DockerEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Captured]:
    e = docker_engine
    tag = uuid.uuid4().hex[:8]
    ids: dict[str, str] = {}
    log_script = (
        f"echo 'GET /api Authorization: Bearer {SECRETS['log bearer']}'; "
        f"printf -- '-----BEGIN RSA PRIVATE KEY-----\\n{SECRETS['log PEM body']}\\n-----END RSA PRIVATE KEY-----\\n'; "
        "exec sleep 600"
    )
    pem = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----"
    try:
        ids["labelled"] = e.run_labelled(
            "run", "-d", "--name", f"gf-{tag}-labelled", "--network", "none",
            "--label", f"token={SECRETS['label token']}",
            "--label", f"com.example.db-password={SECRETS['label db-password']}",
            "--label", f"note={JWT}",
            "--label", f"aws.id={SECRETS['label AWS key id']}",
            "--label", f"git=https://deploy:{SECRETS['label URL credentials']}@git.example.com/r.git",
            "--label", f"tls={pem}",
            "--label", f"example.com/api-key={SECRETS['label api-key under a prefix']}",
            *(a for k, v in HARMLESS.items() for a in ("--label", f"{k}={v}")),
            "--label", "io.kubernetes.pod.name=trainer-0",
            "--label", "org.opencontainers.image.authors=Jane Doe <jane@example.com>",
            "-e", f"API_TOKEN={SECRETS['env token']}",
            BUSYBOX_IMAGE, "sh", "-c", log_script)
        out = tmp_path_factory.mktemp("label-bundle")
        proc = subprocess.Popen(
            [sys.executable, "-m", "forensics", "capture", "-o", str(out), "--duration", "6",
             "--interval", "1", "--skip", "kubernetes,nvml", "--set", f"docker.host={e.docker_host}",
             "--quiet"],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not list(out.glob(f"{STAGING_PREFIX}*/docker/containers.json")):
                time.sleep(0.1)
            time.sleep(1.5)  # the snapshot is done and the window is open: act inside it
            ids["window"] = e.run_labelled(
                "run", "-d", "--name", f"gf-{tag}-window", "--network", "none",
                "--label", f"session.token={SECRETS['window container label']}", BUSYBOX_IMAGE, "sleep", "600")
            e.cli("exec", ids["labelled"], "sh", "-c", f"true --password={SECRETS['exec password']}")
            stdout, stderr = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
        path = Path(stdout.strip())
        reports_dir = out / "reports"
        res = _cli("analyze", str(path), "-f", "html,md,json,pdf", "-o", str(reports_dir) + "/")
        assert res.returncode in (0, 1), res.stderr
        reports = {p.suffix.lstrip("."): p for p in reports_dir.iterdir()}
        yield Captured(open_bundle(path), path, reports, ids)
    finally:
        for cid in ids.values():
            e.cli("rm", "-f", cid, check=False)


def test_the_labels_and_events_were_captured(captured: Captured) -> None:
    """The test means something only if the members it searches hold the labelled objects."""
    b = captured.bundle
    lab, win = captured.ids["labelled"], captured.ids["window"]
    labels = b.read_json(f"docker/containers/{lab}/inspect.json")["Config"]["Labels"]
    assert labels["io.kubernetes.pod.name"] == "trainer-0"  # attribution evidence stays readable
    assert labels["org.opencontainers.image.authors"] == "Jane Doe <jane@example.com>"
    assert labels["token"].startswith("<redacted:")
    assert labels["tls"].startswith("-----BEGIN PRIVATE KEY-----<redacted:")
    assert {k: labels[k] for k in HARMLESS} == HARMLESS  # judged by the name a key ends in, not a word in it
    listing = {c["Id"]: c for c in b.read_json("docker/containers.json")}
    assert listing[lab]["Labels"]["token"] == labels["token"]  # one value, one pseudonym
    window = [line for _, line in b.iter_jsonl("docker/window/events.jsonl")]
    attrs = [ev["Actor"]["Attributes"] for ev in window if ev.get("Actor", {}).get("ID") == win]
    assert attrs and all(a["session.token"].startswith("<redacted:") for a in attrs)
    assert any(ev.get("Action", "").startswith("exec_") for ev in window)
    assert b.has(f"docker/containers/{win}/inspect-end.json")
    counts = b.manifest["redaction"]["counts"]
    assert counts.get("labels", 0) >= 6 and counts.get("env", 0) >= 1
    assert set(captured.reports) == {"html", "md", "json", "pdf"}


def test_no_secret_in_any_member(captured: Captured) -> None:
    b = captured.bundle
    hits = [(name, what) for name in ["manifest.json", *b.names()]
            for data in [b.read_bytes(name) if name != "manifest.json" else str(b.manifest).encode()]
            for what, secret in SECRETS.items() if secret.encode() in data]
    assert hits == [], hits


def test_no_secret_in_any_report(captured: Captured) -> None:
    pdftotext = shutil.which("pdftotext")
    assert pdftotext, "pdftotext (poppler-utils) is needed to read the PDF report"
    texts = {fmt: p.read_text(encoding="utf-8") for fmt, p in captured.reports.items() if fmt != "pdf"}
    texts["pdf"] = subprocess.run([pdftotext, str(captured.reports["pdf"]), "-"], capture_output=True,
                                  text=True, timeout=120, check=True).stdout
    assert len(texts["pdf"]) > 200
    hits = [(fmt, what) for fmt, text in texts.items() for what, secret in SECRETS.items() if secret in text]
    assert hits == [], hits
