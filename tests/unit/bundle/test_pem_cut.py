"""A PEM block a log's window cut in two: the capture keeps a log's newest lines (``--tail``, the
kubelet's ``tailLines``, the byte cap), so its first kept line may be in the middle of a private
key, and a log still being written may end inside one. The body lines on either side of the cut
are redacted as a whole block's are, their armour line kept; a PEM block printed base64-encoded
(a kubeconfig's ``client-key-data``, a Secret's ``tls.key``) is redacted whole."""

from __future__ import annotations

import base64

import pytest

from forensics.bundle.redact import Redactor

KEY = b"k" * 32
BODY = ["MIIEpAIBAAKCAQEAn6/O8li+SX4m98LLYt/PKSzEmQ++ZBD7Loh9P13f4yQ92EF3",
        "ZBD7Loh9P13f4yQ92EF3MIIEpAIBAAKCAQEAn6/O8li+SX4m98LLYt/PKSzEmQ++",
        "li+SX4m98LLYt/PKSzEmQ+="]
BEGIN, END = "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----"


def _stamped(lines: list[str]) -> str:
    return "".join(f"2026-12-06T10:00:0{i % 10}.123456789Z {line}\n" for i, line in enumerate(lines))


def _leaks(out: str) -> list[str]:
    return [b for b in BODY if b in out] + [b[:24] for b in BODY if b[:24] in out]


@pytest.mark.parametrize("stamped", [False, True])
def test_a_block_whose_begin_line_was_cut_off(stamped: bool) -> None:
    lines = [*BODY, END, "server listening on :8443"]
    text = _stamped(lines) if stamped else "\n".join(lines) + "\n"
    out = Redactor(key=KEY).text(text)
    assert not _leaks(out), out
    assert END in out and "server listening on :8443" in out


@pytest.mark.parametrize("stamped", [False, True])
def test_a_block_whose_end_was_not_written_yet(stamped: bool) -> None:
    lines = ["loading the key", BEGIN, *BODY[:2], BODY[2][:10]]
    text = _stamped(lines) if stamped else "\n".join(lines)
    out = Redactor(key=KEY).text(text)
    assert not _leaks(out) and BODY[2][:10] not in out, out
    assert "loading the key" in out and BEGIN in out


def test_whole_blocks_and_text_after_a_cut_block_are_as_before() -> None:
    r = Redactor(key=KEY)
    whole = "\n".join(["key:", BEGIN, *BODY, END, "after"])
    out = r.text(whole)
    assert out.startswith(f"key:\n{BEGIN}<redacted:") and out.endswith(f"{END}\nafter")
    cut = "\n".join([*BODY[1:], END, "GET /healthz 200", "batch 7 loss 0.31"])
    out = r.text(cut)
    assert out.endswith(f"{END}\nGET /healthz 200\nbatch 7 loss 0.31") and not _leaks(out), out


def test_base64_encoded_pem_is_redacted() -> None:
    pem = "\n".join([BEGIN, *BODY, END]) + "\n"
    b64 = base64.b64encode(pem.encode()).decode()
    for line in (f"    client-key-data: {b64}", f'{{"tls.key": "{b64}"}}', f"key={b64}"):
        out = Redactor(key=KEY).text(line)
        assert b64[:40] not in out and "<redacted:" in out, out


def test_base64_words_that_are_no_pem_are_kept() -> None:
    line = "image digest sha256:LS0tLS1 and the word LS0tLS1CRUdJTi alone"
    assert Redactor(key=KEY).text(line) == line


def test_a_json_escaped_block_cut_on_its_line() -> None:
    escaped = "\\n".join(BODY)
    r = Redactor(key=KEY)
    for line in (f'{{"private_key": "{BEGIN}\\n{escaped}', f'{escaped}\\n{END}\\n", "client_email": "a@b.c"}}'):
        out = r.text(line)
        assert not _leaks(out), out
    assert r.text(f'x {escaped}\\n{END}\\n"').startswith("x <redacted:")


def test_an_end_line_of_a_report_is_no_cut_key() -> None:
    """An armour-like line that names no key, after a few words, takes nothing: they are evidence."""
    text = "Summary\nPASSED\n-----END OF REPORT-----\n-----BEGIN SECTION-----\nOK\ndone\n"
    assert Redactor(key=KEY).text(text) == text
