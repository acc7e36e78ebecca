"""The kubelet pod-resources API v1: its proto, the generated gRPC modules and a small client.

See README.md here for the proto's source, licence and how the modules were generated.
"""
