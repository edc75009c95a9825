"""Units of measure, defined once: every control-side module imports them from here (the stdlib-only box scripts
in sparkctl/box/ carry their own, since they cannot import sparkctl).

Settings name their unit in their own name: *_GIB is binary (GIB), *_GB / *_GBPS decimal (GB), *_S seconds.
"""

from __future__ import annotations

KIB = 2**10  # bytes
MIB = 2**20  # bytes
GIB = 2**30  # bytes: memory sizes, KV budgets, disk headroom (what CUDA and vLLM report in "GiB")
TIB = 2**40  # bytes
GB = 10**9  # bytes: bandwidth (GB/s) and weight bytes per decode step, decimal as published
DAY_S = 86_400  # seconds
