"""The ``-p`` password of programs known to take one there (forensics/bundle/secrets/programs.py):
``mysql -pX`` and ``docker login -p X`` are redacted in command lines and in logs; ``ssh -p 22``,
``mysql -p db`` (a prompt, then the database) and ``--password-stdin`` keep their neighbours."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.bundle.redact import Redactor
from forensics.collectors.procfs import ProcfsCollector
from tests.support.host_evidence import DOCKER_SCOPE, fake_process, make_context

KEY = b"k" * 32
SECRET = "S3cr3tPassw0rd"


@pytest.mark.parametrize("args", [
    ["mysql", "-uroot", f"-p{SECRET}", "orders"],
    ["/usr/bin/mysqldump", "-h", "db", f"-p{SECRET}", "orders"],
    ["mariadb", f"-p{SECRET}"],
    ["docker", "login", "-p", SECRET, "-u", "ci", "registry.example.com"],
    ["podman", "login", f"-p{SECRET}", "registry.example.com"],
    ["nerdctl", "login", f"-p={SECRET}", "registry.example.com"],
    ["helm", "registry", "login", "registry.example.com", "-u", "ci", "-p", SECRET],
    ["skopeo", "login", "-u", "ci", "-p", SECRET, "quay.io"],
    ["sudo", "-u", "ci", "docker", "login", "-p", SECRET, "ghcr.io"],
    ["docker", "login", "--password", SECRET, "ghcr.io"],
])
def test_a_known_programs_password_never_reaches_the_argv(args: list[str]) -> None:
    out = Redactor(key=KEY).argv(args)
    assert len(out) == len(args)
    assert not any(SECRET in a for a in out), out
    assert sum("<redacted:" in a for a in out) == 1, out  # the password alone: its neighbours kept
    kept = [a for a, b in zip(args, out, strict=True) if a == b]
    assert kept == [a for a in args if SECRET not in a]


@pytest.mark.parametrize("args", [
    ["ssh", "-p", "2222", "node-7"],           # a port
    ["python", "-p", "train.py"],              # not a password option
    ["mysql", "-p", "orders"],                 # -p alone prompts: "orders" is the database
    ["docker", "run", "-p", "8080:80", "img"],  # a port mapping, not a login
    ["docker", "login", "--password-stdin", "-u", "ci", "ghcr.io"],  # takes no value
    ["scp", "-P", "22", "-p", "a", "b"],
])
def test_other_p_options_and_their_neighbours_are_kept(args: list[str]) -> None:
    assert Redactor(key=KEY).argv(args) == args


@pytest.mark.parametrize("line", [
    f"+ mysql -uroot -p{SECRET} orders < dump.sql",
    f"running: docker login -u ci -p {SECRET} registry.example.com",
    f'exec helm registry login r.example.com -p "{SECRET}"',
    f"2026-12-06T10:00:00Z sh -c 'podman login -p={SECRET} quay.io && podman pull x'",
])
def test_a_known_programs_password_never_reaches_a_log(line: str) -> None:
    out = Redactor(key=KEY).text(line)
    assert SECRET not in out and "<redacted:" in out


@pytest.mark.parametrize("line", [
    "ssh -p 2222 node-7",
    "mysql -p orders",
    "docker run -p 8080:80 img; docker login --password-stdin ghcr.io",
    "python -p train.py",
])
def test_logs_keep_ports_and_prompts(line: str) -> None:
    assert Redactor(key=KEY).text(line) == line


def test_a_captured_cmdline_keeps_no_mysql_password(tmp_path: Path) -> None:
    """The capture path: /proc/PID/cmdline as the procfs collector stages it."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  1 2 3 4\nbtime 1796000000\n")
    fake_process(proc, 4242, f"0::{DOCKER_SCOPE}\n", comm="mysqldump",
                 argv=("mysqldump", "-uroot", f"-p{SECRET}", "orders"))
    stage = tmp_path / "stage"
    ProcfsCollector(str(proc)).snapshot(make_context(stage))
    cmdline = (stage / "proc/4242/cmdline").read_bytes()
    assert SECRET.encode() not in cmdline
    assert cmdline.startswith(b"mysqldump\0-uroot\0-p<redacted:") and cmdline.endswith(b"\0orders\0")
