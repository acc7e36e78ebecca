"""The part of a token a cut left at a text's edge (forensics/bundle/secrets/cut.py), redacted only
at an edge the caller says was cut."""

from __future__ import annotations

import pytest

from forensics.bundle.redact import Redactor
from forensics.bundle.secrets.cut import cut_edge_spans

KEY = b"k" * 32


@pytest.mark.parametrize("text", [
    "push with ghp_a1B2c3D4e5F6", "HF_TOKEN is hf_AbCdEfGh", "slack xoxb-1234-56", "key AKIAIOSF",
    "session eyJhbGciOiJIUzI1NiJ9.eyJzdWIi", "openai key sk-proj-a1b2",
])
def test_a_token_cut_at_the_end_is_redacted_only_when_the_end_was_cut(text: str) -> None:
    r = Redactor(key=KEY)
    head = text.rsplit(" ", 1)[1][:4]
    out = r.text(text, "logs", cut_end=True)
    assert out.endswith(">") and head not in out.rsplit(" ", 1)[1]
    assert r.text(text, "logs") == text  # a part has no shape: only the cut says it is a token's


@pytest.mark.parametrize("text", [
    "loading hf_", "done.", "tokenizer ghp", "in xghp_abc", "count 12345",
])
def test_endings_that_hold_no_cut_token_are_kept(text: str) -> None:
    assert Redactor(key=KEY).text(text, "logs", cut_end=True) == text


def test_a_cut_start_loses_a_token_tail_and_keeps_a_word_or_a_number() -> None:
    r = Redactor(key=KEY)
    assert r.text("F6g7H8i9J0k1L2 pushed", "logs", cut_start=True).startswith("<redacted:")
    assert r.text("F6g7H8i9J0k1L2 pushed", "logs") == "F6g7H8i9J0k1L2 pushed"  # not cut: kept
    for text in ("ializing model", "0042 steps", "x" * 2000 + "1 y"):
        assert r.text(text, "logs", cut_start=True) == text
    assert cut_edge_spans(b"", cut_start=True, cut_end=True) == []
