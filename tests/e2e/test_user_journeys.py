"""What a first user and an on-call engineer do, end to end through ``python -m forensics``.

Each test is a journey that tripped someone: capture twice in a row, capture then verify, inspect
and analyze what was captured, and capture bounded in time with no child left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from forensics.bundle.format import bundle_stem

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "GPUFORENSICS_DEBUG"}
    full_env["PYTHONPATH"] = str(REPO)
    full_env.update(env or {})
    full_env = {k: v for k, v in full_env.items() if v != ""}  # "" in env: unset it
    return subprocess.run([sys.executable, "-m", "forensics", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


class TestCaptureTwiceInARow:
    def test_a_second_capture_in_the_same_second_gets_its_own_bundle(self, out_dir: Path) -> None:
        """Names have one-second resolution; a capture that finds its name taken (an earlier
        capture this second) used to fail with "refusing to overwrite". Names for this second
        and the next are taken here; the capture still writes a bundle of its own."""
        import socket

        now = datetime.now(UTC)
        taken = [out_dir / f"{bundle_stem(socket.gethostname(), now + timedelta(seconds=s))}.tgz"
                 for s in (0, 1)]
        for t in taken:
            t.write_bytes(b"earlier bundle")
        proc = run_cli("capture", "-o", str(out_dir), "--only", "host", "--quiet", cwd=out_dir)
        assert proc.returncode == 0, proc.stderr
        path = Path(proc.stdout.strip())
        assert path.parent == out_dir and path not in taken and path.is_file()
        assert all(t.read_bytes() == b"earlier bundle" for t in taken)

    def test_no_free_name_is_refused_before_collecting(self, out_dir: Path) -> None:
        """Every name for the next seconds taken: refuse at the start, in one line, rather than
        collect for the whole window and fail at the final rename."""
        import socket

        now = datetime.now(UTC)
        taken = [out_dir / f"{bundle_stem(socket.gethostname(), now + timedelta(seconds=s))}.tgz"
                 for s in range(9)]
        for t in taken:
            t.write_bytes(b"earlier bundle")
        proc = run_cli("capture", "-o", str(out_dir), "--only", "host", "--duration", "30", "--quiet",
                       cwd=out_dir)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("gpuforensics: error: refusing to overwrite existing bundles: no free")
        assert sorted(out_dir.iterdir()) == sorted(taken)  # no staging, no reservation left

    def test_back_to_back_captures(self, out_dir: Path) -> None:
        paths = []
        for _ in range(2):
            proc = run_cli("capture", "-o", str(out_dir), "--only", "host", "--quiet", cwd=out_dir)
            assert proc.returncode == 0, proc.stderr
            paths.append(proc.stdout.strip())
        assert len(set(paths)) == 2
        assert sorted(p.name for p in out_dir.iterdir()) == sorted(Path(p).name for p in paths)


class TestConcurrentCaptures:
    def test_three_captures_started_together_each_keep_their_bundle(self, out_dir: Path) -> None:
        """Two alerts fire at once and automation starts two captures in the same second: the
        later one used to collect for its whole window, then fail at the final rename ("refusing
        to overwrite existing bundle") and lose everything it had collected."""
        env = {k: v for k, v in os.environ.items() if k != "GPUFORENSICS_DEBUG"}
        env["PYTHONPATH"] = str(REPO)
        procs = [subprocess.Popen([sys.executable, "-m", "forensics", "capture", "-o", str(out_dir),
                                   "--only", "host", "--duration", "1.5", "--quiet"],
                                  cwd=out_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(3)]
        results = []
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            results.append((proc.returncode, out.strip(), err))
        assert [r[0] for r in results] == [0, 0, 0], results
        paths = {r[1] for r in results}
        assert len(paths) == 3
        assert sorted(p.name for p in out_dir.iterdir()) == sorted(Path(p).name for p in paths)


class TestCaptureThenRead:
    def test_capture_verify_inspect_analyze(self, out_dir: Path, tmp_path: Path) -> None:
        proc = run_cli("capture", "-o", str(out_dir), "--only", "host,procfs,kernel", "--quiet",
                       cwd=out_dir)
        assert proc.returncode == 0, proc.stderr
        bundle = proc.stdout.strip()
        v = run_cli("verify", bundle, cwd=tmp_path)
        assert v.returncode == 0 and v.stdout.startswith("OK "), v.stderr
        i = run_cli("inspect", bundle, "-f", "json", cwd=tmp_path)
        assert i.returncode == 0, i.stderr
        statuses = {c["name"]: c["status"] for c in json.loads(i.stdout)["collectors"]}
        assert statuses["host"] == "ok" and statuses["nvml"] == "skipped"
        a = run_cli("analyze", bundle, "-f", "json", cwd=tmp_path)
        assert a.returncode == 0, a.stderr
        doc = json.loads(a.stdout)
        assert doc["bundles"][0]["path"] == bundle


class TestCaptureBounded:
    def test_timeout_bounds_a_hung_source_and_no_child_is_left(self, out_dir: Path,
                                                             tmp_path: Path) -> None:
        """A Docker socket that accepts and never answers: capture ends by --timeout plus the
        window (and startup), records docker as failed, and leaves no process behind."""
        import socket

        sock_path = tmp_path / "hang.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(sock_path))
        server.listen(64)
        try:
            start = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-m", "forensics", "capture", "-o", str(out_dir), "--only",
                 "docker,procfs,kernel,host", "--timeout", "3", "--quiet"],
                cwd=out_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**os.environ, "PYTHONPATH": str(REPO), "DOCKER_HOST": f"unix://{sock_path}"},
                start_new_session=True)
            try:
                out, err = proc.communicate(timeout=30)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, 9)
                    proc.wait()
            elapsed = time.monotonic() - start
        finally:
            server.close()
        assert proc.returncode == 0, err
        assert elapsed < 3 + 6, f"capture took {elapsed:.1f} s with --timeout 3"
        bundle = Path(out.strip())
        assert bundle.is_file()
        # the hung source is killed early enough that every later collector still runs (with
        # --timeout 3 they were all "skipped: no time left in the global --timeout")
        from tests.support import hostile_bundles as hb

        status = {c["name"]: c["status"] for c in hb.manifest_of(bundle)["collectors"]}
        assert status["docker"] == "failed"
        assert all(status[n] not in ("skipped", "failed") for n in ("procfs", "kernel", "host")), status
        # nothing of the capture's session is still alive
        leftovers = [p for p in os.listdir("/proc") if p.isdigit() and _session_of(int(p)) == proc.pid]
        assert leftovers == [], f"processes left behind: {leftovers}"


def _session_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[3])  # state ppid pgrp session


@pytest.fixture(autouse=True)
def _no_stray_staging(out_dir: Path):
    yield
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".gpuforensics-staging-")]


class TestReportsWhereHomeIsNotWritable:
    def test_html_report_stderr_is_quiet(self, tmp_path: Path) -> None:
        """``sudo -u oncall gpuforensics analyze ...`` or a read-only HOME: matplotlib cannot make
        its config directory and used to print two warnings around the CLI's own output."""
        sample = REPO / "sample_bundles" / "clean-host.tgz"
        if not sample.is_file():
            pytest.fail(f"sample bundle missing: {sample}")
        env = {"XDG_CONFIG_HOME": "/dev/null/config", "XDG_CACHE_HOME": "/dev/null/cache",
               "HOME": "/dev/null/home", "TMPDIR": str(tmp_path), "MPLCONFIGDIR": ""}
        proc = run_cli("analyze", str(sample), "-f", "html", "-o", str(tmp_path / "r.html"),
                       cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        assert "<svg" in (tmp_path / "r.html").read_text()


class TestFirstContact:
    def test_bare_command_shows_help_not_an_error(self, tmp_path: Path) -> None:
        proc = run_cli(cwd=tmp_path)
        text = proc.stdout + proc.stderr
        assert "Usage: gpuforensics" in text and "capture" in text
        assert "error" not in text.splitlines()[0]
        assert proc.returncode in (0, 2)

    def test_help_is_fast(self, tmp_path: Path) -> None:
        """--help imports no heavy library (weasyprint, matplotlib, docker, kubernetes)."""
        code = ("import sys, forensics.cli as c; sys.argv=['gpuforensics', '--help']\n"
                "try:\n    c.main()\nexcept SystemExit:\n    pass\n"
                "heavy = [m for m in ('weasyprint', 'matplotlib', 'docker', 'kubernetes', 'pynvml', 'grpc', 'jinja2') if m in sys.modules]\n"
                "print(heavy, file=sys.stderr)\n")
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
        assert proc.returncode == 0
        assert proc.stderr.strip().splitlines()[-1] == "[]"


class TestInspectReadsWell:
    def test_durations_have_units_and_missing_values_are_not_none(self, tmp_path: Path) -> None:
        from tests.support import hostile_bundles as hb

        d = tmp_path / "b"
        d.mkdir()
        bundle = hb.build_bundle(d)  # its manifest has no capture end
        proc = run_cli("inspect", str(bundle), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "None" not in proc.stdout
        host_line = next(line for line in proc.stdout.splitlines() if line.lstrip().startswith("host "))
        assert "0.01 s" in host_line


class TestCollectorsListing:
    def test_each_collector_says_what_it_collects(self, tmp_path: Path) -> None:
        proc = run_cli("collectors", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.strip().splitlines()
        assert len(lines) >= 7
        for line in lines:
            assert "See the module docstring" not in line, line
            summary = line.split(" s  ", 1)[1] if " s  " in line else ""
            assert len(summary.split()) >= 4, line  # a real one-line summary


class TestReportOfUnnamedContainers:
    def test_a_container_known_only_by_its_id_is_not_shown_twice(self) -> None:
        """With no Docker data (docker unavailable), a container's label is its short id; the
        subject line read "container feed3a894dcc feed3a894dcc" for each of 24 victims."""
        from forensics.report.html import render_html
        from tests.support.report_docs import build_incident_doc

        doc = build_incident_doc()
        shorts = []
        for finding in doc["findings"]:
            for s in finding.get("subjects", []):
                if s.get("type") == "container":
                    s["name"] = s["id"][:12]
                    shorts.append(s["name"])
        assert shorts
        html = render_html(doc)
        for short in set(shorts):
            assert f'{short}</strong> <span class="mono dim">{short}' not in html
            assert f"<strong>{short}</strong>" in html
