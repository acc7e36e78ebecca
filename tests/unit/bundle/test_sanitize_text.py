"""The sanitiser's byte-level replacement (forensics/bundle/sanitize_text.py), its names
(sanitize_names.py) and its private map (pseudonyms.py): what is replaced, what must stay."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.bundle.pseudonyms import PseudonymMap, load_map, save_map
from forensics.bundle.sanitize_names import Names, image_repository, names_in_member
from forensics.bundle.sanitize_text import Replacer, find_addresses, trie_pattern
from forensics.errors import UsageError

NAMES = {"gpu-07": "hostname", "ml": "namespace", "trainer-0": "pod", "trainer": "container",
         "alice": "user", "cafe": "container", "3b": "container"}


def replacer(names: dict[str, str] | None = None, data: bytes = b"", fields: tuple[str, ...] = ()) -> Replacer:
    pmap = PseudonymMap()
    for category, text in find_addresses(data):
        if category != "user":
            pmap.get(category, text)
    return Replacer(pmap, NAMES if names is None else names, fields)


class TestWholeWords:
    @pytest.mark.parametrize(("text", "want"), [
        (b"pod ml/trainer-0 on gpu-07", b"pod ns-0001/pod-0001 on host-0001"),
        (b'{"container": "trainer", "pod": "trainer-0"}', b'{"container": "ctr-0001", "pod": "pod-0001"}'),
        (b"python trainer.py --out /home/alice/x", b"python ctr-0001.py --out /home/user-0001/x"),
        (b"k8s_trainer_trainer-0_ml_0", b"k8s_ctr-0001_pod-0001_ns-0001_0"),
        (b"GPU-07 and Gpu-07.corp", b"host-0001 and host-0001.corp"),  # host names in any case
        (b"Trainer", b"Trainer"),  # other names exactly
        (b'"generateName": "trainer-"', b'"generateName": "ctr-0001-"'),  # a hyphen that ends the word
        (b"/out/gpuforensics-gpu-07-20261202T023518Z.tgz", b"/out/gpuforensics-host-0001-20261202T023518Z.tgz"),
        (b'"log": "started\\ntrainer-0\\tml"', b'"log": "started\\npod-0001\\tns-0001"'),  # after JSON escapes
    ])
    def test_replaced_where_the_name_stands_alone(self, text: bytes, want: bytes) -> None:
        r = replacer({k: v for k, v in NAMES.items() if k not in ("cafe", "3b")})
        got = r.apply(text)
        # pseudonyms are drawn in order of the names' categories; compare with those the map gave
        for original, pseudonym in (("trainer", "ctr-0001"), ("trainer-0", "pod-0001"), ("ml", "ns-0001"),
                                    ("gpu-07", "host-0001"), ("alice", "user-0001")):
            want = want.replace(pseudonym.encode(), r.pmap.get("x", original).encode())
        assert got == want

    @pytest.mark.parametrize("text", [
        b"/usr/lib/libnvidia-ml.so.1", b"trainer-ckpt-3", b"nvidia-ml-py", b"mltrainer", b"gpu-070",
    ])
    def test_not_inside_a_longer_word(self, text: bytes) -> None:
        assert replacer().apply(text) == text

    def test_join_keys_are_never_touched(self) -> None:
        # a name that is also a hex word or a PCI bus id's part: ids and UUIDs are skipped whole
        ids = (b"GPU-cafe1234-5a6b-4c7d-9e0f-1a2b3c4d5e6f 0000:3b:00.0 00000000:3B:00.0 "
               b"sha256:cafe0123456789abcdef cafe0123456789abcdef0123 MIG-12345678-cafe-4c7d-9e0f-1a2b3c4d5e6f "
               b"kubepods-burstable-pod12345678_cafe_4c7d_9e0f_1a2b3c4d5e6f.slice")
        assert replacer().apply(ids) == ids
        assert replacer().apply(b"cafe 3b") != b"cafe 3b"

    def test_a_field_name_is_kept_as_a_json_key_only(self) -> None:
        r = replacer({"server": "container"}, fields=("server",))
        out = r.apply(b'{"server": "https://10.0.0.1", "name": "server"}')
        assert out.startswith(b'{"server": ') and b'"name": "ctr-0001"' in out

    def test_the_trie_matches_exactly_its_words(self) -> None:
        import re

        words = [b"vm", b"vmx", b"ab", b"abc", b"abd", b"x"]
        pattern = re.compile(b"(?:" + trie_pattern(sorted(words, key=len, reverse=True)) + b")")
        assert all(pattern.fullmatch(w) for w in words)
        assert not any(pattern.fullmatch(w) for w in (b"a", b"v", b"abcd", b"vmxx"))


class TestAddresses:
    def test_each_kind_replaced_consistently(self) -> None:
        text = (b"eth0 10.0.7.21/24 gw 10.0.7.1 peer 10.0.7.21 ether 3c:fd:fe:12:34:56 "
                b"inet6 fe80::3efd:feff:fe12:3456 2001:4860:4860::8888 ib0 "
                b"80:00:00:48:fe:80:00:00:00:00:00:00:3c:fd:fe:03:00:12:34:56")
        r = replacer({}, text)
        out = r.apply(text).decode()
        assert out.count("198.18.0.1") == 2 and "198.18.0.2" in out and "10.0.7" not in out
        assert "02:00:00:00:00:01" in out and "3c:fd:fe" not in out
        assert "2001:db8::" in out and "fe80::" not in out and "4860" not in out
        ib = out.split("ib0 ")[1]
        assert ib.count(":") == 19 and ib.startswith("02:")  # an IPoIB address keeps its 20 octets
        assert r.counts == {"ipv4": 3, "mac": 2, "ipv6": 2}

    @pytest.mark.parametrize("text", [
        b"127.0.0.1", b"0.0.0.0", b"255.255.255.0", b"169.254.1.2", b"224.0.0.1", b"::1", b"::",
        b"00:00:00:00:00:00", b"ff:ff:ff:ff:ff:ff", b"driver 535.104.05 cuda 12.4.1 lib 1.2.3.4.5",
        b"14:02:10", b"2026-11-29T14:02:10.123Z", b"std::vector<int> a::b", b"Ch 0000000a",
    ])
    def test_kept_as_they_are(self, text: bytes) -> None:
        assert replacer({}, text).apply(text) == text

    def test_after_a_unicode_escape_too(self) -> None:
        text = b'"\\u00e910.0.0.5 \\u003e10.0.0.6"'
        assert replacer({}, text).apply(text) == b'"\\u00e9198.18.0.1 \\u003e198.18.0.2"'

    def test_home_directories_name_users(self) -> None:
        found = set(find_addresses(b"open /home/alice/ckpt and /home/bob, not /srv/home/x"))
        assert found == {("user", "alice"), ("user", "bob")}


_HYPO_NAMES = {"trainer": "container", "trainer-0": "pod", "ml": "namespace", "gpu-07": "hostname"}


def _oracle(r: Replacer, value: object) -> object:
    """``value`` with every name and the address 10.0.0.5 mapped, written independently of the
    replacer: a plain whole-word replacement over the parsed strings, keys included."""
    import re

    pairs = {o: r.pmap.lookup(o) for o in _HYPO_NAMES}
    words = re.compile(r"(?<![A-Za-z0-9-])(" + "|".join(sorted(map(re.escape, pairs), key=len, reverse=True))
                       + r")(?:(?![A-Za-z0-9-])|(?=-(?![A-Za-z0-9])))", re.IGNORECASE)  # trainer- too

    def name(m: re.Match[str]) -> str:  # host names in any case, the others exactly
        found = m.group(1) if m.group(1) in pairs else m.group(1).lower()
        return str(pairs[found]) if found in pairs and (found == m.group(1) or _HYPO_NAMES[found] == "hostname") \
            else m.group(1)

    def text(s: str) -> str:
        s = words.sub(name, s)
        return re.sub(r"(?<![0-9.])10\.0\.0\.5(?![0-9])(?!\.[0-9])", str(r.pmap.names["ipv4"].get("10.0.0.5")), s)

    if isinstance(value, str):
        return text(value)
    if isinstance(value, list):
        return [_oracle(r, v) for v in value]
    if isinstance(value, dict):
        return {text(k): _oracle(r, v) for k, v in value.items()}
    return value


_WORDS = st.sampled_from(["trainer", "ml/trainer-0", "gpu-07", "10.0.0.5", "x trainer\ny", "ml", "<trainer>",
                          "\u00e9trainer", "GPU-07", "trainer-ckpt", "(ml)"])


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | _WORDS | st.lists(_WORDS | st.text(alphabet="ab -/.\n\"\u00e9", max_size=4), max_size=4).map("".join),
                    lambda children: st.lists(children, max_size=4)
                    | st.dictionaries(_WORDS | st.sampled_from(["k", "name"]), children, max_size=4),
                    max_leaves=20),
       st.booleans(), st.booleans(), st.integers(min_value=0, max_value=1))
def test_json_stays_json_and_lines_stay_lines(doc: object, indent: bool, ascii_only: bool, pad: int) -> None:
    """Any JSON document, as Python or Go would write it (escapes, \\u escapes), small or over
    16 KiB: the copy parses, has as many lines, and is the document with its names mapped (keys too)."""
    text = json.dumps(doc, indent=1 if indent else None, sort_keys=True, ensure_ascii=ascii_only)
    if not ascii_only:  # Go's encoding/json escapes <, > and & as \\u003c, \\u003e, \\u0026
        text = text.replace("<", "\\u003c").replace(">", "\\u003e")
    data = (text + "\n" + " " * (20000 * pad) + "\n").encode()
    r = replacer(_HYPO_NAMES, data)
    out = r.apply(data)
    assert out.count(b"\n") == data.count(b"\n")
    assert json.loads(out) == _oracle(r, json.loads(data))


class TestNames:
    def test_kubernetes_objects_labels_and_pod_log_paths(self) -> None:
        names = Names()
        pod = {"kind": "Pod", "metadata": {"name": "trainer-0", "namespace": "ml", "labels": {}},
               "spec": {"nodeName": "gpu-07.corp.example.net", "containers": [
                   {"name": "trainer", "image": "registry.corp.example.net:5000/ml/trainer:v3@sha256:" + "a" * 64}]},
               "status": {"containerStatuses": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}]}}
        names_in_member(names, "kubernetes/pods.json", json.dumps({"items": [pod]}).encode())
        names_in_member(names, "kubernetes/logs/research/notebook-alice/jupyter.log", b"")
        names_in_member(names, "kubernetes/logs/research/notebook-alice/jupyter.previous.log", b"")
        names_in_member(names, "proc/1/environ", b"USER=bob\0HOME=/home/carol\0PATH=/bin\0")
        names_in_member(names, "docker/containers/ab/inspect.json", json.dumps(
            {"Id": "abcdef123456" + "0" * 52, "Name": "/k8s_trainer_trainer-0_ml_x_0",
             "Config": {"Hostname": "abcdef123456", "User": "1000:1000", "Labels": {
                 "io.kubernetes.pod.namespace": "kube-system", "io.kubernetes.pod.name": "dcgm-exporter-x"}}}).encode())
        names_in_member(names, "kubernetes/requests.json",
                        b'{"server": "https://api.prod.corp.example.net:6443", "requests": []}')
        names_in_member(names, "docker/info.json",
                        b'{"Name": "gpu-07", "HttpProxy": "http://user:pw@proxy.corp.example.net:3128", "HttpsProxy": ""}')
        got = names.by_original()
        assert got == {"gpu-07": "hostname", "corp.example.net": "domain",
                       "registry.corp.example.net": "hostname", "api.prod.corp.example.net": "hostname",
                       "proxy.corp.example.net": "hostname",
                       "bob": "user", "carol": "user",
                       "ml": "namespace", "research": "namespace", "trainer-0": "pod", "notebook-alice": "pod",
                       "dcgm-exporter-x": "pod", "trainer": "container", "jupyter": "container",
                       "registry.corp.example.net:5000/ml/trainer": "image"}

    def test_domains_after_a_host_name_in_text_not_file_names(self) -> None:
        names = Names()
        names.add("hostname", "gpu-07")
        for text in (b"peer gpu-07.dc1.corp.net up", b"wrote gpu-07.log.gz", b"xgpu-07.other.net", b"gpu-07.1.5"):
            names.learn_domains(text)
        assert names.by_original() == {"gpu-07": "hostname", "dc1.corp.net": "domain", "corp.net": "domain"}

    @pytest.mark.parametrize(("ref", "repo"), [
        ("registry.corp:5000/team/trainer:v3", "registry.corp:5000/team/trainer"),
        ("localhost/x@sha256:" + "a" * 64, "localhost/x"),
        ("nvcr.io/nvidia/pytorch:24.05-py3", None), ("busybox", None), ("alice/trainer:1", None),
        ("docker.io/library/python:3", None), ("sha256:" + "a" * 64, None), ("a" * 64, None),
    ])
    def test_private_registries_only(self, ref: str, repo: str | None) -> None:
        assert image_repository(ref) == repo


class TestMap:
    def test_created_0600_reused_and_never_a_pseudonym_that_is_an_original(self, tmp_path: Path) -> None:
        pmap = PseudonymMap()
        pmap.reserve(["host-0001", "pod-0001"])  # originals that look like pseudonyms
        assert pmap.get("hostname", "gpu-07") == "host-0002"
        assert pmap.get("pod", "host-0001") == "pod-0002"
        assert pmap.get("container", "gpu-07") == "host-0002"  # one string, one pseudonym
        path = tmp_path / "m.json"
        save_map(pmap, path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        again = load_map(path)
        assert again.get("hostname", "gpu-07") == "host-0002" and again.get("hostname", "gpu-08") == "host-0003"

    @pytest.mark.parametrize("content", [b"{", b"[]", b'{"format": "other"}',
                                         b'{"format": "gpuforensics-sanitize-map", "version": 1, "names": {"pod": [1]}}'])
    def test_a_file_that_is_not_a_map_is_a_usage_error(self, tmp_path: Path, content: bytes) -> None:
        (tmp_path / "m.json").write_bytes(content)
        with pytest.raises(UsageError, match="not a sanitize map"):
            load_map(tmp_path / "m.json")

    def test_an_absent_file_is_an_empty_map(self, tmp_path: Path) -> None:
        assert load_map(tmp_path / "none.json").sizes() == {}


def test_a_large_member_gets_what_the_whole_pattern_gives(tmp_path: Path) -> None:
    """Over 16 KiB the replacer looks only around hints: the result must be the whole pattern's."""
    from forensics.bundle.reader import open_bundle
    from tests.golden.test_golden import BUNDLES

    tricky = (b'{"server": "gpu-07", "x": "0000:3b:00.0 GPU-cafe1234-5a6b-4c7d-9e0f-1a2b3c4d5e6f"}\n'
              b"xtrainer.corp.example.net trainer.corp.example.net Trainer TRAINER GPU-07 \\ntrainer-0\n"
              b"fe80::cafe 10.1.2.3 3c:fd:fe:12:34:56 cafe 3b libnvidia-ml.so ml/trainer-0 k8s_trainer_x\n")
    names = {**NAMES, "server": "container", "corp.example.net": "domain", "trainer.corp.example.net": "hostname"}
    samples = b"".join(bytes(d) for b in BUNDLES[:2] for d in open_bundle(b).members.values())
    big = (tricky + samples[:20000]) * 3 + tricky
    whole = replacer(names, big, fields=("server",))
    windowed = replacer(names, big, fields=("server",))
    want = whole._pattern.sub(whole._sub, big)
    assert len(big) > 16 << 10 and want != big
    assert windowed.apply(big) == want
    assert windowed.counts == whole.counts
