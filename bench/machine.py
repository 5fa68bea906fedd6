"""The machine a benchmark ran on, for its JSON: the CPU's model name.

A helper the bench scripts import (bench/ is on sys.path when one runs as a script), not a benchmark itself.
"""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what ``platform`` knows of it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
