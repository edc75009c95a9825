"""NVIDIA driver + CUDA 13: nothing on DGX OS; on a plain Ubuntu 24.04 box, NVIDIA's CUDA repo and packages."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy, operation
from pyinfra.facts.files import File
from pyinfra.operations import apt

from sparkctl.config.settings import Settings
from sparkctl.errors import Refused
from tasks.common import fail
from tasks.facts import GpuInfo


def driver_major(gpu: dict | None) -> int:
    try:
        return int(str((gpu or {}).get("driver_version", "")).split(".")[0])
    except ValueError:
        return 0


@deploy("NVIDIA driver and CUDA")
def nvidia(settings: Settings, is_dgx: bool, gpu: dict | None) -> None:
    cfg = settings.cfg
    nvcc = f"{cfg.CUDA_HOME}/bin/nvcc"
    has_cuda = bool(host.get_fact(File, path=nvcc))
    driver_ok = driver_major(gpu) >= cfg.NVIDIA_DRIVER_BRANCH
    if is_dgx:
        if not (driver_ok and has_cuda):
            raise Refused(f"{host.name}: DGX OS box without driver >= {cfg.NVIDIA_DRIVER_BRANCH} "
                          f"(have {gpu and gpu.get('driver_version')}) or CUDA at {nvcc}; update DGX OS "
                          f"(its stack updates as one unit) instead of installing NVIDIA packages over it")
        else:
            host.noop(f"DGX OS: driver {gpu['driver_version']} and CUDA {cfg.CUDA_VERSION} come with the OS")
        return
    if driver_ok and has_cuda:
        host.noop(f"driver {gpu['driver_version']} and CUDA at {cfg.CUDA_HOME} already installed")
        return
    apt.packages(name="Install what fetching NVIDIA's keyring needs (curl, CA certificates)",
                 packages=cfg.NVIDIA_PREREQ_PACKAGES, update=True, cache_time=cfg.APT_CACHE_TIME_S)
    keyring = apt.deb(name="Install NVIDIA's CUDA repository keyring (cuda-keyring)", src=cfg.NVIDIA_KEYRING_DEB_URL)
    apt.update(name="Refresh apt lists after adding NVIDIA's repository", _if=keyring.did_change)
    apt.packages(name=f"Install NVIDIA driver {cfg.NVIDIA_DRIVER_BRANCH} and CUDA {cfg.CUDA_VERSION}",
                 packages=cfg.NVIDIA_DRIVER_PACKAGES + cfg.CUDA_PACKAGES)
    # a new kernel driver is only usable after a reboot: the deploy stops and says so instead of rebooting
    require_driver(name="Check the NVIDIA driver answers", required_gpu=cfg.REQUIRED_GPU,
                   min_driver=cfg.NVIDIA_DRIVER_BRANCH)


@operation()
def require_driver(required_gpu: str, min_driver: int):
    """At execute time, after the packages: the new driver must answer, else stop and say to reboot."""
    if not host.state.is_executing:
        host.noop("checked after the driver packages are installed")
        return
    gpu = host.get_fact(GpuInfo)
    ok = gpu and "error" not in gpu and required_gpu.lower() in gpu["name"].lower()
    if ok and int(gpu["driver_version"].split(".")[0]) >= min_driver:
        host.noop(f"{gpu['name']} answers with driver {gpu['driver_version']}")
        return
    yield fail(f"the NVIDIA driver is installed but the GPU does not answer yet ({gpu}); reboot the box "
               f"(sudo reboot: a new kernel module loads at boot) and rerun the deploy")
