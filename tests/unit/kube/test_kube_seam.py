"""The Kubernetes client seam (forensics.kube) as its two callers use it: cluster capture finds
the configuration in kubectl's order, the kubernetes collector in capture's; each words a
configuration it cannot load its own way (``ClusterError``, ``SourceUnavailable``), and a failed
call is one error type to both."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forensics.cluster.kube import APIError, load_client_config
from forensics.collectors.kubernetes.api import CallFailed, load_config
from forensics.errors import ClusterError, SourceUnavailable
from tests.support.kube_apiserver import write_kubeconfig
from tests.support.kube_testing import clean_kube_env

__all__ = ["clean_kube_env"]  # fixture used by name


@pytest.fixture
def in_cluster(tmp_path: Path, clean_kube_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod's service account: the token and CA files, and the in-cluster variables."""
    import kubernetes.config.incluster_config as incluster

    import forensics.kube.config as kube_config

    token, cert = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token-abc")
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(incluster, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster, "SERVICE_CERT_FILENAME", str(cert))
    monkeypatch.setattr(kube_config, "SA_TOKEN", str(token))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")


def test_each_caller_keeps_its_order(in_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With both a KUBECONFIG and a service account: kubectl's order takes KUBECONFIG (cluster
    capture runs from a workstation), capture's the service account (the collector runs in a pod)."""
    kc = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", str(kc))
    cluster = load_client_config(None, None)
    collector = load_config(None, None)
    assert cluster.configuration.host == "http://127.0.0.1:1" and cluster.source == f"kubeconfig:{kc}"
    assert collector.configuration.host == "https://10.96.0.1:443" and collector.source == "in-cluster"
    assert cluster.configuration.retries is False and collector.configuration.retries is False


def test_home_kubeconfig_is_found_by_both(clean_kube_env: None, tmp_path: Path) -> None:
    (tmp_path / "home" / ".kube").mkdir()
    home_kc = write_kubeconfig(tmp_path / "home" / ".kube" / "config", "http://127.0.0.1:2")
    assert load_client_config(None, None).source == load_config(None, None).source == f"kubeconfig:{home_kc}"


def test_a_context_with_only_the_service_account_is_refused_by_cluster_capture(in_cluster: None) -> None:
    with pytest.raises(ClusterError) as refused:
        load_client_config(None, "prod")
    assert str(refused.value) == "--context needs a kubeconfig; only the in-cluster service account was found"
    assert load_config(None, "prod").source == "in-cluster"  # the collector ignores it, as before


def test_no_configuration_in_each_callers_words(clean_kube_env: None) -> None:
    with pytest.raises(ClusterError) as cluster:
        load_client_config(None, None)
    with pytest.raises(SourceUnavailable) as collector:
        load_config(None, None)
    assert str(cluster.value) == ("no Kubernetes configuration: no --kubeconfig, KUBECONFIG or ~/.kube/config, "
                                  "and not running in a cluster")
    assert str(collector.value) == ("no Kubernetes configuration (not in a cluster; no --kubeconfig, KUBECONFIG "
                                    "or ~/.kube/config)")


def test_a_bad_kubeconfig_in_each_callers_words(clean_kube_env: None, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    garbage = tmp_path / "garbage"
    garbage.write_text("garbage: [\n  - : :\n")
    with pytest.raises(ClusterError) as cluster:
        load_client_config(str(garbage), None)
    with pytest.raises(SourceUnavailable) as collector:
        load_config(str(garbage), None)
    assert str(cluster.value).startswith(f"kubeconfig {garbage}: not valid YAML: ")
    assert str(collector.value).startswith(f"Kubernetes configuration not usable ({garbage}, --kubeconfig): "
                                           "not valid YAML: ")
    # the same first 200 characters of the parser's words, blanks collapsed, in both
    assert str(cluster.value).split("not valid YAML: ")[1] == str(collector.value).split("not valid YAML: ")[1]
    assert len(str(cluster.value).split("not valid YAML: ")[1]) <= 200

    kc = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", str(kc))
    with pytest.raises(ClusterError) as cluster:
        load_client_config(None, "nope")
    with pytest.raises(SourceUnavailable) as collector:
        load_config(None, "nope")
    assert str(cluster.value).startswith(f"kubeconfig {kc}: ") and "nope" in str(cluster.value)
    assert str(collector.value).startswith(f"Kubernetes configuration not usable ({kc}, from KUBECONFIG): ")
    assert str(cluster.value).removeprefix(f"kubeconfig {kc}: ") == " ".join(
        str(collector.value).removeprefix(f"Kubernetes configuration not usable ({kc}, from KUBECONFIG): ").split())[:300]


def test_a_failed_call_is_one_error_type() -> None:
    assert APIError is CallFailed
    failed = CallFailed("forbidden", "no", 403)
    assert (failed.kind, failed.status, str(failed)) == ("forbidden", 403, "no")


@pytest.fixture
def not_tls(clean_kube_env: None) -> Iterator[str]:
    """A loopback listener that answers a TLS handshake with plain text: the client refuses the
    request itself (its ``ApiException``), which the seam hands on as ``ClientRefused``."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def answer() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 not tls\r\n\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_a_request_the_client_will_not_send_is_unreachable_in_both(not_tls: str, tmp_path: Path) -> None:
    from forensics.cluster.kube import Kube
    from forensics.collectors.kubernetes.api import KubeAPI

    kc = str(write_kubeconfig(tmp_path / "kc", not_tls))
    kube = Kube(load_client_config(kc, None), call_timeout_s=5, connect_timeout_s=5)
    try:
        with pytest.raises(APIError) as cluster:
            kube.request("GET", "/api/v1/nodes")
    finally:
        kube.close()
    api = KubeAPI(load_config(kc, None), time.monotonic() + 10, call_timeout_s=5, connect_timeout_s=5)
    try:
        with pytest.raises(CallFailed) as collector:
            api.get("/api/v1/nodes")
    finally:
        api.close()
    assert cluster.value.kind == collector.value.kind == "unreachable"
    reason = str(cluster.value).removeprefix("GET /api/v1/nodes: ")
    assert "SSL" in reason and len(reason) <= 300
    assert str(collector.value) == f"/api/v1/nodes: {reason}"  # the client's reason, worded by each caller
    assert [(r.outcome, r.error) for r in api.log] == [("unreachable", reason)]
