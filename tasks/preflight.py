"""Preflight: validate the configuration (no host contact), then read facts and refuse a box that is not a GX10."""

from __future__ import annotations

from pyinfra import host, inventory, logger
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.facts.server import Arch, OsRelease

from sparkctl.capacity import admission
from sparkctl.check.validate import validate_host
from sparkctl.config.hosts import per_host_models
from sparkctl.config.quantities import GIB
from sparkctl.config.settings import Settings
from sparkctl.errors import Refused, SparkctlError
from tasks.facts import DeviceGroups, DiskAvailable, GpuInfo, MemTotal, PlannedHolds, SystemUser, account_problems


def settings_for_host() -> Settings:
    """The whole offline validation (sparkctl.check, what `python -m sparkctl check` runs) of this host's merged
    data; bad input stops the deploy here, before any command runs."""
    try:
        hosts = [h.name for h in inventory.get_group("gx10")]
        settings = validate_host(host.data.dict(), host.name, hosts=hosts,  # address: ssh_hostname, else the name
                                 host_models=per_host_models())  # a box's own CODING_MODEL (SPARK_CODING_MODELS)
    except SparkctlError as exc:
        raise Refused(f"{host.name}: {exc}") from None
    for w in settings.warnings:
        logger.warning(f"{host.name}: WARNING: {w}")
    for note in settings.notes:
        logger.info(f"{host.name}: checked offline: {note}")
    return settings


def check_facts(settings: Settings, arch: str, os_release: dict, gpu: dict | None, is_dgx: bool,
                disk_free: int, pending_bytes: int, mem_total: int | None = None,
                service_user: dict | None = None, devices: dict | None = None) -> list[str]:
    """Pure: every fact compared with what the settings expect; returns the refusals. mem_total: MemTotal in bytes
    (None: not read); service_user: the SystemUser fact of SERVICE_USER (None: not read); devices: the DeviceGroups
    fact (None: not read, no driver answers yet)."""
    cfg = settings.cfg
    os_release = os_release or {}
    problems = []
    if arch not in cfg.EXPECTED_ARCH:
        problems.append(f"architecture `uname -m` = {arch!r}; EXPECTED_ARCH accepts {cfg.EXPECTED_ARCH}")
    os_id = f"{os_release.get('id', '?')} {os_release.get('version_id', '?')}"
    if os_id not in cfg.EXPECTED_OS:
        problems.append(f"OS /etc/os-release = {os_id!r}; EXPECTED_OS accepts {cfg.EXPECTED_OS}")
    problems += _gpu_problems(cfg, gpu, is_dgx)
    need = pending_bytes + int(cfg.DISK_HEADROOM_GIB * GIB)
    if disk_free is None:
        problems.append(f"disk: could not read the free space under MODEL_STORE={cfg.MODEL_STORE} (df)")
    elif disk_free < need:
        problems.append(f"disk: {disk_free / GIB:.1f} GiB free under MODEL_STORE={cfg.MODEL_STORE}, but the "
                        f"pending downloads need {pending_bytes / GIB:.1f} GiB plus DISK_HEADROOM_GIB="
                        f"{cfg.DISK_HEADROOM_GIB}")
    return problems + _memory_problems(cfg, mem_total) + _user_problems(cfg, service_user) + \
        _device_problems(cfg, devices)


def rollout_admission(settings: Settings, holds: dict) -> list[str]:
    """Each of this deploy's vLLM starts, in rollout order, beside what the box runs now (sparkctl/capacity/admission.py
    walk_rollout; `check` walked the configuration's own starts already): a start vLLM's admission would refuse."""
    return [f"{s.service} ({s.start}): vLLM would refuse it: {s.arithmetic(settings.cfg)}. Deploy what frees memory "
            f"first (the smaller budgets alone), then what takes it; or lower {s.setting or 'its KV budget'}"
            for s in admission.walk_rollout(settings, holds) if not s.admitted]


def _gpu_problems(cfg, gpu: dict | None, is_dgx: bool) -> list[str]:
    if gpu is None:
        return [f"{cfg.DGX_RELEASE_FILE} exists but nvidia-smi does not: DGX OS ships the driver, so this box's "
                f"NVIDIA stack is broken; the deploy will not install one over DGX OS"] if is_dgx else []
    if "error" in gpu:
        return [f"nvidia-smi failed: {gpu['error']!r} (a driver installed without a reboot?)"]
    if cfg.REQUIRED_GPU.lower() not in gpu["name"].lower():
        return [f"GPU `nvidia-smi --query-gpu=name` = {gpu['name']!r}; REQUIRED_GPU is {cfg.REQUIRED_GPU!r}"]
    if gpu["compute_cap"] != cfg.REQUIRED_COMPUTE_CAP:
        return [f"GPU compute capability {gpu['compute_cap']}; REQUIRED_COMPUTE_CAP is {cfg.REQUIRED_COMPUTE_CAP}"]
    return []


def driver_answers(gpu: dict | None) -> bool:
    return gpu is not None and "error" not in gpu


def _device_problems(cfg, fact: dict | None) -> list[str]:
    """Once the driver answers: every VLLM_DEVICE_PREPARE program is on the box, and every NVIDIA_DEVICES group is in
    its /proc/devices (after that preparation): systemd allows nothing for a group the box does not have, and CUDA
    in the sandboxed service would then fail at its first start."""
    if fact is None:
        return []
    problems = [f"VLLM_DEVICE_PREPARE: {exe} is not on this box (sparkctl-devices.service runs it as root at every "
                f"boot, before the vLLM units)"
                for exe in fact["missing"]]
    kinds = {"char": fact["char"], "block": fact["block"]}
    absent = [dev for dev in cfg.NVIDIA_DEVICES if dev.partition("-")[2] not in kinds.get(dev.partition("-")[0], ())]
    if absent:
        have = [g for g in fact["char"] if "nvidia" in g]
        problems.append(f"NVIDIA_DEVICES: {', '.join(absent)} not in this box's /proc/devices (its NVIDIA character "
                        f"device groups: {', '.join(have) or 'none'}): DeviceAllow= would allow nothing for "
                        f"{'it' if len(absent) == 1 else 'them'}; NVIDIA_DEVICES lists char-<group> names from there")
    return problems


def _memory_problems(cfg, mem_total: int | None) -> list[str]:
    """BOX_USABLE_MEMORY_GIB is what the capacity plan counts with: never more than the box has."""
    if mem_total is None:
        return ["memory: could not read MemTotal from /proc/meminfo"]
    if cfg.BOX_USABLE_MEMORY_GIB * GIB > mem_total:
        return [f"memory: BOX_USABLE_MEMORY_GIB = {cfg.BOX_USABLE_MEMORY_GIB} GiB is more than this box's MemTotal "
                f"({mem_total / GIB:.2f} GiB): the capacity plan would count memory the box does not have"]
    return []


def _user_problems(cfg, fact: dict | None) -> list[str]:
    """SERVICE_USER is the deploy's own system user (account_problems)."""
    return account_problems("SERVICE_USER", cfg.SERVICE_USER, fact)



@deploy("Preflight")
def preflight(settings: Settings) -> dict:
    cfg = settings.cfg
    arch = host.get_fact(Arch)
    os_release = host.get_fact(OsRelease)
    gpu = host.get_fact(GpuInfo)
    is_dgx = bool(host.get_fact(File, path=cfg.DGX_RELEASE_FILE))
    store = settings.cfg.MODEL_STORE
    pending = [cp for cp in settings.checkpoints if not host.get_fact(File, path=cp.marker_path(store))]
    pending_bytes = sum(cp.total_bytes for cp in pending)
    disk_free = host.get_fact(DiskAvailable, path=cfg.MODEL_STORE)
    user = host.get_fact(SystemUser, user=cfg.SERVICE_USER)
    devices = host.get_fact(DeviceGroups, prepare=cfg.VLLM_DEVICE_PREPARE) \
        if driver_answers(gpu) and cfg.NVIDIA_DEVICES else None
    problems = check_facts(settings, arch, os_release, gpu, is_dgx, disk_free, pending_bytes,
                           mem_total=host.get_fact(MemTotal), service_user=user, devices=devices)
    problems += rollout_admission(settings, host.get_fact(PlannedHolds, env_dir=cfg.ENV_DIR))
    if problems:
        raise Refused(f"{host.name}: preflight refused this box (nothing was changed):\n  - " + "\n  - ".join(problems))
    gpu_text = f"{gpu['name']} (cc {gpu['compute_cap']}, driver {gpu['driver_version']})" if gpu else "no driver yet"
    logger.info(f"{host.name}: preflight ok: {arch}, {os_release.get('pretty_name', '?')}, {gpu_text}, "
                f"{'DGX OS' if is_dgx else 'plain OS'}, {len(pending)} checkpoint(s) to download "
                f"({pending_bytes / GIB:.2f} GiB), {disk_free / GIB:.1f} GiB free")
    return {"is_dgx": is_dgx, "gpu": gpu}
