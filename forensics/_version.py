"""The tool's version, kept apart so it is importable without anything else."""

__version__ = "0.1.0"
