"""NVIDIA's Xid catalog, kept as data in the package (``forensics/parsing/data/*.tsv``): the one table
of Xid codes. The kernel-log parser (:mod:`forensics.parsing.nvrm`), the NVML collector's event
records and the analysis' rules all take an Xid's description from here (:func:`xid_description`,
:func:`xid_info`); the analysis never reads the description a bundle holds, so bundles written
with an older wording analyse the same way (docs/analysis-format.md, "Xid descriptions").

``xid_catalog.tsv``: the catalog for Ampere and newer GPUs (sheet "Xids" of NVIDIA's
``Xid-Catalog.xlsx``, published at :data:`CATALOG_URL`): per code its mnemonic, description, the
GPUs it applies to and the "Resolution Bucket" immediate and investigatory actions.
``xid_catalog_pre_ampere.tsv``: the older listing for Volta and earlier (:data:`PRE_AMPERE_URL`),
of which only each code's failure text is kept. Neither page carries a date; :data:`CATALOG_DATE`
says what the copy read holds. Nothing here is invented: a code absent from both tables is reported
as "not in NVIDIA's catalog".

:data:`BUCKETS` words the resolution buckets (the catalog's "Guidance Class" sheet, paraphrased).
:data:`CONSEQUENCES` are the causal links between codes, each with the catalog text it rests on:
an Xid of a burst that an earlier one of the same GPU can cause is that one's consequence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = [
    "BUCKETS",
    "CATALOG_DATE",
    "CATALOG_URL",
    "CONSEQUENCES",
    "PRE_AMPERE_URL",
    "XidInfo",
    "caused_by",
    "is_pre_ampere",
    "xid_description",
    "xid_info",
]

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
PRE_AMPERE_URL = "https://docs.nvidia.com/deploy/xid-errors/archive/index.html"
CATALOG_DATE = ("undated page; the copy read lists codes 1-172 and names driver R575 (CUDA 12.9) as the newest "
                "in its 'Xid 154 linkage' column")

#: Resolution bucket -> what to do (NVIDIA's "Guidance Class" sheet, in a few words).
BUCKETS: dict[str, str] = {
    "RESTART_APP": "restart the application (no GPU reset or reboot needed)",
    "RESET_GPU": "reset the GPU (a node reboot is not needed)",
    "RESTART_BM": "restart the bare-metal node",
    "RESTART_VM": "restart the VM that owns the GPU",
    "CONTACT_SUPPORT": "contact your support organisation",
    "IGNORE": "no action required",
    "CHECK_MECHANICALS": "check the GPU's seating and its power and other connections",
    "UPDATE_SWFW": "update the GPU firmware and software",
    "CHECK_UVM": "reset the GPU if UVM or vGPU is in use, else no action",
    "CHECK_APP/CUDA": "check the application: it likely passed bad data or used wrong methods",
    "INVESTIGATE_SW": "investigate the user or NVIDIA software",
    "XID_154": "follow the recovery action the accompanying Xid 154 reports",
    "XID_154_EVAL": "with an Xid 154, take its action; without one, restart the application",
    "WORKFLOW_XID_45": "alone: restart Fabric Manager; with other Xids: follow those",
    "WORKFLOW_XID_48": "alone: reset the GPU; with Xid 63 or 64: drain and reset",
    "WORKFLOW_XID_13": "check the application; repeated on the same TPC/GPC: run DCGM diagnostics",
    "WORKFLOW_XID_31": "check the application; repeated MMU faults on the same GPU: run DCGM diagnostics",
    "WORKFLOW_NVLINK_ERR": "decode the Xid's NVLink registers as the catalog describes",
    "WORKFLOW_NVLINK5_ERR": "decode the Xid's intrInfo and errorStatus with the catalog's Xid 144-150 sheet",
    "XID_137_FLOW": "check the application for an illegal NVLink peer-to-peer access",
    "INVESTIGATE_LINK_SI": "investigate the link's signal integrity",
    "INVESTIGATE_SW_USER": "investigate software or a user action, if unexpected",
    "SYMPATHETIC_REPORT_SOLO": "follow the other errors first; report it if it came alone",
    "IGNORE (sympathetic)": "follow the other errors first; report it if it came alone",
}


@dataclass(frozen=True)
class XidInfo:
    """One code as NVIDIA's catalog describes it; ``catalog`` is ``ampere+``, ``pre-ampere`` or ``none``."""

    code: int
    mnemonic: str
    description: str
    immediate: str
    investigatory: str
    catalog: str
    source: str

    @property
    def known(self) -> bool:
        return self.catalog != "none"

    @property
    def action(self) -> str:
        """The immediate action in words, with its bucket (``RESET_GPU: reset the GPU ...``)."""
        if not self.immediate:
            return "the catalog gives no resolution bucket for this code"
        words = BUCKETS.get(self.immediate)
        return f"{self.immediate}: {words}" if words else self.immediate


@dataclass(frozen=True)
class Consequence:
    """``effect`` raised by the driver because of ``cause`` (any code when ``cause`` is None), and why."""

    effect: int
    cause: frozenset[int] | None
    source: str


#: The catalog's own words for each link (source: :data:`CATALOG_URL` unless another is named).
CONSEQUENCES: tuple[Consequence, ...] = (
    Consequence(45, None, "Xid 45 is 'Preemptive cleanup, due to previous errors'; its investigatory action "
                          "'Not Solo: IGNORE (follow other Xid)'"),
    Consequence(63, frozenset({48, 94, 95, 140}), "Xid 63/64 'are logged when the GPU handles ECC memory errors' "
                                                  "(row remapping or page retirement follows a memory error)"),
    Consequence(64, frozenset({48, 94, 95, 140}), "Xid 63/64 'are logged when the GPU handles ECC memory errors' "
                                                  "(row remapping or page retirement follows a memory error)"),
    Consequence(154, None, "Xid 154 'will be seen in conjunction with other Xids and summarizes the recovery "
                           "action required for other Xids'"),
    Consequence(171, frozenset({48}), "Xid 171 is 'Additional to Xid 48 providing more details'"),
    Consequence(172, frozenset({48}), "Xid 172 is 'Additional to Xid 48 providing more details'"),
    Consequence(48, frozenset({144, 145, 146}), "the catalog's 'XID 144-150 Decode' sheet: fatal NVLink SAW/RLW/TLW "
                                                "errors 'Local: Xid 48, AppCrash (Xid 45)'"),
)


def caused_by(effect: int, earlier: set[int]) -> Consequence | None:
    """The link that makes ``effect`` a consequence of one of the ``earlier`` codes of its burst."""
    for c in CONSEQUENCES:
        if c.effect == effect and (c.cause is None and earlier - {effect} or c.cause and c.cause & earlier):
            return c
    return None


def _rows(name: str) -> list[list[str]]:
    text = resources.files("forensics.parsing").joinpath("data", name).read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return [ln.split("\t") for ln in lines[1:]]


@cache
def _tables() -> tuple[dict[int, XidInfo], dict[int, XidInfo]]:
    modern = {}
    for code, mnemonic, description, _applies, immediate, investigatory in _rows("xid_catalog.tsv"):
        modern[int(code)] = XidInfo(int(code), mnemonic, description, immediate, investigatory, "ampere+", CATALOG_URL)
    older = {int(code): XidInfo(int(code), "", failure, "", "", "pre-ampere", PRE_AMPERE_URL)
             for code, failure in _rows("xid_catalog_pre_ampere.tsv")}
    return modern, older


# GPUs older than Ampere by product name (NVML nvmlDeviceGetName): Volta, Turing, Pascal, Maxwell, Kepler.
_PRE_AMPERE = re.compile(r"\b(V100|TITAN V|T4|T1000|T400|P100|P40|P6|P4|K80|K40|K20|M60|M40|M10|M6|M4|"
                         r"Quadro|GTX|RTX 20\d\d|TITAN RTX|TITAN X)\b", re.IGNORECASE)


def is_pre_ampere(gpu_name: str | None) -> bool:
    return bool(gpu_name) and bool(_PRE_AMPERE.search(gpu_name or ""))


def xid_info(code: int, gpu_name: str | None = None) -> XidInfo:
    """The catalog's entry for ``code``: the older listing for a pre-Ampere GPU (by name), else the
    Ampere+ catalog; a code in neither is ``catalog="none"``."""
    modern, older = _tables()
    if is_pre_ampere(gpu_name) and code in older:
        return older[code]
    if code in modern:
        return modern[code]
    if code in older:
        return older[code]
    return XidInfo(code, "", "not in NVIDIA's Xid catalog", "", "", "none", CATALOG_URL)


def xid_description(code: int, gpu_name: str | None = None) -> str | None:
    """The catalog's description of ``code`` (as :func:`xid_info` chooses the table), None when
    neither table lists it: the text a bundle's Xid records carry beside the code."""
    info = xid_info(code, gpu_name)
    return info.description if info.known else None
