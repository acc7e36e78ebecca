"""Helpers of the kubernetes collector: the client seam (api.py, the only module here that imports
the kubernetes client, lazily), and pure parts: quantities, redaction of pod
specs, the event window, and the derived pods index. The collector itself is
``forensics/collectors/kubernetes.py``; the kubelet pod-resources client is in ``podresources/``.
"""
