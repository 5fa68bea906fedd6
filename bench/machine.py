"""The machine a benchmark ran on, for its JSON: the CPU's model name and the vector units that set its speed.

A helper the bench scripts import (bench/ is on sys.path when one runs as a script), not a benchmark itself.
"""

from __future__ import annotations

import platform
from pathlib import Path

# the flags that decide which kernels run (bf16 autocast, fp16 scans, AMX): /proc/cpuinfo's names
FEATURES = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16")


def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo) with its ``FEATURES`` in brackets (cloud CPUs are often named
    only "Intel Xeon Processor"), else what ``platform`` knows of it."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown"
    name = next((x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")), "")
    flags = set(next((x.split(":", 1)[1].split() for x in lines if x.startswith("flags")), []))
    have = [f for f in FEATURES if f in flags]
    return (f"{name} ({', '.join(have)})" if have else name) or platform.processor() or "unknown"
