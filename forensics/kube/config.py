"""Finding and loading the Kubernetes client configuration, in the order the caller asks for.

- :data:`KUBECTL_ORDER` (cluster capture: the person running it is usually outside the cluster):
  ``--kubeconfig``, else ``$KUBECONFIG`` (a ``:``-separated list, merged as kubectl merges it),
  else ``~/.kube/config``, else the in-cluster service account.
- :data:`CAPTURE_ORDER` (the kubernetes collector, usually in a pod on the node): ``--kubeconfig``,
  else the in-cluster service account, else ``$KUBECONFIG``, else ``~/.kube/config``.

:func:`find_config` only looks (environment and ``stat``; the client is not imported), so "is there
any configuration?" costs nothing on a host outside any cluster. :func:`load_config` loads what
was found into a client ``Configuration`` with urllib3 retries off (one attempt per call: the
callers own their time budgets) or raises :class:`ConfigError`; the callers word it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from forensics.kube.errors import KubeError

__all__ = ["CAPTURE_ORDER", "KUBECTL_ORDER", "SA_TOKEN", "ConfigError", "LoadedConfig", "Origin", "find_config",
           "load_config"]

SA_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"

Place = Literal["kubeconfig-option", "KUBECONFIG", "home", "in-cluster"]
KUBECTL_ORDER: tuple[Place, ...] = ("kubeconfig-option", "KUBECONFIG", "home", "in-cluster")
CAPTURE_ORDER: tuple[Place, ...] = ("kubeconfig-option", "in-cluster", "KUBECONFIG", "home")


@dataclass(frozen=True)
class Origin:
    """Where a configuration was found: ``place``, and the kubeconfig path (or ``KUBECONFIG``'s
    list) it names; ``path`` is None for the in-cluster service account."""

    place: Place
    path: str | None


@dataclass(frozen=True)
class LoadedConfig:
    """A client configuration, where it came from, and the context asked for."""

    configuration: Any
    origin: Origin
    context: str | None

    @property
    def source(self) -> str:
        """``in-cluster`` or ``kubeconfig:<path>`` (as the bundle's kubernetes members record it)."""
        return "in-cluster" if self.origin.path is None else f"kubeconfig:{self.origin.path}"


class ConfigError(KubeError):
    """The configuration found could not be loaded: kind ``not-yaml`` (a kubeconfig that is not
    YAML at all) or ``unusable`` (the client refused it). ``origin`` is what was tried; ``detail``
    the library's own words, unshortened (each caller shortens and words them its own way)."""

    def __init__(self, kind: str, origin: Origin, detail: str) -> None:
        super().__init__(kind, detail)
        self.origin = origin
        self.detail = detail


def find_config(kubeconfig: str | None, order: tuple[Place, ...]) -> Origin | None:
    """The first configuration present, in ``order``; None when there is none."""
    for place in order:
        if place == "kubeconfig-option" and kubeconfig:
            return Origin(place, kubeconfig)
        if place == "KUBECONFIG" and os.environ.get("KUBECONFIG"):
            return Origin(place, os.environ["KUBECONFIG"])
        if place == "home" and os.path.exists(home := os.path.expanduser("~/.kube/config")):
            return Origin(place, home)
        if place == "in-cluster" and os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(SA_TOKEN):
            return Origin(place, None)
    return None


def load_config(origin: Origin, context: str | None) -> LoadedConfig:
    """Load the configuration found at ``origin`` (``context`` picks a kubeconfig's context);
    :class:`ConfigError` when the client cannot use it."""
    from kubernetes import client
    from kubernetes import config as _config
    from kubernetes.config.config_exception import ConfigException
    from yaml import YAMLError  # type: ignore[import-untyped]

    config: Any = _config  # untyped library functions
    cfg = client.Configuration()
    try:
        if origin.path is None:
            config.load_incluster_config(client_configuration=cfg)
        else:  # the client merges a KUBECONFIG list itself
            config.load_kube_config(config_file=origin.path, context=context, client_configuration=cfg,
                                    persist_config=False)
    except YAMLError as exc:
        raise ConfigError("not-yaml", origin, str(exc)) from None
    except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError("unusable", origin, str(exc)) from None
    cfg.retries = False  # one attempt per call: the budget is the caller's, not urllib3's
    return LoadedConfig(cfg, origin, context)
