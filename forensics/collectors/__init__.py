"""Collectors: each knows one source and nothing else. Only this package imports pynvml, docker,
kubernetes and grpc (lazily, inside functions)."""
