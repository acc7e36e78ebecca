"""Pure helpers of the kubernetes collector (no client import): quantities, redaction of pod
specs, the event window, and the derived pods index. The collector itself is
``forensics/collectors/kubernetes.py``; the kubelet pod-resources client is in ``podresources/``.
"""
