"""The Kubernetes client seam shared by the kubernetes collector and ``cluster capture``: the one
place outside ``forensics/collectors/`` that imports the ``kubernetes`` client (ruff's banned-api
exception in pyproject.toml names this package, and no module of ``forensics/cluster/``).

::

    config.py   find the configuration in the order the caller asks for (kubectl's, or
                capture's) and load it into a client ``Configuration``; :class:`ConfigError`
    client.py   :class:`ApiConnection`: requests through the client's ``ApiClient``, raw bodies,
                and the ``exec`` WebSocket
    errors.py   :class:`KubeError` (a failure with a ``kind``), neutral: each caller words it and
                raises its own exception (``SourceUnavailable``, ``ClusterError``)

The callers keep what is theirs: the collector its GET and watch calls under a time budget and
their log (``collectors/kubernetes/api.py``), cluster capture its JSON requests and the exec
stream (``cluster/kube.py``). ``kubernetes`` is imported lazily, inside the functions that use it.
"""

from forensics.kube.config import (
    CAPTURE_ORDER,
    KUBECTL_ORDER,
    SA_TOKEN,
    ConfigError,
    LoadedConfig,
    Origin,
    find_config,
    load_config,
)
from forensics.kube.errors import ClientRefused, KubeError

__all__ = ["CAPTURE_ORDER", "KUBECTL_ORDER", "SA_TOKEN", "ClientRefused", "ConfigError", "KubeError", "LoadedConfig",
           "Origin", "find_config", "load_config"]
