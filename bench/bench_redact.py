#!/usr/bin/env python3
"""Benchmark free-text redaction (forensics/bundle/redact.py, Redactor.text): how its time grows
with the input, what it costs on a log beside the redactor it replaced, and what it catches.

    python3 bench/bench_redact.py                # 64 KiB, 2 MiB and 16 MiB
    python3 bench/bench_redact.py --quick        # 64 KiB and 2 MiB

1. Growth: four inputs at each size (a workload's log, base64 text with no newline, as a 2 MiB
   config bundle in an annotation, that base64 as the value of ``config_secret=``, and a hostile
   text made of near-matches of every context), each timed as the best of three runs (hostile:
   one); the time per MiB should stay flat (linear growth).
2. Cost: a 256 KiB log through the redactor of commit bd3a8c0 (the one before this rule set; read
   with ``git show``) and through today's, in this same process: the ratio new / old.
3. Measured: the secret corpus (tests/support/secret_corpus) printed in every context: leaks (a
   secret still in the output) must be 0; the benign corpus: lines changed (false redactions) must
   stay under 1 %, and no GPU UUID, PCI id, container id, image digest or commit id is altered.

Targets (issue 31): linear growth; leaks 0; false redactions < 1 %.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from forensics.bundle.redact import Redactor  # noqa: E402
from tests.support.secret_corpus import all_secrets, benign_lines, printed  # noqa: E402

OLD_COMMIT = "bd3a8c0"
KIB = 1024
MIB = 1024 * KIB


def old_redactor_class() -> Any:
    """The Redactor of OLD_COMMIT, loaded from git into this process."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD_COMMIT}:forensics/bundle/redact.py"],
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_redact.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_redact", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Redactor


def workload_log(size: int) -> str:
    lines = [b.line for b in benign_lines(200)]
    rng = random.Random(3)
    out: list[str] = []
    n = 0
    while n < size:
        line = rng.choice(lines)
        out.append(line)
        n += len(line) + 1
    return "\n".join(out)[:size]


def base64_text(size: int) -> str:
    rng = random.Random(5)
    return base64.b64encode(rng.randbytes(size * 3 // 4 + 3)).decode()[:size]


#: fragments of every context the finders look for, repeated: a hostile text dense with near-matches
HOSTILE = ('password="a\\"b ', "Authorization: Digest x=", "--token ", "://u:p@", "-----BEGIN A-----",
           '{"name": "X", "value": ', "name: K\n  value: ", "eyJaaaaaaaaa.eyJ", "hf_", "AKIA",
           "machine h login u password ", "<redacted:0123456789abcdef>", "&sig=", "QUJD")


def hostile_text(size: int) -> str:
    rng = random.Random(9)
    out: list[str] = []
    n = 0
    while n < size:
        piece = rng.choice(HOSTILE)
        out.append(piece)
        n += len(piece)
    return "".join(out)[:size]


def best_of(f: Callable[[str], str], s: str, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        f(s)
        best = min(best, time.perf_counter() - t0)
    return best


def growth(sizes: list[int]) -> None:
    print("1. growth (best of 3, hostile: 1 run; seconds, and seconds per MiB)")
    print(f"   {'size':>8}  {'log':>14}  {'base64':>14}  {'secret=base64':>14}  {'hostile':>14}")
    for size in sizes:
        cells = []
        for text, runs in ((workload_log(size), 3), (base64_text(size), 3),
                           ("config_secret=" + base64_text(size), 3), (hostile_text(size), 1)):
            t = best_of(lambda s: Redactor(key=b"k" * 32).text(s, "logs"), text, runs)
            cells.append(f"{t:6.3f} ({t / (len(text) / MIB):5.3f})")
        label = f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"
        print(f"   {label:>8}  " + "  ".join(f"{c:>14}" for c in cells))


def cost() -> None:
    old_cls = old_redactor_class()
    log = workload_log(256 * KIB)
    old = best_of(lambda s: old_cls(key=b"k" * 32).text(s, "logs"), log)
    new = best_of(lambda s: Redactor(key=b"k" * 32).text(s, "logs"), log)
    print(f"2. cost on a 256 KiB log: old {old:.3f} s, new {new:.3f} s, ratio new/old {new / old:.2f}")


def measured() -> None:
    secrets = all_secrets()
    r = Redactor(key=b"k" * 32)
    leaks: Counter[str] = Counter()
    lines = 0
    for s, context, text in printed(secrets):
        lines += 1
        if s.value in r.text(text):
            leaks[context] += 1
    shapes = len({s.shape for s in secrets})
    print(f"3. corpus: {len(secrets)} secrets in {shapes} shapes, {lines} printed texts: "
          f"leaks {sum(leaks.values())}" + (f" {dict(leaks)}" if leaks else ""))
    benign = benign_lines()
    changed = [b for b in benign if r.text(b.line) != b.line]
    broken = [b for b in benign if any(k not in r.text(b.line) for k in b.keep)]
    kinds = Counter(b.kind for b in changed)
    print(f"   benign: {len(benign)} lines, false redactions {len(changed)} "
          f"({100 * len(changed) / len(benign):.2f} %)" + (f" {dict(kinds)}" if kinds else ""))
    print(f"   join keys altered (GPU UUIDs, PCI ids, container ids, digests, commits): {len(broken)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="64 KiB and 2 MiB only")
    args = ap.parse_args()
    sizes = [64 * KIB, 2 * MIB] + ([] if args.quick else [16 * MIB])
    Redactor().text("warm up: compile the rules once")
    growth(sizes)
    cost()
    measured()


if __name__ == "__main__":
    main()
