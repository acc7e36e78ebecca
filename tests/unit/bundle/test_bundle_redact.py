"""Redaction (forensics/bundle/redact.py): what a reader of a bundle must never see, and what stays."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.bundle.redact import Redactor, looks_secret_name
from forensics.bundle.redact_kubernetes import redact_pod_spec_env
from forensics.bundle.secrets.names import looks_secret_value

PSEUDO = re.compile(r"<redacted:[0-9a-f]{16}>")
KEY = b"k" * 32


class TestArgv:
    def test_secret_options_are_pseudonymised_and_others_kept(self) -> None:
        r = Redactor(key=KEY)
        out = r.argv(["python", "train.py", "--password=hunter2", "--token", "abc123",
                      "--lr=0.1", "DB_PASSWORD=xyz", "--epochs", "3"])
        assert out[:2] == ["python", "train.py"]
        assert PSEUDO.fullmatch(out[2].removeprefix("--password="))
        assert out[3] == "--token" and PSEUDO.fullmatch(out[4])
        assert out[5] == "--lr=0.1"
        assert PSEUDO.fullmatch(out[6].removeprefix("DB_PASSWORD="))
        assert out[7:] == ["--epochs", "3"]
        joined = " ".join(out)
        for secret in ("hunter2", "abc123", "xyz"):
            assert secret not in joined

    def test_url_credentials_inside_an_argument(self) -> None:
        r = Redactor(key=KEY)
        out = r.argv(["psql", "postgres://admin:s3cr3t@db:5432/prod"])
        assert "s3cr3t" not in out[1]
        assert out[1].startswith("postgres://admin:<redacted:") and out[1].endswith("@db:5432/prod")

    def test_short_flags_are_not_guessed(self) -> None:
        """``-p secret`` is documented as not guessed at (too many false positives)."""
        assert Redactor(key=KEY).argv(["mysql", "-p", "secret"]) == ["mysql", "-p", "secret"]

    def test_no_redact_passes_everything_through(self) -> None:
        args = ["x", "--password=hunter2", "--token", "abc", "https://u:p@h/"]
        r = Redactor(enabled=False)
        assert r.argv(args) == args
        assert r.summary()["enabled"] is False and r.summary()["counts"] == {}


class TestEnv:
    def test_allow_listed_gpu_variables_are_evidence_and_kept(self) -> None:
        r = Redactor(key=KEY)
        env = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
               "CUDA_VISIBLE_DEVICES=0,1", "NCCL_DEBUG=INFO", "PATH=/usr/bin", "LD_LIBRARY_PATH=/usr/lib"]
        assert r.env_list(env) == env
        assert r.counts == {}

    def test_other_values_are_redacted_names_kept(self) -> None:
        r = Redactor(key=KEY)
        out = r.env_list(["AWS_SECRET_ACCESS_KEY=AKIAxyz", "FOO=bar", "EMPTY=", "NOEQUALS"])
        assert out is not None
        assert out[0].startswith("AWS_SECRET_ACCESS_KEY=<redacted:") and "AKIAxyz" not in out[0]
        assert out[1].startswith("FOO=<redacted:")
        assert out[2:] == ["EMPTY=", "NOEQUALS"]
        assert r.counts["env"] == 2

    def test_a_secret_name_under_an_allowed_prefix_is_redacted(self) -> None:
        """``NVIDIA_API_KEY`` (NVIDIA's API catalog and NIM containers) and ``NCCL_IB_AUTH`` start
        like the GPU variables kept as evidence, but their names say secret: their values are
        redacted in every env form; the GPU grants and exact allow-listed names (``PWD``) stay."""
        r = Redactor(key=KEY)
        key = "nvapi-Xy7aB3kLmN0pQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz012345"
        out = r.env_list([f"NVIDIA_API_KEY={key}", "NCCL_IB_AUTH=s3cr3tval", "LC_SESSION_TOKEN=abc123def",
                          "NVIDIA_VISIBLE_DEVICES=GPU-0a1b", "CUDA_VISIBLE_DEVICES=1", "PWD=/workspace"])
        assert out is not None
        assert [e.split("=", 1)[1].startswith("<redacted:") for e in out] == [True] * 3 + [False] * 3, out
        assert out[3:] == ["NVIDIA_VISIBLE_DEVICES=GPU-0a1b", "CUDA_VISIBLE_DEVICES=1", "PWD=/workspace"]
        pod = {"spec": {"containers": [{"name": "nim", "env": [{"name": "NVIDIA_API_KEY", "value": key}]}]}}
        redact_pod_spec_env(pod["spec"], r)
        assert key not in json.dumps(pod)
        assert key not in r.text(json.dumps({"env": [{"name": "NVIDIA_API_KEY", "value": key}]}))

    def test_none_and_non_strings(self) -> None:
        r = Redactor(key=KEY)
        assert r.env_list(None) is None
        assert r.env_list([5, "A=b"])[0] == 5  # type: ignore[list-item,index]

    def test_env_map_and_json_env_lists(self) -> None:
        r = Redactor(key=KEY)
        assert r.env_map({"NVIDIA_VISIBLE_DEVICES": "0", "TOKEN": "t0k"})["NVIDIA_VISIBLE_DEVICES"] == "0"
        doc = {"Config": {"Env": ["TOKEN=t0k", "CUDA_VISIBLE_DEVICES=1"]}, "Other": {"Env": ["X=1"]}}
        r.json_env_lists(doc, ("Config", "Env"), ("Missing", "Env"))
        assert doc["Config"]["Env"][0].startswith("TOKEN=<redacted:")
        assert doc["Config"]["Env"][1] == "CUDA_VISIBLE_DEVICES=1"
        assert doc["Other"]["Env"] == ["X=1"]  # not named: untouched


class TestText:
    @pytest.mark.parametrize("text,secret", [
        ("connect https://bob:pa55w0rd@registry.example/v2", "pa55w0rd"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9.payload.sig"),
        ("api_key=0123456789abcdef", "0123456789abcdef"),
        ("DB_PASSWORD: hunter2", "hunter2"),
        ("BOOT_IMAGE=/vmlinuz root=/dev/sda1 secret_token=deadbeef quiet", "deadbeef"),
    ])
    def test_secrets_in_free_text(self, text: str, secret: str) -> None:
        out = Redactor(key=KEY).text(text)
        assert secret not in out
        assert PSEUDO.search(out)

    @pytest.mark.parametrize("text,secret_words", [
        ("sh -c \"mysql --password='my secret phrase' db\"", ("my secret", "secret", "phrase")),
        ('PGPASSWORD="hunter 2" psql', ("hunter", " 2")),
    ])
    def test_quoted_values_with_spaces_are_redacted_whole(self, text: str, secret_words: tuple[str, ...]) -> None:
        out = Redactor(key=KEY).text(text)
        for w in secret_words:
            assert w not in out, out
        assert PSEUDO.search(out)

    def test_ordinary_text_unchanged(self) -> None:
        r = Redactor(key=KEY)
        for s in ("monkey=1 keyboard=2", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet", "nvidia-smi -q", ""):
            assert r.text(s) == s
        assert r.counts == {}

    def test_already_redacted_is_not_redacted_twice(self) -> None:
        r = Redactor(key=KEY)
        once = r.text("password=hunter2")
        assert r.text(once) == once
        assert r.counts["text"] == 1


class TestPseudonyms:
    def test_stable_within_one_redactor(self) -> None:
        r = Redactor()
        a = r.argv(["--token=shared-token"])[0]
        b = r.env_list(["API_TOKEN=shared-token"])[0].partition("=")[2]  # type: ignore[index]
        c = r.text("token=shared-token")
        assert a.partition("=")[2] == b == c.partition("=")[2]
        assert r.pseudonym("one") != r.pseudonym("two")

    def test_different_across_redactors(self) -> None:
        """A per-capture random key: two captures' pseudonyms cannot be compared."""
        assert Redactor().pseudonym("same-secret") != Redactor().pseudonym("same-secret")

    def test_same_key_same_pseudonym(self) -> None:
        assert Redactor(key=KEY).pseudonym("s") == Redactor(key=KEY).pseudonym("s")

    def test_counts_per_category_in_summary_never_values(self) -> None:
        r = Redactor(key=KEY)
        r.argv(["--password=a", "--token", "b"])
        r.env_list(["X=1", "Y=2", "Z=3"])
        r.text("secret=c")
        s = r.summary()
        assert s["enabled"] is True
        assert s["counts"] == {"argv": 2, "env": 3, "text": 1}
        flat = repr(s)
        for v in ("'a'", "'b'", "'c'"):
            assert v not in flat


def test_secret_name_detection() -> None:
    for name in ("DB_PASSWORD", "--api-token", "aws_secret_access_key", "GITHUB_TOKEN", "passwd", "--private-key"):
        assert looks_secret_name(name), name
    for name in ("monkey", "keyboard", "HOSTNAME", "--epochs", "-", ""):
        assert not looks_secret_name(name), name


# -- properties ------------------------------------------------------------------------------

_values = st.text(min_size=1, max_size=64).filter(lambda v: not PSEUDO.fullmatch(v))
_plain = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc"), blacklist_characters="\"',;&"),
                 min_size=1, max_size=64).filter(
    # "Bearer"/"Basic" after "auth...:" are the scheme word, deliberately kept (the token is redacted)
    lambda v: not v.startswith("<redacted:") and v.lower() not in ("bearer", "basic")  # pseudonym-like values are kept on purpose
    and looks_secret_value(v))  # placeholders (None, ***, ${VAR}, <your key>, x) hold no secret: kept


@settings(max_examples=300, deadline=None)
@given(before=st.lists(st.text(max_size=20), max_size=4), value=_values,
       after=st.lists(st.text(max_size=20), max_size=4))
def test_argv_never_leaks_a_password_option(before: list[str], value: str, after: list[str]) -> None:
    r = Redactor(key=KEY)
    out = r.argv([*before, f"--password={value}", *after])
    assert PSEUDO.fullmatch(out[len(before)].removeprefix("--password="))
    assert len(out) == len(before) + 1 + len(after)


@settings(max_examples=300, deadline=None)
@given(prefix=st.text(alphabet="abcXYZ_- 019", max_size=30), value=_plain,
       suffix=st.text(alphabet="abcXYZ_- 019", max_size=30))
def test_text_never_leaks_a_password_option(prefix: str, value: str, suffix: str) -> None:
    out = Redactor(key=KEY).text(f"{prefix} --password={value} {suffix}")
    tokens = out.split()
    assert f"--password={value}" not in tokens
    for tok in tokens:
        if tok.startswith("--password="):
            assert PSEUDO.fullmatch(tok.removeprefix("--password=")), out


@settings(max_examples=200, deadline=None)
@given(value=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\"'\n"),
                     min_size=1, max_size=40).filter(
    lambda v: not v.startswith("<redacted:") and v.lower() not in ("bearer", "basic")  # pseudonym-like kept on purpose
    and looks_secret_value(v)),  # placeholders hold no secret: kept
       quote=st.sampled_from(["'", '"']))
def test_text_never_leaks_a_quoted_password(value: str, quote: str) -> None:
    out = Redactor(key=KEY).text(f"run --password={quote}{value}{quote} now")
    assert out.startswith("run --password=" + quote + "<redacted:") and out.endswith(quote + " now"), out


@settings(max_examples=300, deadline=None)
@given(s=st.text(max_size=300))
def test_redaction_never_raises(s: str) -> None:
    r = Redactor(key=KEY)
    assert isinstance(r.text(s), str)
    assert len(r.argv(s.split(" "))) == len(s.split(" "))
    r.env_list([s, f"{s}={s}"])
    assert Redactor(enabled=False).text(s) == s


JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n"
       "-----END PRIVATE KEY-----")


class TestLabels:
    @pytest.mark.parametrize("key", [
        "token", "TOKEN", "db.password", "db-passwd", "DB_PASSWORD", "dbPassword", "api_key", "apiKey",
        "com.example.secret", "aws.credentials", "x-auth", "Authorization", "session-id", "cookie",
        "vault.hashicorp.com/agent-inject-token", "SSH_KEY", "private-key", "example.com/client-secret",
        "SessionID",
    ])
    def test_a_secret_looking_key_loses_its_value_and_keeps_the_key(self, key: str) -> None:
        r = Redactor(key=KEY)
        labels = {key: "tok-1234", "app": "trainer"}
        assert r.label_map(labels) is labels  # in place
        assert PSEUDO.fullmatch(labels[key]) and labels["app"] == "trainer"
        assert r.counts == {"labels": 1}

    @pytest.mark.parametrize("key", [
        "io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid",
        "io.kubernetes.container.name", "com.docker.compose.project", "app.kubernetes.io/name",
        "org.opencontainers.image.authors", "org.opencontainers.image.source", "maintainer",
        "pod-template-hash", "image", "name", "exitCode",
    ])
    def test_attribution_and_well_known_keys_stay_readable(self, key: str) -> None:
        """The analyzer joins containers to pods by ``io.kubernetes.*``; OCI ``authors`` holds an
        e-mail address, not a credential, though it contains "auth"."""
        r = Redactor(key=KEY)
        assert r.label_map({key: "Jane Doe <jane@example.com>"}) == {key: "Jane Doe <jane@example.com>"}
        assert r.counts == {}

    @pytest.mark.parametrize("key", [
        "tokenizer", "max_tokens", "pad_token", "cert-manager.io/issuer-name", "cert-manager.io/cluster-issuer",
        "private-registry", "private.repo", "tls.cert", "monkey", "keyboard-layout", "sort_key", "key",
        "session", "authors", "auth.enabled", "secret_name", "password_file", "example.com/token-ttl",
        "vault.hashicorp.com/agent-inject-secret-db",
    ])
    def test_a_key_that_only_holds_a_secret_word_keeps_its_value(self, key: str) -> None:
        """Keys are judged by the name they end in, not by a word somewhere inside them: these hold
        evidence (a model's tokenizer, a certificate issuer, a registry, a Vault secret's path)."""
        r = Redactor(key=KEY)
        assert r.label_map({key: "llama-3-bpe.v2"}) == {key: "llama-3-bpe.v2"}
        assert r.counts == {}

    @pytest.mark.parametrize(("key", "value"), [
        ("auth", "enabled"), ("token", "true"), ("api-key", "$API_KEY"), ("x-auth", "3"),
        ("example.com/password", "<redacted:0123456789abcdef>"),
    ])
    def test_a_placeholder_under_a_secret_key_is_kept(self, key: str, value: str) -> None:
        r = Redactor(key=KEY)
        assert r.label_map({key: value}) == {key: value}

    def test_a_credential_under_a_harmless_key_is_still_caught_by_its_shape(self) -> None:
        r = Redactor(key=KEY)
        out = r.label_map({"tokenizer": JWT, "cert-manager.io/issuer": "Bearer abcdefgh12345678"})
        assert JWT not in out["tokenizer"] and "abcdefgh12345678" not in out["cert-manager.io/issuer"]

    def test_the_allow_list_is_exact_not_a_prefix(self) -> None:
        r = Redactor(key=KEY)
        out = r.label_map({"org.opencontainers.image.authors.token": "tok-1"})
        assert PSEUDO.fullmatch(out["org.opencontainers.image.authors.token"])

    @pytest.mark.parametrize(("value", "secret"), [
        (JWT, JWT),
        ("id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
        ("ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
        (PEM, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
        ("Bearer abcdefgh12345678", "abcdefgh12345678"),
        ("https://deploy:hunter22@git.example.com/repo.git", "hunter22"),
    ])
    def test_credential_shaped_values_are_caught_whatever_the_key(self, value: str, secret: str) -> None:
        r = Redactor(key=KEY)
        out = r.label_map({"note": value})
        assert secret not in out["note"] and PSEUDO.search(out["note"])
        assert r.counts["labels"] >= 1

    def test_pem_keeps_its_armour_lines(self) -> None:
        out = Redactor(key=KEY).text(f"cert:\n{PEM}\nafter")
        assert out.startswith("cert:\n-----BEGIN PRIVATE KEY-----<redacted:")
        assert out.endswith(">-----END PRIVATE KEY-----\nafter")

    def test_things_that_only_resemble_credentials_are_kept(self) -> None:
        r = Redactor(key=KEY)
        kept = {"note": "AKIA is a prefix", "ver": "eyJ", "sha": "sha256:" + "a" * 64,
                "uid": "0f5a3c1e-2b8d-4e6f-9a7b-1c2d3e4f5a6b"}
        assert r.label_map(dict(kept)) == kept
        assert r.counts == {}

    def test_one_value_under_a_label_and_an_env_var_gets_one_pseudonym(self) -> None:
        r = Redactor(key=KEY)
        (env,) = r.env_list(["API_TOKEN=tok-shared-1"]) or []
        label = r.label_value("token", "tok-shared-1")
        attr = r.label_map({"token": "tok-shared-1"}, "labels")["token"]
        assert env.removeprefix("API_TOKEN=") == label == attr

    def test_non_strings_and_no_redact(self) -> None:
        assert Redactor(key=KEY).label_map({"token": 3, "key": None}) == {"token": 3, "key": None}
        r = Redactor(enabled=False)
        assert r.label_map({"token": "tok-1", "note": JWT}) == {"token": "tok-1", "note": JWT}
        assert r.label_map(None) is None and r.label_map(["x"]) == ["x"]


def test_text_remembers_only_what_it_left_unchanged() -> None:
    r = Redactor(key=b"k" * 32)
    secret = "postgres://app:hunter2@db:5432/x"
    first, second = r.text(secret, "labels"), r.text(secret, "labels")
    assert first == second and "hunter2" not in first
    assert r.counts["labels"] == 2  # a redacted text is redacted (and counted) every time
    clean = "io.kubernetes.pod.name=trainer-0"
    assert r.text(clean) == clean and r.text(clean) == clean
    assert sum(r.counts.values()) == 2


def test_command_line_options_that_only_contain_a_secret_word_are_kept() -> None:
    """``--tokenizer``, ``--max-tokens``: the option's last word decides (they redacted the model
    name and the count that followed them before)."""
    args = ["vllm", "serve", "--tokenizer", "meta-llama/Llama-3-8B", "--max-tokens", "4096",
            "--hf-token", "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"]
    out = Redactor(key=KEY).argv(args)
    assert out[:7] == args[:7] and PSEUDO.fullmatch(out[7])


@pytest.mark.parametrize("value", ["${API_KEY}", "$(cat /run/secrets/token)", "\"${HF_TOKEN}\"", "${API_KEY}.", "{{ .Values.token }}"])
def test_a_placeholder_ending_in_its_own_bracket_holds_no_secret(value: str) -> None:
    # the trailing '}' or ')' was cut before the placeholder check: '${API_KEY' matched no
    # placeholder, and a config's or a log's '${API_KEY}' was redacted as a secret
    assert not looks_secret_value(value)
    assert looks_secret_value("s3cr3t-Pa55w0rd}")  # a real value ending in a bracket is still one
