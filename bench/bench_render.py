"""Benchmark: HTML and PDF render time and peak RSS of the report, per document.

Documents: each ``sample_bundles/*.tgz`` (or ``$GPUFORENSICS_SAMPLE_BUNDLES/*.tgz``; analysed first with ``forensics.analysis``; analysis
time is not counted) and synthetic analysis documents from ``tests/support/report_docs.py``:
the incident (2 GPUs, 5 min at 1 s) and a one-hour recording of a busy node (8 GPUs, 122
containers, 3600 samples per series, 64 findings, 3000 manifest members).

Each document is measured in a fresh interpreter, so its peak RSS is its own: the child imports
the renderers and draws one small warm-up chart (import time is reported apart as ``cold_s``),
then times ``render_html`` and ``render_pdf`` (best of ``--repeat``, wall clock and CPU time:
on a shared machine the CPU time is the steadier number). Targets: HTML under 1 s,
PDF under 10 s, and a sample bundle's whole PDF (HTML with its charts and timeline, then the
layout) under 3 s; the ratio columns are time / target (under 1.00 meets it).

Run: ``python bench/bench_render.py [--paper a4|letter] [--repeat 2] [--only large] [--check]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HTML_TARGET_S = 1.0
PDF_TARGET_S = 10.0
SAMPLE_PDF_TARGET_S = 3.0  # a sample bundle, charts included: analyze -f pdf as a user waits for it
SYNTHETIC = ("synthetic-incident", "synthetic-one-hour")
SAMPLES = Path(os.environ.get("GPUFORENSICS_SAMPLE_BUNDLES", ROOT / "sample_bundles"))


def _builders() -> Any:
    from tests.support import report_docs

    return report_docs


def _document(name: str) -> dict[str, Any]:
    if name == "synthetic-incident":
        return dict(_builders().build_incident_doc())
    if name == "synthetic-one-hour":
        return dict(_builders().build_large_doc())
    from forensics.analysis import analyze_bundles

    return analyze_bundles([SAMPLES / f"{name}.tgz"])


def _pages(pdf: bytes) -> int:
    """Page count through pdfinfo (poppler); -1 when it is not installed."""
    import shutil
    import tempfile

    tool = shutil.which("pdfinfo")
    if tool is None:
        return -1
    with tempfile.NamedTemporaryFile(suffix=".pdf") as handle:
        handle.write(pdf)
        handle.flush()
        out = subprocess.run([tool, handle.name], capture_output=True, text=True, timeout=60).stdout
    return next(
        (int(line.split()[1]) for line in out.splitlines() if line.startswith("Pages:")), -1
    )


def child(name: str, paper: str, repeat: int) -> dict[str, Any]:
    """Measure one document in this (fresh) process."""
    start = time.perf_counter()
    from forensics.report.charts import ChartSpec, Line, Panel, render_svg
    from forensics.report.html import render_html
    from forensics.report.pdf import render_pdf

    render_svg(ChartSpec("warm", "warm", (Panel("p", "%", (Line("l", (0.0, 1.0), (1.0, 2.0)),)),)))
    cold = time.perf_counter() - start
    doc = _document(name)
    html_s = pdf_s = html_cpu = pdf_cpu = float("inf")
    html, pdf = "", b""
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        html = render_html(doc, paper)
        html_s = min(html_s, time.perf_counter() - t0)
        html_cpu = min(html_cpu, time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        pdf = render_pdf(html)
        pdf_s = min(pdf_s, time.perf_counter() - t0)
        pdf_cpu = min(pdf_cpu, time.process_time() - c0)
    pages = _pages(pdf)
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "name": name,
        "cold_s": cold,
        "html_s": html_s,
        "pdf_s": pdf_s,
        "html_cpu_s": html_cpu,
        "pdf_cpu_s": pdf_cpu,
        "html_kib": len(html) // 1024,
        "pdf_kib": len(pdf) // 1024,
        "pages": pages,
        "peak_rss_mib": rss_kib / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paper", default="a4", choices=("a4", "letter"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--only", help="measure one document (a sample bundle stem or a synthetic name)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.paper, args.repeat)))
        return 0

    names = [p.name[: -len(".tgz")] for p in sorted(SAMPLES.glob("*.tgz"))] + list(SYNTHETIC)
    if not any(n not in SYNTHETIC for n in names):
        print("note: no sample_bundles/*.tgz yet; synthetic documents only")
    if args.only:
        names = [n for n in names if n == args.only]
    print(
        f"{'document':34} {'cold s':>7} {'HTML s':>7} {'cpu s':>7} {'x1s':>5} {'PDF s':>7} {'cpu s':>7} {'x10s':>5} "
        f"{'all s':>6} {'x3s':>5} {'pages':>5} "
        f"{'HTML KiB':>8} {'PDF KiB':>8} {'peak RSS MiB':>12}"
    )
    missed = []
    for name in names:
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                name,
                "--paper",
                args.paper,
                "--repeat",
                str(args.repeat),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            print(f"{name:34} failed: {proc.stderr.strip().splitlines()[-1:]}")
            missed.append(name)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        html_ratio, pdf_ratio = r["html_s"] / HTML_TARGET_S, r["pdf_s"] / PDF_TARGET_S
        whole = r["html_s"] + r["pdf_s"]
        sample_ratio = whole / SAMPLE_PDF_TARGET_S if name not in SYNTHETIC else None
        if html_ratio > 1 or pdf_ratio > 1 or (sample_ratio or 0) > 1:
            missed.append(name)
        print(
            f"{name:34} {r['cold_s']:7.2f} {r['html_s']:7.2f} {r['html_cpu_s']:7.2f} {html_ratio:5.2f} "
            f"{r['pdf_s']:7.2f} {r['pdf_cpu_s']:7.2f} {pdf_ratio:5.2f} "
            f"{whole:6.2f} {'' if sample_ratio is None else f'{sample_ratio:.2f}':>5} "
            f"{r['pages']:5d} {r['html_kib']:8d} {r['pdf_kib']:8d} {r['peak_rss_mib']:12.0f}"
        )
    if missed:
        print(f"over target or failed: {', '.join(missed)}")
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
