"""The ``kubernetes`` source: the collector (kubernetes.py), the client seam (api.py, the only
module here that imports the kubernetes client, lazily), redaction of pod specs and the event
window. Pod indexing and quantities are pure parsing (``forensics/parsing/podindex.py``,
``quantity.py``); the kubelet pod-resources source is ``podresources/``."""
