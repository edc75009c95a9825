"""Cross-field rules the settings' own comments state, checked as rules (sparkctl/config/schema.py runs them after
every value has its type): which directories may share a tree, the OOM order, what memory adds up to, who the
service user may be, which flags a free-form argument list may not set.

Each raises SettingError naming the setting the operator changed (`blame`: of two clashing settings, the one
whose value differs from the shipped group data), its value and what would be valid.
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sparkctl.config import box_paths
from sparkctl.config.box_paths import is_below, nested
from sparkctl.config.owned_flags import check_owned_flags
from sparkctl.config.quantities import GIB, KIB, MIB, TIB
from sparkctl.errors import SettingError

if TYPE_CHECKING:  # the schema imports these rules
    from sparkctl.config.schema import GroupData


@lru_cache(maxsize=1)
def _shipped() -> dict:
    """The shipped group data of a real box (group_data/all.py and gx10.py): what an operator changes by --data."""
    from sparkctl import REPO_ROOT
    from sparkctl.config import groupdata
    return groupdata.load(["all", "gx10"], root=REPO_ROOT)


def _plain(value):
    """A typed value as group data writes it (an EMBEDDERS entry as its mapping), to compare with the shipped one."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.model_dump() if hasattr(value, "model_dump") else value


def changed(name: str, value) -> bool:
    """Whether the setting `name` ("EMBEDDER_PORTS[1]" names one item) differs from the shipped group data."""
    shipped = _shipped()
    base = shipped.get(name.split("[")[0])
    index = re.findall(r"\[(\d+)\]", name)
    if index and isinstance(base, list):
        i = int(index[0])
        base = base[i] if i < len(base) else None
    return base != _plain(value)


def blame(a: tuple[str, Any], b: tuple[str, Any]) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """(changed, other): the one of two clashing (name, value) settings the operator changed; else the later one."""
    return (a, b) if changed(*a) and not changed(*b) else (b, a)


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


def box_layout(s: GroupData) -> None:
    """Where the deploy's directories sit on the box, checked before it is touched (sparkctl/check.py): each in a
    place that survives a reboot and that its readers see, and no two of them sharing a tree. (The schema's types
    already refused `/`, a system directory and anything but a plain path; tools that read these settings off the
    box, and the tests that stand in for a box in a temporary directory, need no more.)"""
    for name in DEPLOY_DIRS:
        problem = box_paths.location_problem(getattr(s, name), name in SERVICE_READS)
        if problem:
            raise SettingError(name, getattr(s, name), problem)
    deploy_dirs(s)


def deploy_dirs(s: GroupData) -> None:
    """No two deploy directories are one directory, or one inside the other: each gets its own owner and mode, so
    a nested one would take the other's (ENV_DIR's 0700 would hide it; STATE_DIR's owner could replace it)."""
    for (a, pa), (b, pb) in itertools.combinations(((n, getattr(s, n)) for n in DEPLOY_DIRS), 2):
        if not nested(pa, pb):
            continue
        (name, value), (other, other_value) = blame((a, pa), (b, pb))
        where = "is" if value == other_value else ("is inside" if is_below(value, other_value) else "holds")
        raise SettingError(name, value, f"a directory other than {other}'s ({other_value}), neither inside nor "
                                        f"around it", f"It {where} {other}, {DEPLOY_DIRS[other]}; {name} holds "
                                                      f"{DEPLOY_DIRS[name]}")


# --- the OOM order: the kernel and earlyoom kill vLLM first and sshd last ------------------------------------------


def oom_order(s: GroupData) -> None:
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


def _within_box(name: str, gib: float, usable: float, other: str = "BOX_USABLE_MEMORY_GIB") -> None:
    if gib >= usable:
        (n, v), (o, ov) = blame((name, gib), (other, usable))
        what = f"less than {o} = {ov} GiB" if n == name else f"more than {o} = {ov} GiB"
        raise SettingError(n, v, what, "The box cannot hold it: the capacity plan and the alerts count within it")


def memory(s: GroupData) -> None:
    usable = s.BOX_USABLE_MEMORY_GIB
    _within_box("OS_RESERVE_GIB", s.OS_RESERVE_GIB, usable)
    _within_box("ALERT_MEM_AVAILABLE_FLOOR_GIB", s.ALERT_MEM_AVAILABLE_FLOOR_GIB, usable)
    for model, kv in s.CODER_KV_CACHE_GIB.items():
        _within_box(f"CODER_KV_CACHE_GIB[{model!r}]", kv, usable)
    for i, e in enumerate(s.EMBEDDERS):
        _within_box(f"EMBEDDERS[{i}].kv_cache_gib", e.kv_cache_gib, usable)
    floor = systemd_bytes(s.SSHD_MEMORY_MIN)
    if floor > s.OS_RESERVE_GIB * GIB:
        (n, v), (o, ov) = blame(("SSHD_MEMORY_MIN", s.SSHD_MEMORY_MIN), ("OS_RESERVE_GIB", s.OS_RESERVE_GIB))
        valid = (f"at most OS_RESERVE_GIB = {ov} GiB" if n == "SSHD_MEMORY_MIN"
                 else f"at least SSHD_MEMORY_MIN = {ov} ({floor / GIB:.2f} GiB)")
        raise SettingError(n, v, valid, "sshd's memory floor is part of what the box keeps for the OS")


# --- who the services run as --------------------------------------------------------------------------------------

# accounts an Ubuntu/Debian box (and DGX OS) already has, or that cloud images and operators log in as: the deploy
# makes SERVICE_USER a nologin system user whose home is STATE_DIR, which would take a login's shell and home away
# or hand a daemon's files to vLLM (preflight also reads the box's own passwd entry: tasks/preflight.py)
RESERVED_USERS = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "gnats", "nobody", "nogroup", "_apt", "messagebus", "syslog", "sshd", "polkitd", "tss",
    "uuidd", "tcpdump", "landscape", "pollinate", "fwupd-refresh", "usbmux", "dnsmasq", "avahi", "rtkit", "colord",
    "geoclue", "pulse", "gdm", "lightdm", "kernoops", "saned", "whoopsie", "speech-dispatcher", "cups-pk-helper",
    "nvidia-persistenced", "prometheus", "nginx", "postfix", "ntp", "chrony", "_chrony", "lxd", "dhcpcd",
    "ubuntu", "debian", "admin", "administrator", "pi", "ec2-user", "centos", "fedora", "cloud-user", "user",
    "nvidia", "dgx", "operator", "ops", "sudo", "wheel", "adm", "staff", "users",
})


def service_user(s: GroupData) -> None:
    user = s.SERVICE_USER
    if user in RESERVED_USERS or user.startswith(("systemd-", "_")):
        raise SettingError("SERVICE_USER", user, "a dedicated system user of the deploy's own such as vllm (not root, "
                                                 "not an account the system or an operator already has)",
                           "The deploy makes SERVICE_USER a nologin system user whose home is STATE_DIR: an existing "
                           "account would lose its shell and home, or lend its files to vLLM")


# --- free-form lists that would override what the deploy derives ---------------------------------------------------


def owned_flags(s: GroupData) -> None:
    check_owned_flags("VLLM_COMMON_ARGS", s.VLLM_COMMON_ARGS)


def embedder_ports(s: GroupData) -> None:
    """One port per embedder; of the two lists, the one the operator changed is named."""
    if len(s.EMBEDDER_PORTS) == len(s.EMBEDDERS):
        return
    (name, value), _ = blame(("EMBEDDER_PORTS", s.EMBEDDER_PORTS), ("EMBEDDERS", s.EMBEDDERS))
    if name == "EMBEDDERS":
        raise SettingError("EMBEDDERS", _plain(s.EMBEDDERS), f"{len(s.EMBEDDER_PORTS)} embedders, one per "
                           f"EMBEDDER_PORTS port {s.EMBEDDER_PORTS}",
                           "Or give EMBEDDER_PORTS one port per EMBEDDERS entry ([] for none)")
    raise SettingError("EMBEDDER_PORTS", s.EMBEDDER_PORTS, f"{len(s.EMBEDDERS)} ports, one per EMBEDDERS entry")


def reserved_ports(s: GroupData, ssh_port: int) -> None:
    """No setting's port is sshd's (22, and the port the deploy connects to): the proxy or a service there would
    take the operator's way in."""
    ports = [("PROXY_PORT", s.PROXY_PORT), ("CODER_PORT", s.CODER_PORT),
             *((f"EMBEDDER_PORTS[{i}]", p) for i, p in enumerate(s.EMBEDDER_PORTS)),
             ("NODE_EXPORTER_PORT", s.NODE_EXPORTER_PORT), ("TP_MASTER_PORT", s.TP_MASTER_PORT),
             ("RAY_PORT", s.RAY_PORT)]
    sshd = " and ".join(map(str, sorted({22, ssh_port})))
    for name, port in ports:
        if port in (22, ssh_port):
            raise SettingError(name, port, f"a port other than sshd's ({sshd})",
                               "sshd listens there: a service on it would lock the operator out")


CROSS_FIELD_RULES = (oom_order, memory, service_user, owned_flags)  # after the schema's own
