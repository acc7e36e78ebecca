"""gpuforensics: GPU-node incident forensics.

``capture`` writes a timestamped, checksummed, redacted evidence bundle; ``analyze`` reads it (and
nothing else) into findings, an evidence chain and postmortem reports.
"""

from forensics._version import __version__
from forensics.errors import ForensicsError

__all__ = ["ForensicsError", "__version__"]
