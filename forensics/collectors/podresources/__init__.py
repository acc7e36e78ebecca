"""The ``podresources`` source, the kubelet pod-resources API v1: the collector (collector.py), its
proto, the generated gRPC modules and a small client (client.py).

See README.md here for the proto's source, licence and how the modules were generated.
"""
