#!/usr/bin/env python3
"""Fault injection: SIGKILL ``gpuforensics capture --duration 10`` at random moments.

Each round starts a real capture (every collector but docker and kubernetes, the NVML collector
on the simulated libnvidia-ml.so.1 of tests/support/nvmlsim) into one shared output directory,
kills it with SIGKILL after a random delay, waits 2 s and reports the processes of that capture
still alive and any file under a bundle name. The next round's capture must remove what the
killed one left (staging directory, partial archive, reservation); a last capture after the
loop checks that nothing is left at all.

    python3 bench/bench_capture_kill.py              # 20 rounds
    python3 bench/bench_capture_kill.py 5 --seed 7   # 5 rounds, another seed

Target (issue 13): every round 0 processes left and 0 files under a bundle name; the directory
holds only the final capture's bundle at the end. Needs gcc (to build the simulated library).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import capture_kill as ck  # noqa: E402
from tests.support.nvmlsim import build_library  # noqa: E402

DURATION_S = 10
SPAN_S = 12.0  # kills land anywhere from start-up through packing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rounds", nargs="?", type=int, default=20)
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    bad = 0
    with tempfile.TemporaryDirectory(prefix="bench-kill-") as tmp_name:
        tmp = Path(tmp_name)
        lib = build_library(tmp / "lib")
        scenario = ck.scenario_file(tmp)
        out = tmp / "out"
        out.mkdir()
        print(f"{'round':>5} {'kill at':>8} {'state':<9} {'procs seen':>10} {'left after 2 s':>14} "
              f"{'bundle names':>12}  temporaries left (the next capture removes them)")
        for i in range(args.rounds):
            for done in [p for p in out.iterdir() if ck.BUNDLE_NAME_RE.match(p.name)]:
                done.unlink()  # a round whose capture finished before its kill: not this round's concern
            at = rng.uniform(0.05, SPAN_S)
            proc = ck.start_capture(out, lib, scenario, "--duration", str(DURATION_S),
                                    "--skip", "docker,kubernetes")
            time.sleep(at)
            state = "running" if proc.poll() is None else "finished"
            outcome = ck.kill_and_look(proc, out)
            wrong = bool(outcome.alive_after) or (state == "running" and bool(outcome.bundle_names))
            bad += int(wrong)
            print(f"{i + 1:>5} {at:>7.2f}s {state:<9} {outcome.seen_processes:>10} "
                  f"{len(outcome.alive_after):>14} {len(outcome.bundle_names):>12}  "
                  f"{', '.join(n[:40] for n in outcome.temporaries) or '-'}{'  <-- WRONG' if wrong else ''}")
        for done in [p for p in out.iterdir() if ck.BUNDLE_NAME_RE.match(p.name)]:
            done.unlink()
        final = ck.start_capture(out, lib, scenario, "--only", "host")
        stdout, stderr = final.communicate(timeout=120)
        left = sorted(p.name for p in out.iterdir() if p.name != Path(stdout.strip()).name)
        removed = stderr.count("gpuforensics: removed ")
        print(f"final capture: exit {final.returncode}, said it removed {removed} leftovers; "
              f"left in the directory besides its bundle: {left or 'nothing'}")
        bad += int(bool(left) or final.returncode != 0)
    print("RESULT:", "ok" if not bad else f"{bad} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
