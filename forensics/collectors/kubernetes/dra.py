"""Dynamic Resource Allocation objects of the node and its pods (``resource.k8s.io``), as the API
server sent them, for the grant model (forensics.parsing.dra, forensics.analysis.allocation_kubernetes).

Calls (through the collector's :class:`~forensics.collectors.kubernetes.api.KubeAPI`: the real
kubernetes client's ``ApiClient``; the generic path keeps every version the server may offer, where
the client's typed models know only some):

- ``GET /apis/resource.k8s.io`` (the group's discovery document): the versions the server offers;
  ``v1`` is read when offered, else ``v1beta2``, else ``v1beta1`` (whose devices nest attributes
  under ``basic``) -> ``kubernetes/resource-api.json`` (offered, preferred, read). A 404 (a cluster
  without DRA) is recorded there and is no failure; a 403 is recorded and makes the collector partial.
- ``GET /apis/resource.k8s.io/{v}/resourceslices?fieldSelector=spec.nodeName={node}`` ->
  ``kubernetes/resourceslices.json`` (the node's devices: NVIDIA's ``gpu-<minor>`` with ``uuid``);
- ``GET /apis/resource.k8s.io/{v}/namespaces/{ns}/resourceclaims`` for the namespaces of the node's
  pods that use claims -> ``kubernetes/resourceclaims.json``: the claims those pods name
  (``spec.resourceClaims[].resourceClaimName``, ``status.resourceClaimStatuses[]``,
  ``status.extendedResourceClaimStatus``) and those reserved for them (``status.reservedFor``);
- ``GET /apis/resource.k8s.io/{v}/deviceclasses/{name}`` for each DeviceClass those claims request
  -> ``kubernetes/deviceclasses.json``.

Each member is a List of the items as sent (``apiVersion`` the version read), their metadata
(labels, annotations, last-applied configuration) redacted as every object's. What a driver or an
administrator may put anything in is redacted too (``k8s.io/api`` ``resource/v1/types.go``): the
opaque configuration's ``parameters`` of a claim (``spec.devices.config[]``,
``status.allocation.devices.config[]``) and of a DeviceClass (``spec.config[]``), and a device's
driver ``data`` in ``status.devices[]``: every string under a secret-looking key becomes a
pseudonym, every other string goes through the free-text redaction; keys, numbers and NVIDIA's
``GpuConfig`` ``sharing`` settings (no secret-looking key) stay as sent.
"""

from __future__ import annotations

from typing import Any

from forensics.bundle.redact import looks_secret_label_key
from forensics.bundle.redact_kubernetes import redact_object_metadata
from forensics.specs import kubernetes as kspec

__all__ = ["GROUP", "VERSIONS", "claim_names", "collect_dra", "device_class_names"]

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta2", "v1beta1")  # preferred first


def claim_names(pods: list[Any]) -> dict[str, set[str]]:
    """namespace -> the ResourceClaim names the pods use (by name, generated, extended resource)."""
    out: dict[str, set[str]] = {}
    for pod in pods:
        if not isinstance(pod, dict):
            continue
        ns = (pod.get("metadata") or {}).get("namespace")
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        names: set[str] = set()
        for rc in spec.get("resourceClaims") or []:
            if isinstance(rc, dict) and isinstance(rc.get("resourceClaimName"), str):
                names.add(rc["resourceClaimName"])
        for st in status.get("resourceClaimStatuses") or []:
            if isinstance(st, dict) and isinstance(st.get("resourceClaimName"), str):
                names.add(st["resourceClaimName"])
        ext = status.get("extendedResourceClaimStatus") or {}
        if isinstance(ext, dict) and isinstance(ext.get("resourceClaimName"), str):
            names.add(ext["resourceClaimName"])
        uses = bool(spec.get("resourceClaims")) or bool(ext)
        if isinstance(ns, str) and (names or uses):
            out.setdefault(ns, set()).update(names)
    return out


def device_class_names(claims: list[Any]) -> list[str]:
    """The DeviceClasses the claims request (v1 ``exactly``/``firstAvailable``; v1beta1 top level)."""
    out: set[str] = set()
    for claim in claims:
        requests = (((claim.get("spec") or {}).get("devices") or {}).get("requests") or []) if isinstance(claim, dict) else []
        for r in requests:
            if not isinstance(r, dict):
                continue
            for holder in (r, r.get("exactly") or {}, *(r.get("firstAvailable") or [])):
                if isinstance(holder, dict) and isinstance(holder.get("deviceClassName"), str):
                    out.add(holder["deviceClassName"])
    return sorted(out)


def _redact_free_json(value: Any, redactor: Any, secret: bool = False) -> Any:
    """Arbitrary JSON a driver or an administrator wrote, redacted (see the module docstring)."""
    if isinstance(value, dict):
        for k, v in value.items():
            value[k] = _redact_free_json(v, redactor, secret or looks_secret_label_key(str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            value[i] = _redact_free_json(v, redactor, secret)
    elif isinstance(value, str) and value:
        return redactor.pseudonym(value, "dra") if secret else redactor.text(value, "dra")
    return value


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


# what each kind holds that its writer may fill with anything: (a list's path, each entry's field's path)
_FREE_JSON: dict[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]] = {
    "ResourceClaimList": ((("spec", "devices", "config"), ("opaque", "parameters")),
                          (("status", "allocation", "devices", "config"), ("opaque", "parameters")),
                          (("status", "devices"), ("data",))),
    "DeviceClassList": ((("spec", "config"), ("opaque", "parameters")),),
}


def _list_doc(version: str, kind: str, items: list[Any], redactor: Any) -> dict[str, Any]:
    if redactor.enabled:
        for item in items:
            if not isinstance(item, dict):
                continue
            redact_object_metadata(item.get("metadata"), redactor)
            for list_path, field in _FREE_JSON.get(kind, ()):
                entries = _at(item, list_path)
                for entry in entries if isinstance(entries, list) else []:
                    holder = _at(entry, field[:-1])
                    if isinstance(holder, dict) and field[-1] in holder:
                        holder[field[-1]] = _redact_free_json(holder[field[-1]], redactor)
    return {"apiVersion": f"{GROUP}/{version}", "kind": kind, "metadata": {}, "items": items}


def collect_dra(ctx: Any, api: Any, node_name: str, pods: list[Any], pod_uids: set[str],
                failures: dict[str, Any]) -> None:
    """Read and write the node's DRA objects (see the module docstring)."""
    from forensics.collectors.kubernetes.api import CallFailed

    record: dict[str, Any] = {"group": GROUP, "offered": [], "preferred": None, "read": None, "error": None}
    try:
        try:
            group = api.get_json(f"/apis/{GROUP}")
        except CallFailed as exc:
            record["error"] = str(exc)
            if exc.kind == "not-found":
                ctx.note(f"{GROUP} not served (no Dynamic Resource Allocation): {exc}")
            else:
                failures.setdefault("dra", exc)
                ctx.partial(f"{GROUP} discovery: {exc}")
            return
        offered = [v.get("version") for v in group.get("versions") or [] if isinstance(v, dict)]
        record["offered"] = [v for v in offered if isinstance(v, str)]
        preferred = group.get("preferredVersion")
        record["preferred"] = preferred.get("version") if isinstance(preferred, dict) else None
        version = next((v for v in VERSIONS if v in record["offered"]), None)
        if version is None:
            record["error"] = f"none of {', '.join(VERSIONS)} offered"
            ctx.note(f"{GROUP}: {record['error']}")
            return
        record["read"] = version
        base = f"/apis/{GROUP}/{version}"
        errors: list[str] = []
        try:
            _, slices = api.list_all(f"{base}/resourceslices", {"fieldSelector": f"spec.nodeName={node_name}"})
            ctx.sink.write_json(kspec.RESOURCE_SLICES, _list_doc(version, "ResourceSliceList", slices, ctx.redactor))
        except CallFailed as exc:
            errors.append(str(exc))
            failures.setdefault("dra", exc)
        wanted = claim_names(pods)
        kept: list[Any] = []
        listed_ok = False
        for ns in sorted(wanted):
            try:
                _, items = api.list_all(f"{base}/namespaces/{ns}/resourceclaims")
            except CallFailed as exc:
                errors.append(str(exc))
                failures.setdefault("dra", exc)
                if exc.kind in ("timed-out", "budget"):
                    break
                continue
            listed_ok = True
            for item in items:
                meta = item.get("metadata") if isinstance(item, dict) else None
                status = item.get("status") if isinstance(item, dict) else None
                reserved = {r.get("uid") for r in ((status or {}).get("reservedFor") or []) if isinstance(r, dict)}
                if isinstance(meta, dict) and (meta.get("name") in wanted[ns] or reserved & pod_uids):
                    kept.append(item)
        if listed_ok:
            classes = device_class_names(kept)
            ctx.sink.write_json(kspec.RESOURCE_CLAIMS, _list_doc(version, "ResourceClaimList", kept, ctx.redactor))
            found: list[Any] = []
            for name in classes:
                try:
                    found.append(api.get_json(f"{base}/deviceclasses/{name}"))
                except CallFailed as exc:
                    errors.append(str(exc))
                    if exc.kind in ("timed-out", "budget"):
                        break
            if classes:
                ctx.sink.write_json(kspec.DEVICE_CLASSES, _list_doc(version, "DeviceClassList", found, ctx.redactor))
            ctx.note(f"{GROUP}/{version}: {len(kept)} claims of this node's pods, {len(found)} device classes")
        if errors:
            record["error"] = errors[0]
            ctx.partial(f"{GROUP}: {errors[0]}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    finally:
        ctx.sink.write_json(kspec.RESOURCE_API, record)
