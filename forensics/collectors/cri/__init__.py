"""The Kubernetes Container Runtime Interface (CRI) ``runtime.v1``: its proto, the generated
gRPC modules, a small client (``client.py``), redaction (``redaction.py``) and the ``cri``
collector (``collector.py``).

See README.md here for the proto's source, version, licence and how the modules were generated.
"""
