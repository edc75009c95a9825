"""The stand-in files for what only a real GB10 box has (nvidia-smi, nvcc and ptxas, /etc/dgx-release, the unified memory pool's
start-up admission); each says it is one."""

from __future__ import annotations

from sparkctl.sim.config import STANDINS


def nvidia_smi() -> bytes:
    return (STANDINS / "nvidia-smi").read_bytes()


def nvcc() -> bytes:
    return (STANDINS / "nvcc").read_bytes()


def ptxas() -> bytes:
    return (STANDINS / "ptxas").read_bytes()


def dgx_release() -> bytes:
    return (STANDINS / "dgx-release").read_bytes()


GB10_MEMORY_PATH = "/usr/local/lib/sparkctl-sim/gb10-memory"  # group_data/sim.py UNIFIED_MEMORY_STANDIN names it


def gb10_memory() -> bytes:
    return (STANDINS / "gb10-memory").read_bytes()
