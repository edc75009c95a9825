"""Preflight: validate the configuration (no host contact), then read facts and refuse a box that is not a GX10."""

from __future__ import annotations

from pyinfra import host, inventory, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.files import File
from pyinfra.facts.server import Arch, OsRelease

from sparkctl.check import validate_host
from sparkctl.config.quantities import GIB
from sparkctl.config.settings import Settings
from sparkctl.errors import SparkctlError
from tasks.facts import DiskAvailable, GpuInfo


class Refused(PyinfraError):
    """A check failed before the host was changed."""


def settings_for_host() -> Settings:
    """The whole offline validation (sparkctl.check, what `python -m sparkctl check` runs) of this host's merged
    data; bad input stops the deploy here, before any command runs."""
    try:
        hosts = [h.name for h in inventory.get_group("gx10")]
        settings = validate_host(host.data.dict(), host.name, hosts=hosts)  # address: ssh_hostname, else the name
    except SparkctlError as exc:
        raise Refused(f"{host.name}: {exc}") from None
    for w in settings.warnings:
        logger.warning(f"{host.name}: WARNING: {w}")
    return settings


def marker_path(settings: Settings, cp) -> str:
    return cp.marker_path(settings.cfg.MODEL_STORE)


def check_facts(settings: Settings, arch: str, os_release: dict, gpu: dict | None, is_dgx: bool,
                disk_free: int, pending_bytes: int) -> list[str]:
    """Pure: every fact compared with what the settings expect; returns the refusals."""
    cfg = settings.cfg
    os_release = os_release or {}
    problems = []
    if arch not in cfg.EXPECTED_ARCH:
        problems.append(f"architecture `uname -m` = {arch!r}; EXPECTED_ARCH accepts {cfg.EXPECTED_ARCH}")
    os_id = f"{os_release.get('id', '?')} {os_release.get('version_id', '?')}"
    if os_id not in cfg.EXPECTED_OS:
        problems.append(f"OS /etc/os-release = {os_id!r}; EXPECTED_OS accepts {cfg.EXPECTED_OS}")
    if gpu is not None:
        if "error" in gpu:
            problems.append(f"nvidia-smi failed: {gpu['error']!r} (a driver installed without a reboot?)")
        elif cfg.REQUIRED_GPU.lower() not in gpu["name"].lower():
            problems.append(f"GPU `nvidia-smi --query-gpu=name` = {gpu['name']!r}; REQUIRED_GPU is "
                            f"{cfg.REQUIRED_GPU!r}")
        elif gpu["compute_cap"] != cfg.REQUIRED_COMPUTE_CAP:
            problems.append(f"GPU compute capability {gpu['compute_cap']}; REQUIRED_COMPUTE_CAP is "
                            f"{cfg.REQUIRED_COMPUTE_CAP}")
    elif is_dgx:
        problems.append(f"{cfg.DGX_RELEASE_FILE} exists but nvidia-smi does not: DGX OS ships the driver, "
                        f"so this box's NVIDIA stack is broken; the deploy will not install one over DGX OS")
    need = pending_bytes + int(cfg.DISK_HEADROOM_GIB * GIB)
    if disk_free is None:
        problems.append(f"disk: could not read the free space under MODEL_STORE={cfg.MODEL_STORE} (df)")
    elif disk_free < need:
        problems.append(f"disk: {disk_free / GIB:.1f} GiB free under MODEL_STORE={cfg.MODEL_STORE}, but the "
                        f"pending downloads need {pending_bytes / GIB:.1f} GiB plus DISK_HEADROOM_GIB="
                        f"{cfg.DISK_HEADROOM_GIB}")
    return problems


@deploy("Preflight")
def preflight(settings: Settings) -> dict:
    cfg = settings.cfg
    arch = host.get_fact(Arch)
    os_release = host.get_fact(OsRelease)
    gpu = host.get_fact(GpuInfo)
    is_dgx = bool(host.get_fact(File, path=cfg.DGX_RELEASE_FILE))
    pending = [cp for cp in settings.checkpoints if not host.get_fact(File, path=marker_path(settings, cp))]
    pending_bytes = sum(cp.total_bytes for cp in pending)
    disk_free = host.get_fact(DiskAvailable, path=cfg.MODEL_STORE)
    problems = check_facts(settings, arch, os_release, gpu, is_dgx, disk_free, pending_bytes)
    if problems:
        raise Refused(f"{host.name}: preflight refused this box (nothing was changed):\n  - " + "\n  - ".join(problems))
    gpu_text = f"{gpu['name']} (cc {gpu['compute_cap']}, driver {gpu['driver_version']})" if gpu else "no driver yet"
    logger.info(f"{host.name}: preflight ok: {arch}, {os_release.get('pretty_name', '?')}, {gpu_text}, "
                f"{'DGX OS' if is_dgx else 'plain OS'}, {len(pending)} checkpoint(s) to download "
                f"({pending_bytes / GIB:.2f} GiB), {disk_free / GIB:.1f} GiB free")
    return {"is_dgx": is_dgx, "gpu": gpu}
