"""Helpers the tests share: real engines, simulated libraries, loopback servers, hostile bundles."""
