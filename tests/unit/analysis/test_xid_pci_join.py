"""A kernel-log Xid joins the NVML GPU whatever form each writes the PCI address in, and the analysis
takes an Xid's meaning from the package's one catalog, never from the description a bundle holds."""

from __future__ import annotations

from typing import Any

from forensics.analysis.findings import Evidence
from forensics.analysis.model import Gpu, Model
from forensics.parsing.kmsg import KmsgRecord
from forensics.parsing.nvrm import parse_xid
from forensics.parsing.xid_catalog import xid_description, xid_info
from tests.support.analysis_bundles import T0, BundleSpec
from tests.unit.analysis.conftest import Analyze, names, of_kind


def _bus(b: BundleSpec, index: int, bus_id: str) -> None:
    b.gpus[index]["nvml"]["nvmlDeviceGetPciInfo_v3"]["value"]["busId"] = bus_id


def _xid_gpu(doc: dict[str, Any]) -> list[str]:
    (f,) = of_kind(doc, "gpu-xid-fault")
    return names(f, "witness", "gpu")


class TestKernelXidJoinsTheNvmlGpu:
    def test_nvml_form_and_kernel_form(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)  # NVML busId 00000000:3B:00.0
        b.gpu(1)  # 00000000:86:00.0
        b.kmsg(T0 + 5, "NVRM: Xid (PCI:0000:86:00): 48, pid=4242, name=python, DBE")
        assert _xid_gpu(analyze(b)) == ["GPU 1"]

    def test_sysfs_form_in_nvml_and_an_older_drivers_upper_case_kernel_form(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        _bus(b, 0, "0000:3b:00.0")
        b.kmsg(T0 + 5, "NVRM: Xid (0000:3B:00): 48, DBE")
        assert _xid_gpu(analyze(b)) == ["GPU 0"]

    def test_another_pci_domain_is_another_gpu(self, analyze: Analyze) -> None:
        b = BundleSpec()
        b.gpu(0)
        _bus(b, 0, "00000001:3B:00.0")  # same bus number, PCI domain 1
        b.kmsg(T0 + 5, "NVRM: Xid (PCI:0000:3b:00): 48, DBE")
        (f,) = of_kind(analyze(b), "gpu-xid-fault")
        assert "GPU 0" not in names(f, "witness", "gpu") and "did not enumerate" in f["summary"]

    def test_model_lookup_takes_every_form(self) -> None:
        m = Model()
        ev = Evidence("b", "nvml/devices.json", "", "")
        m.gpus[("n", "GPU-a")] = Gpu("n", 0, "GPU-a", "H100", "00000000:3B:00.0", None, evidence=ev)
        m.gpus[("n", "GPU-b")] = Gpu("n", 1, "GPU-b", "H100", "0000:86:00.0", None, evidence=ev)
        for form in ("PCI:0000:3b:00", "0000:3b:00", "0000:3b:00.0", "00000000:3B:00.0", "3b:00.0"):
            found = m.gpu_by_pci("n", form)
            assert found is not None and found.uuid == "GPU-a", form
        found = m.gpu_by_pci("n", "00000000:86:00.0")
        assert found is not None and found.uuid == "GPU-b"
        assert m.gpu_by_pci("n", "0000:3b:00.1") is None and m.gpu_by_pci("other", "0000:3b:00.0") is None


class TestOneXidTable:
    def test_parser_collector_and_analysis_word_each_code_alike(self) -> None:
        for code in (13, 31, 43, 45, 48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154):
            rec = KmsgRecord(0, 4, 1, 1, "-", f"NVRM: Xid (PCI:0000:3b:00): {code}, text")
            xid = parse_xid(rec)
            assert xid is not None and xid.description == xid_description(code) == xid_info(code).description
        assert xid_description(48) == "Double Bit ECC Error" and xid_description(9999) is None

    def test_a_bundle_with_the_old_wording_analyses_the_same(self, analyze: Analyze) -> None:
        def bundle(description: str | None) -> BundleSpec:
            b = BundleSpec()
            b.gpu(0)
            b.kmsg(T0 + 5, "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python, DBE")
            event = {"kind": "event", "tick": 6, "t": T0 + 6, "gpu_index": 0, "mig_uuid": None,
                     "uuid": b.gpus[0]["nvml"]["nvmlDeviceGetUUID"]["value"], "eventType": 8,
                     "eventType_decoded": ["XidCriticalError"], "eventData": 48, "xid": 48}
            if description is not None:
                event["xid_description"] = description
            b.add_jsonl("nvml/events.jsonl", event)
            return b

        # the collector's old wording, the catalog's, and a bundle without the field
        docs = [analyze(bundle(d)) for d in ("Double-bit ECC error", "Double Bit ECC Error", None)]
        findings = [[{k: v for k, v in f.items() if k != "evidence"} for f in d["findings"]] for d in docs]
        assert findings[0] == findings[1] == findings[2]
        (f,) = of_kind(docs[0], "gpu-xid-fault")
        assert f["metrics"]["meaning"] == "Double Bit ECC Error"
