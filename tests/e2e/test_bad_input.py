"""Bad input through the real command line: one clear line, a non-zero exit, never a traceback,
never exit 70 (internal error), and never a write over evidence.

Each case is a regression test for something a first user tripped on. Bundles are written by the
real BundleWriter (tests/support/hostile_bundles.py), so their hashes are right and only the one
thing the test is about is wrong.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.cli import main
from tests.support import hostile_bundles as hb


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``gpuforensics ARGS`` in this process; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out, err


REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path, timeout: float = 60,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m forensics ARGS`` as a user would (for capture: signals, children)."""
    env = {k: v for k, v in os.environ.items() if k != "GPUFORENSICS_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "forensics", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def one_error_line(code: int, err: str, *needles: str) -> str:
    assert code not in (0, 70), f"exit {code}: {err!r}"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {err!r}"
    assert lines[0].startswith("gpuforensics: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    d = tmp_path / "bundles"
    d.mkdir()
    return hb.build_bundle(d)


class TestReportNeverReplacesEvidence:
    """``-o`` naming a bundle (the one analyzed, or any other) is refused; the bundle is intact."""

    @pytest.mark.parametrize("fmt", ["html", "json", "md"])
    def test_output_is_the_input_bundle(self, capsys: pytest.CaptureFixture[str], bundle: Path,
                                        fmt: str) -> None:
        before = bundle.read_bytes()
        code, out, err = cli(capsys, "analyze", str(bundle), "-f", fmt, "-o", str(bundle))
        one_error_line(code, err, "refusing", str(bundle))
        assert out == ""
        assert bundle.read_bytes() == before

    def test_output_is_another_bundle(self, capsys: pytest.CaptureFixture[str], bundle: Path,
                                      tmp_path: Path) -> None:
        other_dir = tmp_path / "other"
        other_dir.mkdir()
        other = hb.build_bundle(other_dir, hostname="gpu-08")
        before = other.read_bytes()
        code, _, err = cli(capsys, "analyze", str(bundle), "-f", "html", "-o", str(other))
        one_error_line(code, err, "refusing", "gzip")
        assert other.read_bytes() == before

    def test_an_existing_report_is_still_replaced(self, capsys: pytest.CaptureFixture[str],
                                                   bundle: Path, tmp_path: Path) -> None:
        target = tmp_path / "r.json"
        target.write_text("old report\n")
        code, out, err = cli(capsys, "analyze", str(bundle), "-f", "json", "-o", str(target))
        assert code == 0, err
        assert json.loads(target.read_text())["bundles"]
        assert out.strip() == str(target)


class TestCaptureOptions:
    """Option values that cannot mean anything are refused before any collector runs."""

    @pytest.mark.parametrize(("args", "needle"), [
        (["--duration", "nan"], "--duration"),
        (["--duration", "inf"], "--duration"),   # would sample until killed
        (["--interval", "nan"], "--interval"),
        (["--timeout", "inf"], "--timeout"),
        (["--lookback", "nan"], "--lookback"),  # was written into the manifest as NaN (not JSON)
        (["--duration", "-1"], "--duration"),
        (["--duration", "2", "--interval", "0"], "--interval"),
        (["--since", "garbage"], "--since"),
        (["--since", "99999999999999d"], "too long"),  # was OverflowError, exit 70
        (["--since", "2099-01-01"], "future"),          # nothing would be kept
        (["--only", "bogus"], "bogus"),
        (["--skip", "bogus"], "bogus"),
        (["--set", "noequals"], "KEY=VALUE"),
        (["--only", "host", "--skip", "host"], "no collector"),  # was an empty bundle, exit 0
    ])
    def test_refused(self, capsys: pytest.CaptureFixture[str], out_dir: Path, args: list[str],
                     needle: str) -> None:
        code, out, err = cli(capsys, "capture", "-o", str(out_dir), *args)
        one_error_line(code, err, needle)
        assert code == 2
        assert out == ""
        assert list(out_dir.iterdir()) == []

    def test_output_is_a_file(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        f = tmp_path / "file"
        f.write_text("x")
        code, _, err = cli(capsys, "capture", "-o", str(f))
        one_error_line(code, err, str(f))


class TestAnalyzeOptions:
    def test_text_with_output_file_is_refused_not_ignored(self, capsys: pytest.CaptureFixture[str],
                                                           bundle: Path, tmp_path: Path) -> None:
        target = tmp_path / "summary.txt"
        code, out, err = cli(capsys, "analyze", str(bundle), "-o", str(target))
        one_error_line(code, err, "text")
        assert not target.exists() and out == ""

    @pytest.mark.parametrize("fmt", ["garbage", "", ",,", "html,garbage"])
    def test_unknown_format(self, capsys: pytest.CaptureFixture[str], bundle: Path, tmp_path: Path,
                            fmt: str) -> None:
        code, _, err = cli(capsys, "analyze", str(bundle), "-f", fmt, "-o", str(tmp_path / "r"))
        one_error_line(code, err, "--format")
        assert not (tmp_path / "r").exists()

    @pytest.mark.parametrize(("text", "needle"), [
        ("a = [\n", "TOML"),
        ("nonsense_key = 3\n", "unknown threshold"),
        ('cpu_throttled_ratio = "high"\n', "number"),
        ("cpu_throttled_ratio = true\n", "number"),
        ("cpu_throttled_ratio = -5\n", "negative"),
    ])
    def test_bad_config(self, capsys: pytest.CaptureFixture[str], bundle: Path, tmp_path: Path,
                        text: str, needle: str) -> None:
        cfg = tmp_path / "t.toml"
        cfg.write_text(text)
        code, _, err = cli(capsys, "analyze", str(bundle), "--config", str(cfg))
        one_error_line(code, err, needle)
        assert code == 2


    @pytest.mark.parametrize("window", ["yesterday", "..", "tomorrow..", "2026-01-02T00:00Z..2026-01-01T00:00Z"])
    def test_bad_window(self, capsys: pytest.CaptureFixture[str], bundle: Path, window: str) -> None:
        code, _, err = cli(capsys, "analyze", str(bundle), "--window", window)
        one_error_line(code, err, "--window")
        assert code == 2

    def test_a_window_ranks_the_incidents(self, capsys: pytest.CaptureFixture[str], bundle: Path) -> None:
        code, out, _ = cli(capsys, "analyze", str(bundle), "-f", "json", "--window", "2020-01-01T00:00Z..")
        assert code == 0
        doc = json.loads(out)
        assert doc["window"]["named"] is True and isinstance(doc["incidents"], list)


def _manifest_of(stdout: str) -> dict[str, object]:
    path = Path(stdout.strip())
    assert path.is_file(), stdout
    return hb.manifest_of(path)


class TestCaptureWithBadSources:
    """A bad source costs only its collector: the bundle is written, the manifest says why."""

    @pytest.mark.parametrize(("text", "needle"), [
        ("garbage: [\n  - : :\n", "not valid YAML"),        # was 'failed: ParserError: ...'
        ("apiVersion: v1\nkind: Config\nclusters: 5\n", "not usable"),
        ("- 1\n- 2\n", "not usable"),
    ])
    def test_bad_kubeconfig(self, out_dir: Path, tmp_path: Path, text: str, needle: str) -> None:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(text)
        proc = run_cli("capture", "-o", str(out_dir), "--only", "kubernetes,host", "--quiet",
                       cwd=tmp_path, env_extra={"KUBECONFIG": str(kubeconfig)})
        assert proc.returncode == 0, proc.stderr
        collectors = {c["name"]: c for c in _manifest_of(proc.stdout)["collectors"]}  # type: ignore[union-attr]
        kube = collectors["kubernetes"]
        assert kube["status"] == "unavailable"
        assert needle in kube["error"] and str(kubeconfig) in kube["error"]
        assert collectors["host"]["status"] == "ok"

    def test_dead_docker_socket_and_bad_nvml_library(self, out_dir: Path, tmp_path: Path) -> None:
        import socket

        dead = tmp_path / "dead.sock"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(dead))
        s.close()  # the path exists; nothing listens
        proc = run_cli("capture", "-o", str(out_dir), "--only", "docker,nvml,host", "--quiet",
                       "--nvml-library", "/bin/ls", cwd=tmp_path,
                       env_extra={"DOCKER_HOST": f"unix://{dead}"})
        assert proc.returncode == 0, proc.stderr
        collectors = {c["name"]: c for c in _manifest_of(proc.stdout)["collectors"]}  # type: ignore[union-attr]
        assert collectors["docker"]["status"] == "unavailable"
        assert str(dead) in collectors["docker"]["error"]
        assert collectors["nvml"]["status"] == "unavailable"
        assert "/bin/ls" in collectors["nvml"]["error"]
        assert collectors["host"]["status"] == "ok"


class TestUnusableOutputPath:
    """An output path the system refuses to even look at (a name over NAME_MAX here; EACCES for
    an unprivileged user under a 0700 directory) used to escape as OSError, exit 70."""

    @pytest.mark.parametrize("fmt", ["json", "json,md"])
    def test_name_too_long(self, capsys: pytest.CaptureFixture[str], bundle: Path, tmp_path: Path,
                           fmt: str) -> None:
        target = tmp_path / ("a" * 300) / "x.json"
        code, out, err = cli(capsys, "analyze", str(bundle), "-f", fmt, "-o", str(target))
        one_error_line(code, err, "File name too long")
        assert code == 2 and out == ""

    @pytest.mark.parametrize("command", ["verify", "inspect", "analyze"])
    def test_bundle_name_too_long(self, capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                  command: str) -> None:
        code, _, err = cli(capsys, command, str(tmp_path / ("b" * 300 + ".tgz")))
        one_error_line(code, err)
        assert code == 2

    def test_capture_output_name_too_long(self, capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
        code, _, err = cli(capsys, "capture", "-o", str(tmp_path / ("c" * 300)))
        one_error_line(code, err)
        assert code == 2


class TestTerminalInjection:
    """Strings from a bundle (host name, process names in the kernel log, collector errors) reach
    the terminal views escaped: no escape sequence or carriage return from a bundle is printed."""

    ESC = "\x1b[2J\x1b]0;pwned\x07\x1b[31mRED\r\nVerdict: all fine\u202e"

    @pytest.fixture
    def hostile(self, tmp_path: Path) -> Path:
        d = tmp_path / "hostile"
        d.mkdir()
        return hb.build_bundle(d, members={"host/host.json": json.dumps({"hostname": self.ESC}).encode()},
                               manifest_fields={"host": {"hostname": self.ESC},
                                                "collectors": [{"name": "host", "status": "ok",
                                                                "duration_s": 0.1, "error": self.ESC}]})

    @pytest.mark.parametrize("args", [["inspect"], ["analyze"]])
    def test_escaped(self, capsys: pytest.CaptureFixture[str], hostile: Path, args: list[str]) -> None:
        code, out, err = cli(capsys, *args, str(hostile))
        assert code == 0, err
        for bad in ("\x1b", "\x07", "\r", "\u202e"):
            assert bad not in out
        assert "\\x1b[2J" in out  # shown, not hidden: it is evidence too
        assert not any(line.startswith("Verdict: all fine") for line in out.splitlines())

    def test_json_output_keeps_the_exact_string(self, capsys: pytest.CaptureFixture[str],
                                                hostile: Path) -> None:
        code, out, _ = cli(capsys, "inspect", str(hostile), "-f", "json")
        assert code == 0
        assert "\x1b" not in out  # JSON escapes it as \u001b
        assert json.loads(out)["collectors"][0]["error"] == self.ESC


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
class TestStdoutOnAFullDisk:
    """``analyze -f json > findings.json`` while the disk is full (often the incident itself)
    was exit 70, "a bug, please report it"."""

    @pytest.mark.parametrize("args", [["analyze", "-f", "json"], ["analyze"], ["inspect"], ["verify"]])
    def test_one_line_error(self, bundle: Path, tmp_path: Path, args: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if k != "GPUFORENSICS_DEBUG"}
        env["PYTHONPATH"] = str(REPO)
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, "-m", "forensics", args[0], str(bundle), *args[1:]],
                                  cwd=tmp_path, env=env, stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=60)
        one_error_line(proc.returncode, proc.stderr, "No space left on device")
        assert proc.returncode == 4  # could not write the output (README: exit codes)


class TestCaptureIntoAPseudoFileSystem:
    @pytest.mark.parametrize("target", ["/proc", "/sys/kernel"])
    def test_one_line_error(self, capsys: pytest.CaptureFixture[str], target: str) -> None:
        """access() says writable to root, mkdir says no: was FileNotFoundError/PermissionError,
        exit 70."""
        if not os.path.isdir(target):
            pytest.skip(f"{target} is not mounted here")
        code, out, err = cli(capsys, "capture", "-o", target, "--only", "host")
        one_error_line(code, err, "cannot write into")
        assert code == 2 and out == ""


class TestNonFiniteNumbersInABundle:
    """``NaN``/``Infinity`` in a manifest or member (Python writes them; an older capture wrote
    ``--duration nan`` into its manifest) made ``-f json`` print invalid JSON and the JSON report
    fail altogether ("not JSON-serialisable")."""

    @pytest.fixture
    def nan_bundle(self, tmp_path: Path) -> Path:
        d = tmp_path / "nan"
        d.mkdir()
        return hb.build_bundle(
            d, members={"host/host.json": b'{"hostname": "gpu-07", "uptime_s": NaN, "boot_time_unix": Infinity}'},
            manifest_fields={"collectors": [{"name": "host", "status": "ok", "duration_s": float("nan"), "error": None}],
                             "capture": {"started": "2026-11-29T14:05:00.000000Z", "interrupted": False,
                                         "window": {"duration_s": float("inf")}}})

    @staticmethod
    def strict(text: str) -> object:
        def refuse(constant: str) -> object:
            raise AssertionError(f"not JSON: {constant}")
        return json.loads(text, parse_constant=refuse)

    @pytest.mark.parametrize("args", [["inspect", "-f", "json"], ["analyze", "-f", "json"]])
    def test_stdout_is_strict_json(self, capsys: pytest.CaptureFixture[str], nan_bundle: Path,
                                   args: list[str]) -> None:
        code, out, err = cli(capsys, args[0], str(nan_bundle), *args[1:])
        assert code == 0, err
        self.strict(out)

    def test_json_report_is_written(self, capsys: pytest.CaptureFixture[str], nan_bundle: Path,
                                    tmp_path: Path) -> None:
        target = tmp_path / "r.json"
        code, _, err = cli(capsys, "analyze", str(nan_bundle), "-f", "json", "-o", str(target))
        assert code == 0, err
        self.strict(target.read_text())

    def test_verify_still_checks_the_bytes(self, capsys: pytest.CaptureFixture[str], nan_bundle: Path) -> None:
        code, out, err = cli(capsys, "verify", str(nan_bundle))
        assert code == 0 and out.startswith("OK "), err
