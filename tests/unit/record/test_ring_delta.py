"""Change-only records (forensics.ring.delta): lossless by construction, each segment decodes alone,
a failed write never leaves a delta without the line it builds on."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from forensics.ring import RingReader, RingWriter
from forensics.ring import writer as writer_module
from forensics.ring.delta import ALT_KEPT, DeltaDecoder, DeltaEncoder

MEMBER = "nvml/samples.jsonl"
T0 = float(int(time.time()) - 3600)  # inside the ring's retention


def _line(gpu: int, tick: int, rng: random.Random, procs: int = 16) -> str:
    """A line shaped as the NVML sampler's: keys sorted, per-process samples whose timeStamp moves."""
    return json.dumps({
        "gpu_index": gpu, "kind": "device",
        "nvml": {"nvmlDeviceGetPowerUsage": {"value": 70000 + rng.choice((0, 0, 250))},
                 "nvmlDeviceGetProcessUtilization": {"lastSeenTimeStamp": 1000 * tick, "value": [
                     {"pid": 100 + p, "smUtil": 10 if p % 5 else rng.randrange(100), "timeStamp": 1000 * (tick + 1)}
                     for p in range(procs)]}},
        "processes": [{"pid": 100 + p, "usedGpuMemory": 1 << 28} for p in range(procs)],
        "t": 1.7e9 + tick, "tick": tick, "time": f"2026-12-01T00:00:{tick % 60:02d}Z", "uuid": f"GPU-{gpu}"},
        sort_keys=True)


def _roundtrip(lines: list[str]) -> tuple[str, str]:
    enc, dec = DeltaEncoder(), DeltaDecoder()
    encoded = [enc.encode(chunk) for chunk in lines]
    decoded = []
    for chunk in encoded:
        text, bad = dec.decode(chunk)
        assert bad == 0
        decoded.append(text)
    return "".join(encoded), "".join(decoded)


def test_sampler_lines_come_back_byte_for_byte_and_much_smaller() -> None:
    rng = random.Random(7)
    chunks = ["".join(_line(g, tick, rng) + "\n" for g in range(4)) for tick in range(50)]
    encoded, decoded = _roundtrip(chunks)
    assert decoded == "".join(chunks)
    assert len(encoded) < 0.4 * len(decoded), (len(encoded), len(decoded))  # a fifth of the samples move


def test_odd_lines_survive() -> None:
    """Lines starting with '[', lines without the separator, a changed token count, a new key,
    undecodable bytes (as surrogate escapes), the same line twice."""
    odd = "\udcff\udcfe raw, bytes"
    chunks = ['[1, 2, 3]\n', '[1, 2, 4]\n', 'plain\n', 'plain\n', '{"k": 1, "v": 2}\n{"k": 2, "v": 2}\n',
              '{"k": 1, "v": 3}\n', '{"k": 1, "v": 3, "w": 4}\n', f"{odd}\n", f"{odd}\n", '{"k": 1, "v": 3, "w": 5}\n',
              '{"k": 1, "v": "a\tb", "w": 5}\n', '{"k": 1, "v": "a\tc", "w": 5}\n', '{"k": 1, "v": "=", "w": 5}\n',
              # idle cgroups: the same changes line after line ("same as the line before")
              *("".join(f'{{"cgroup": "/c{c}", "t": {t}, "values": {{"x": {c}}}}}\n' for c in range(5)) for t in range(4)),
              '[]\tliteral, bracket\n', '[]\tliteral, bracket\n']
    _, decoded = _roundtrip(chunks)
    assert decoded == "".join(chunks)


def test_changes_that_move_from_token_to_token_come_back_byte_for_byte() -> None:
    """The decoder keeps the text between the tokens that changed before: changes at the same
    tokens, at fewer of them, at others, and with "%" or NUL in the text all rebuild the same lines."""
    rng = random.Random(11)
    chunks = []
    values = {k: [f'"f{i}": {i}' for i in range(40)] for k in range(3)}
    for tick in range(300):
        lines = []
        shared = rng.random() < 0.5  # every key changes the same way (as idle cgroups do)
        picks = [(i, f'"f{i}": "{rng.choice(("%s", "%", chr(0), "x"))}{tick}"')
                 for i in rng.sample(range(40), rng.choice((0, 1, 3, 3, 3, 6, 12)))]
        for k in range(3):
            toks = values[k]
            for i, tok in picks if shared else [(i, f'"f{i}": "{rng.choice(("%s", "%", chr(0), "x"))}{tick}"')
                                                for i in rng.sample(range(40), rng.choice((0, 1, 3, 6, 12)))]:
                toks[i] = tok
            lines.append(", ".join([f'{{"key": {k}'] + toks) + "}\n")
        chunks.append("".join(lines))
    encoded, decoded = _roundtrip(chunks)
    assert decoded == "".join(chunks)
    assert encoded.count("=\n") > 100  # "the same changes" lines were among them


class _PlainEncoder:
    """The encoder as first written (every line split whole, compared token by token), with the
    latest lines of other token counts kept per key (``ALT_KEPT`` of them, the oldest dropped): the
    faster DeltaEncoder must write exactly its text, so rings written before and after read the same."""

    def __init__(self) -> None:
        self.prev: dict[str, list[str]] = {}
        self.alt: dict[str, list[list[str]]] = {}  # per key: lines of other token counts, oldest first
        self.ids: dict[str, int] = {}
        self.last: str | None = None

    def encode(self, data: str) -> str:
        return "\n".join(self.line(line) for line in data.split("\n")[:-1]) + "\n"

    def line(self, line: str) -> str:
        toks = line.split(", ")
        key = toks[0]
        prev = self.prev.get(key)
        self.prev[key] = toks
        if prev is None:
            self.ids.setdefault(key, len(self.ids))
        elif len(prev) != len(toks):
            kept = self.alt.setdefault(key, [])
            same = [k for k in kept if len(k) == len(toks)]
            kept[:] = [k for k in kept if len(k) != len(toks)] + [prev]
            del kept[:-ALT_KEPT]
            prev = same[0] if same else None
        if prev is not None and len(prev) == len(toks):
            changed: dict[str, list[int]] = {}
            for i, (a, b) in enumerate(zip(prev, toks, strict=True)):
                if a != b:
                    changed.setdefault(b, []).append(i)
            if not any("\t" in tok for tok in changed):
                body = "".join(f"\t{','.join(map(str, ix))}\t{tok}" for tok, ix in changed.items())
                head = f"[{self.ids[key]},{len(toks)}]"
                enc = head + "=" if body == self.last else head + body
                self.last = body
                if len(enc) < 0.8 * len(line):
                    return enc
        self.last = None
        return "[]\t" + line if line.startswith("[") else line


def test_the_encoder_writes_what_the_plain_encoder_writes() -> None:
    """Idle cgroup lines (only the head moves), busy ones (the rest moves too), NVML lines, short
    lines, changed token counts, tabs, a key that comes back: the same encoded text, line for line."""
    rng = random.Random(13)
    chunks = ["".join(_line(g, tick, rng) + "\n" for g in range(3)) for tick in range(30)]
    for tick in range(60):
        lines = []
        for c in range(12):
            busy = c % 4 == 0 and rng.random() < 0.5
            extra = ', "w": 1' if c == 5 and tick % 7 == 3 else ""
            lines.append(f'{{"cgroup": "/c{c}", "t": {1.7e9 + tick}, "tick": {tick}, "time": "x{tick}", '
                         f'"values": {{"cpu": {rng.randrange(9) if busy else 0}, "mem": 4096, '
                         f'"io": {{"r": {tick // 10 if busy else 0}, "w": 0}}{extra}, "tab": "{"a	b" if c == 7 and tick % 5 == 0 else "ab"}"}}}}\n')
        lines.append(f"short, {tick % 3}\n" if tick % 2 else "short\n")
        lines.append(f"[{tick % 2}, 1, 2, 3, 4, 5, 6, 7, 8]\n")
        chunks.append("".join(lines))
    plain, fast, dec = _PlainEncoder(), DeltaEncoder(), DeltaDecoder()
    encoded = []
    for chunk in chunks:
        enc = fast.encode(chunk)
        assert enc == plain.encode(chunk)
        assert dec.decode(enc) == (chunk, 0)
        encoded.append(enc)
    text = "".join(encoded)
    assert text.count("]=\n") > 200 and "\n[]\t[" in text  # "the same changes", and literal "[" lines


def test_same_changes_at_a_token_a_line_does_not_have_are_refused() -> None:
    """A foreign "[key,count]=" whose changes (from a longer line) reach past its own line is a
    bad line (counted), never an error out of the decoder."""
    long_line = '{"k": 1, ' + ", ".join(f'"v{i}": 0' for i in range(30)) + "}"
    short = '{"k": 2, "v": 0, "w": 0, "x": "' + "a" * 100 + '"}'
    dec = DeltaDecoder()
    text, bad = dec.decode(f"{long_line}\n{short}\n[0,31]\t29\t\"v28\": 1\n[1,4]=\n")
    assert bad == 1 and text.count("\n") == 3


def test_a_delta_without_its_line_is_left_out_and_counted() -> None:
    enc = DeltaEncoder()
    enc.encode('{"k": 1, "v": 1, "x": "' + "a" * 200 + '"}\n')
    delta = enc.encode('{"k": 1, "v": 2, "x": "' + "a" * 200 + '"}\n')
    assert delta.startswith("[")
    text, bad = DeltaDecoder().decode(delta + '{"k": 2, "v": 1}\n')
    assert (text, bad) == ('{"k": 2, "v": 1}\n', 1)
    # a bad line of a key: the later deltas of that key are refused too, never applied to an older line
    enc, dec = DeltaEncoder(), DeltaDecoder()
    first = enc.encode('{"k": 3, "v": 1, "x": "' + "a" * 200 + '"}\n')
    second = enc.encode('{"k": 3, "v": 2, "x": "' + "a" * 200 + '"}\n')
    third = enc.encode('{"k": 3, "v": 3, "x": "' + "a" * 200 + '"}\n')
    assert dec.decode(first) == (first, 0) and second.startswith("[0,3]")
    assert dec.decode(second.replace("]\t", "]\t999\t", 1)) == ("", 1)
    assert dec.decode(third) == ("", 1)


def _records(n: int, rng: random.Random) -> list[tuple[float, float, str, str, bytes]]:
    out = []
    for tick in range(n):
        data = "".join(_line(g, tick, rng, procs=32) + "\n" for g in range(2)).encode()
        out.append((T0 + tick, 100.0 + tick, MEMBER, "append", data))
        out.append((T0 + tick, 100.0 + tick, "kernel/kmsg-window.txt", "append", f"6,{tick},0,-;line\n".encode()))
    return out


def test_ring_gives_back_what_was_appended_across_segments(tmp_path: Path) -> None:
    """Small segments (many rotations): every record read back equals what was appended, and a
    window that starts mid-ring reads the same bytes for its records."""
    rng = random.Random(3)
    recs = _records(120, rng)
    w = RingWriter(tmp_path / "ring", max_bytes=64 << 20, segment_bytes=24 << 10,
                   delta_members=[MEMBER]).open()
    for r in recs:
        w.append([r])
    w.close()
    reader = RingReader(tmp_path / "ring")
    back = [(r.t, r.member, r.op, r.data) for r in reader.records()]
    assert back == [(t, m, op, d) for t, _, m, op, d in recs]
    assert not reader.report.problems
    assert len(reader.segments()) > 3
    window = [(r.t, r.data) for r in RingReader(tmp_path / "ring").records(since=T0 + 60, members=(MEMBER,))]
    assert window == [(t, d) for t, _, m, _, d in recs if m == MEMBER and t >= T0 + 60]
    stored = [rec for s in reader.segments() for _, rec in reader._segment_lines(s)[0][1:]]
    assert {r["op"] for r in stored if r["member"] == MEMBER} == {"delta"}
    assert {r["op"] for r in stored if r["member"] != MEMBER} == {"append"}
    assert sum(len(r["data"]) for r in stored if r["member"] == MEMBER) < \
        0.5 * sum(len(d) for _, _, m, _, d in recs if m == MEMBER)


def test_a_failed_write_leaves_no_delta_without_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails (full disk) is cut away; the next lines of each key are whole again, so
    everything written still decodes."""
    rng = random.Random(5)
    recs = _records(30, rng)
    w = RingWriter(tmp_path / "ring", max_bytes=64 << 20, delta_members=[MEMBER]).open()
    real = writer_module.write_all
    kept = []
    for i, r in enumerate(recs):
        if i in (21, 22, 40):
            def failing(fd: int, data: bytes) -> None:
                real(fd, data[: len(data) // 2])
                raise OSError(28, "No space left on device")
            monkeypatch.setattr(writer_module, "write_all", failing)
            with pytest.raises(OSError):
                w.append([r])
            monkeypatch.setattr(writer_module, "write_all", real)
            continue
        w.append([r])
        kept.append(r)
    w.close()
    reader = RingReader(tmp_path / "ring")
    assert [(r.t, r.member, r.data) for r in reader.records()] == [(t, m, d) for t, _, m, _, d in kept]
    assert not reader.report.problems


def test_a_decode_budget_stops_change_only_lines_inflating() -> None:
    """A few bytes of "[k,n]=" rebuild a whole line: with a budget, decode rebuilds at most that
    many bytes, counts the lines it left out, and refuses what comes after (its state is gone)."""
    key_line = "k, " + ", ".join(f"v{i}" for i in range(300))
    count = key_line.count(", ") + 1
    data = key_line + "\n" + f"[0,{count}]\t1\tx\n" + f"[0,{count}]=\n" * 100
    whole, bad = DeltaDecoder().decode(data)
    assert bad == 0 and whole.count("\n") == 102
    dec = DeltaDecoder()
    text, bad = dec.decode(data, budget=10 * (len(key_line) + 1))
    assert len(text) <= 10 * (len(key_line) + 1) and whole.startswith(text) and text.endswith("\n")
    assert text.count("\n") + bad == 102 and dec.over_budget
    assert dec.decode(f"[0,{count}]=\n") == ("", 1)
    assert DeltaDecoder().decode(data, budget=len(whole)) == (whole, 0)


def test_a_key_forgotten_and_back_is_whole_under_its_number_and_reads_back() -> None:
    """The encoder forgets a key not seen for a minute (a gone cgroup): when it comes back its line
    is whole, the keys after it keep the numbers both sides count, and every line decodes. A key
    whose lines come 100 s apart is forgotten once, and then remembered (the horizon follows the
    longest gap: 300 s)."""
    def line(key: str, tick: int) -> str:
        return f'{{"cgroup": "/{key}", "t": {tick}, "tick": {tick}, "values": {{"cpu": 1, "mem": 2, "io": 3, "pids": 4}}}}\n'

    enc, dec = DeltaEncoder(), DeltaDecoder()
    encoded: dict[tuple[str, int], str] = {}
    for tick in range(400):
        keys = ["every"] + (["gone"] if tick in (0, 1, 90, 91) else []) + (["quiet"] if tick % 100 == 0 else []) \
            + ([f"new{tick}"] if tick % 50 == 25 else [])
        chunk = "".join(line(k, tick) for k in keys)
        text = enc.encode(chunk, now=float(tick))
        assert dec.decode(text) == (chunk, 0)
        encoded.update({(k, tick): e for k, e in zip(keys, text.split("\n"), strict=False)})
    assert encoded[("gone", 1)].startswith("[1,")  # a delta, under its number
    assert encoded[("gone", 90)] == line("gone", 90).rstrip("\n")  # forgotten: whole
    assert encoded[("gone", 91)].startswith("[1,")  # its number still
    assert encoded[("new375", 375)] == line("new375", 375).rstrip("\n")
    assert encoded[("quiet", 100)] == line("quiet", 100).rstrip("\n")  # forgotten once ...
    assert encoded[("quiet", 200)].startswith("[2,") and encoded[("quiet", 300)].startswith("[2,")  # ... then kept
    assert enc.horizon_s == 300.0
    assert enc.keys_kept < 11  # of every, gone, quiet and 8 new keys
    assert enc.encode(line("every", 650), now=650.0).startswith("[0,")  # 251 s since its last line: a delta
    assert enc.keys_kept == 2  # of the others only new375 was seen in the last 300 s


def test_long_lines_matched_against_their_hint_encode_as_the_plain_encoder_does() -> None:
    """Lines of 64 tokens and more (NVML's: ~800) are matched against the text between the tokens
    that changed before, not split. Whatever changes (the same tokens, others, a token's length
    at the start, middle or end of the line, the last token, a token that gains a separator or
    ends in a comma, the token count), the encoded text is the plain encoder's and decodes back."""
    rng = random.Random(21)
    plain, fast, dec = _PlainEncoder(), DeltaEncoder(), DeltaDecoder()
    n = 0
    for tick in range(400):
        chunk = []
        for key in range(3):
            vals = [f'"v{i}": {1000 * tick if i % 9 == 0 else i}' for i in range(90)]
            if rng.random() < 0.2:  # another token changes
                vals[rng.randrange(90)] = f'"x": {rng.randrange(10 ** rng.randrange(1, 6))}'
            if rng.random() < 0.3:  # a token's length changes
                k = rng.choice((0, 1, 45, 88, 89))
                vals[k] = f'"w": {rng.randrange(10 ** rng.randrange(1, 8))}'
            if rng.random() < 0.05:
                vals[rng.randrange(90)] = rng.choice(('"s": "a, b"', '"s": "a,"', '"s": " a"', '"s": ",", " "', ""))
            if rng.random() < 0.02:
                vals.append('"extra": 1')
            chunk.append(f'{{"k": {key}, "t": {1.7e9 + tick + rng.random()}, ' + ", ".join(vals) + "}\n")
        data = "".join(chunk)
        enc = fast.encode(data, now=float(tick))
        assert enc == plain.encode(data), tick
        assert dec.decode(enc) == (data, 0)
        n += enc.count("\n[")
    assert n > 600  # most lines were change-only


def _sampled(gpu: int, tick: int, samples: int, procs: int = 64) -> str:
    """An NVML line whose utilisation holds ``samples`` samples a process since the cursor (1 at a
    steady tick; 0 or 2 when a tick came before or after NVML's period boundary; 20 at the first)."""
    value: object = [{"pid": 100 + p, "smUtil": 10, "timeStamp": 1000 * (tick - s)}
                     for s in range(samples) for p in range(procs)] if samples else {"error": "NotFound"}
    return json.dumps({
        "gpu_index": gpu, "kind": "device",
        "nvml": {"nvmlDeviceGetProcessUtilization": {"lastSeenTimeStamp": 1000 * (tick - samples), "value": value}},
        "processes": [{"pid": 100 + p, "usedGpuMemory": 1 << 28} for p in range(procs)],
        "t": 1.7e9 + tick, "tick": tick, "time": f"2026-12-01T00:{tick // 60 % 60:02d}:{tick % 60:02d}Z"},
        sort_keys=True)


def _idle_cgroup(c: int, tick: int, full: bool) -> str:
    """A quiet cgroup's line: its counters at every tick, the rest (and ``unchanged_until``) at the
    ``idle_full_s`` line, as the cgroups collector's activity gating writes them."""
    rest = (f', "unchanged_until": "x{tick - 1}", "memory": {{"current": 4096, "max": "max"}}, '
            f'"pids": {{"current": 1}}' if full else "")
    return (f'{{"cgroup": "/docker/c{c}", "t": {1.7e9 + tick}, "tick": {tick}, "time": "x{tick}", '
            f'"cpu": {{"usage_usec": {c}}}{rest}}}')


def test_a_line_whose_token_count_goes_back_to_one_seen_lately_is_change_only() -> None:
    """Steady state writes only changes: an NVML line whose sample count wavers (1 a process, then 2
    after a late tick, 0 after an early one) and a quiet cgroup whose ``idle_full_s`` line holds more
    tokens than its other lines are whole only the first time each token count comes (the old
    encoder wrote every line whose count differed from its key's latest line whole: ~23 kB for an
    NVML line of 64 processes). Byte for byte back, and the plain encoder's text."""
    samples = [20] + [1, 1, 2, 0, 1, 1, 2, 1, 0, 2, 1, 1, 1, 0, 0, 2, 2, 1] * 3
    chunks = ["".join(_sampled(g, tick, n) + "\n" for g in range(2))
              + "".join(_idle_cgroup(c, tick, tick % 9 == 0) + "\n" for c in range(3))
              for tick, n in enumerate(samples)]
    plain, enc, dec = _PlainEncoder(), DeltaEncoder(), DeltaDecoder()
    first: set[tuple[str, int]] = set()
    for tick, chunk in enumerate(chunks):
        text = enc.encode(chunk, now=float(tick))
        assert text == plain.encode(chunk), tick
        assert dec.decode(text) == (chunk, 0), tick
        for line, got in zip(chunk.splitlines(), text.splitlines(), strict=True):
            shape = (line.split(", ", 1)[0], line.count(", "))
            if shape in first:
                assert got.startswith("["), (tick, got[:80])
                assert len(got) < 0.1 * len(line) or not line.startswith('{"gpu'), (tick, len(got))
            else:
                first.add(shape)
    assert len(first) == 2 * 4 + 3 * 2  # each NVML key: 20, 1, 2 and 0 samples; each cgroup: 2 shapes


def test_kept_lines_of_other_token_counts_stay_the_same_on_both_sides() -> None:
    """Token counts that come and go among more than the kept lines (the oldest dropped), a key
    forgotten and back (the decoder then keeps lines the encoder dropped), a bad line (its key's
    kept lines dropped, later deltas refused until a whole line), a key first seen after the bad
    line (its number still the encoder's, not one more: the refused key's next whole line took a
    second number before): every line the encoder writes rebuilds to its bytes or is refused,
    never rebuilt wrong."""
    rng = random.Random(5)
    enc, dec = DeltaEncoder(), DeltaDecoder()
    now, key2 = 0.0, 0
    for tick in range(600):
        now += 200.0 if tick == 300 else 1.0  # a minute and more without lines: every key forgotten
        keys = [0, 1] + ([2] if tick > 450 else [])
        chunk = "".join(", ".join([f'{{"k": {k}', *(f'"v{i}": {tick if i % 7 == 0 else i}'
                                                    for i in range(rng.choice((40, 41, 42, 43, 44, 45))))]) + "}\n"
                        for k in keys)
        text = enc.encode(chunk, now=now)
        if tick == 400:  # key 1's line torn: refused, and so is every later delta of key 1 until a whole line
            lines = text.split("\n")
            lines[1] = lines[1].replace("\t", "\t99999\t", 1) if lines[1].startswith("[") else lines[1]
            text = "\n".join(lines)
        got, bad = dec.decode(text)
        if tick < 400:
            assert (got, bad) == (chunk, 0), tick
        else:
            want = chunk.splitlines()
            assert set(got.splitlines()) <= set(want), tick  # whatever comes back is the line written
            assert got.startswith(want[0]), tick  # key 0 (and the new key 2) untouched
            if tick > 451:
                key2 += want[-1] in got.splitlines()
    assert key2 > 50  # key 2's deltas rebuilt: it is numbered as the encoder numbers it


def test_a_key_refused_then_whole_again_keeps_its_number() -> None:
    """After a bad line of a key, its next whole line is its line again under the number it had: the
    keys first seen after it keep the encoder's numbers (the decoder numbered it a second time, and
    every later key's deltas went to the key before it)."""
    def line(k: int, v: int, extra: str = "") -> str:
        return f'{{"k": {k}, "v": {v}, "x": "{"a" * 200}"{extra}}}\n'

    enc, dec = DeltaEncoder(), DeltaDecoder()
    assert dec.decode(enc.encode(line(1, 0))) == (line(1, 0), 0)
    assert dec.decode(enc.encode(line(1, 1)).replace("\t", "\t999\t", 1)) == ("", 1)  # torn: refused
    assert dec.decode(enc.encode(line(1, 2, ', "w": 1'))) == (line(1, 2, ', "w": 1'), 0)  # whole again
    assert dec.decode(enc.encode(line(2, 0))) == (line(2, 0), 0)
    delta = enc.encode(line(2, 1))
    assert delta.startswith("[1,3]") and dec.decode(delta) == (line(2, 1), 0)
