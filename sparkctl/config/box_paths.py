"""Paths on the box, by meaning rather than by spelling: what the schema's path types check.

A box path is a plain absolute path (letters, digits and `. _ - + @`, no `..`), normalised before any rule (`//`,
`/./` and a trailing `/` removed: `/srv//models` is `/srv/models`, `/./` is `/`), so two spellings of one directory
are one directory. The deploy creates its own directories with an owner and a mode of its own (ENV_DIR root-only
0700, STATE_DIR the service user's), so `/` and the system's own directories are refused as one of them (the
schema's types); where they may sit on the box (not under a directory that is virtual, wiped at boot or
world-writable, nor where vLLM's sandbox hides them) is a rule of the deploy's layout, checked before the box is
touched (sparkctl/check/rules.py box_layout). Pure: no I/O.
"""

from __future__ import annotations

import posixpath
import re

PLAIN_CHARS = re.compile(r"[A-Za-z0-9._+@/-]+")
PLAIN_WORDS = "letters, digits and . _ - + @ only"

# directories of the operating system itself (Debian/Ubuntu layout): never a deploy directory
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/usr/bin", "/usr/games", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/local",
    "/usr/local/bin", "/usr/local/etc", "/usr/local/lib", "/usr/local/sbin", "/usr/local/share", "/usr/sbin",
    "/usr/share", "/usr/src", "/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/lock", "/var/log",
    "/var/mail", "/var/opt", "/var/run", "/var/spool", "/var/tmp", "/var/www",
    "/etc/apt", "/etc/default", "/etc/netplan", "/etc/network", "/etc/nginx", "/etc/pam.d", "/etc/security",
    "/etc/ssh", "/etc/ssl", "/etc/sudoers.d", "/etc/systemd", "/etc/systemd/system", "/etc/cron.d",
    "/etc/prometheus", "/lib/systemd", "/usr/lib/systemd", "/var/lib/prometheus",
})
# nothing of the deploy's may live below these: virtual, wiped at boot, or writable by every user
VOLATILE_ROOTS = ("/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", "/boot", "/var/run", "/var/lock")
# vLLM's sandbox (templates/vllm.service.j2: ProtectHome=yes, PrivateTmp=yes) hides these from the service
HIDDEN_FROM_SERVICE = ("/home", "/root", "/run/user", "/tmp", "/var/tmp")


def normalised(path: str) -> str:
    """posixpath.normpath without its POSIX exception that keeps a leading `//`."""
    return "/" + posixpath.normpath(path).lstrip("/") if path.startswith("/") else posixpath.normpath(path)


def is_below(path: str, root: str) -> bool:
    """path is root or inside it (both normalised)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def nested(a: str, b: str) -> bool:
    """One directory is the other or inside it."""
    return is_below(a, b) or is_below(b, a)


def plain_problem(path: str) -> str:
    """Why `path` is not a plain absolute box path ("" when it is)."""
    if not isinstance(path, str) or not path.startswith("/"):
        return "an absolute path other than / (it starts with /)"
    if ".." in path.split("/"):
        return "a path without '..' (it names the directory by its own name)"
    if not PLAIN_CHARS.fullmatch(path):
        return f"a plain path: {PLAIN_WORDS} (no space, quote, ;, $, % or backtick)"
    return ""


def deploy_dir_problem(path: str) -> str:
    """Why the normalised `path` cannot be a directory the deploy creates and owns ("" when it can)."""
    if path == "/":
        return "an absolute path other than / (it resolves to /)"
    if path in SYSTEM_DIRS:
        return f"a directory of the deploy's own, not the system's {path} (the deploy sets its owner and mode)"
    return ""


def location_problem(path: str, read_by_service: bool) -> str:
    """Why the normalised deploy directory `path` is in the wrong place on the box ("" when it is not): below a
    volatile root, or, for what the vLLM services read, where their sandbox hides it."""
    root = next((r for r in VOLATILE_ROOTS if is_below(path, r)), None)
    if root:
        return f"a directory outside {root} (virtual, wiped at boot or writable by every user)"
    root = next((r for r in HIDDEN_FROM_SERVICE if is_below(path, r)), None) if read_by_service else None
    if root:
        return f"a directory outside {root}: vLLM's sandbox (ProtectHome=, PrivateTmp=) hides it from the service"
    return ""


def bin_dir(home: str) -> str:
    """Where the deploy uploads the box scripts (sparkctl/box/), below SPARKCTL_HOME."""
    return f"{home}/bin"


def rollout_script(home: str) -> str:
    """The box's rollout.py, as every call of it from the control side (and the peer key's forced command) names it."""
    return f"{bin_dir(home)}/rollout.py"
