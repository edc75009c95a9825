"""The stand-in files for what only a real GB10 box has (nvidia-smi, nvcc, /etc/dgx-release); each says it is one."""

from __future__ import annotations

from sparkctl.sim.config import STANDINS


def nvidia_smi() -> bytes:
    return (STANDINS / "nvidia-smi").read_bytes()


def nvcc() -> bytes:
    return (STANDINS / "nvcc").read_bytes()


def dgx_release() -> bytes:
    return (STANDINS / "dgx-release").read_bytes()
