"""The real validators, run on the control machine on files rendered for a box (check/render.py decides
what to render and whom to blame): nginx -t in a private prefix, systemd-analyze verify in a private root,
earlyoom's regexes through glibc's own regcomp/regexec (what earlyoom calls), netplan generate, vLLM's argument
parser when vLLM is installed here, and for a gateway keepalived -t and nft -c (each in namespaces of its own: the
gateway's interface and its routers' user exist there, not on the control machine). Each takes {name: text}, writes them below a private directory, and returns
the problems it found as (name, line or None, message); none when the tool is absent (`available` says so).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

TOOL_TIMEOUT_S = 60  # one validator run; they take well under a second


@dataclass(frozen=True)
class Problem:
    name: str  # which rendered file
    line: int | None  # 1-based line of that file, None when the tool names none
    message: str


def _write(root: Path, rel: str, text: str, mode: int = 0o600) -> Path:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(text)
    path.chmod(mode)
    return path


def _run(argv: list[str], warnings_fail: bool) -> str:
    """The tool's output when it refused (exit status, or with warnings_fail any output at all), else ""."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]}: {exc}"
    output = (r.stdout + r.stderr).strip()
    return output if r.returncode or (warnings_fail and output) else ""


_NOISE = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d |\d+#\d+: |^nginx: ")  # nginx's time stamp, pid#tid, prefix


def _located(output: str, files: dict[str, Path], pattern: str) -> list[Problem]:
    """The output's lines that name one of our files (pattern captures path and line), each said without the
    private path, the time stamp or the process id."""
    by_path = {str(p): name for name, p in files.items()}
    found = []
    for line in output.splitlines():
        m = re.search(pattern, line)
        if m and m.group("path") in by_path:
            said = _NOISE.sub("", (line[:m.start()] + line[m.end():]).strip()).strip(" :")
            found.append(Problem(by_path[m.group("path")], int(m.group("line")), said))
    return found


# --- nginx -t ------------------------------------------------------------------------------------------------------

def nginx(root: Path, texts: dict[str, str]) -> list[Problem]:
    """nginx -t on the site inside a bare http block (the distribution's nginx.conf adds nothing it depends on),
    with its include of the token file: texts = {site.conf, token.conf, server.pem, server.key}."""
    files = {name: _write(root, name, text) for name, text in texts.items()}
    conf = _write(root, "nginx.conf", f"pid {root}/nginx.pid;\nerror_log stderr;\nevents {{}}\nhttp {{\n"
                                      f"    access_log off;\n    include {files['site.conf']};\n}}\n")
    output = _run(["nginx", "-t", "-q", "-p", str(root), "-c", str(conf)], warnings_fail=False)
    if not output:
        return []
    return _located(output, files, r"in (?P<path>\S+):(?P<line>\d+)") or [Problem("site.conf", None, output)]


# --- systemd-analyze verify ------------------------------------------------------------------------------------------

SYSTEM_UNITS = Path("/usr/lib/systemd/system")  # the control machine's own units: what ours depend on
SYSTEM_UNIT_KINDS = ("*.target", "*.slice")  # what our units order themselves after and install into
_EXEC = re.compile(r"^Exec(Start|Stop|StartPre|StartPost|Reload)=[-@:+!|]*(?P<exe>/\S+)", re.M)


def systemd(root: Path, texts: dict[str, str]) -> list[Problem]:
    """systemd-analyze verify of every unit (and drop-in: "x.service.d/y.conf") in a private root holding this
    machine's targets and slices and a stub for each program the units run; a warning counts as a problem."""
    units_dir = root / "usr/lib/systemd/system"
    units_dir.mkdir(parents=True)
    for pattern in SYSTEM_UNIT_KINDS:
        for unit in SYSTEM_UNITS.glob(pattern):
            shutil.copy2(unit, units_dir / unit.name, follow_symlinks=False)
    files = {name: _write(root, f"etc/systemd/system/{name}", text, 0o644) for name, text in texts.items()}
    for text in texts.values():
        for m in _EXEC.finditer(text):
            if not (root / m.group("exe").lstrip("/")).exists():
                _write(root, m.group("exe"), "#!/bin/sh\n", 0o755)
    units = sorted({name.split(".d/")[0] if ".d/" in name else name for name in texts})
    for unit in units:  # a drop-in's unit must exist to be verified
        if unit not in texts:
            _write(root, f"etc/systemd/system/{unit}", "[Service]\nExecStart=/usr/bin/true\n", 0o644)
            _write(root, "usr/bin/true", "#!/bin/sh\n", 0o755)
    output = _run(["systemd-analyze", "verify", f"--root={root}", *units], warnings_fail=True)
    if not output:
        return []
    located = _located(output, files, r"^(?P<path>/\S+?):(?P<line>\d+):")
    return located or [Problem(_unit_named(output, units), None, output.splitlines()[0])]


def _unit_named(output: str, units: list[str]) -> str:
    return next((u for u in units if u in output), units[0])


# --- earlyoom's regexes: glibc's regcomp(REG_EXTENDED | REG_NOSUB) and regexec, as earlyoom calls them ----------------

REG_EXTENDED, REG_NOSUB = 1, 8  # <regex.h> of glibc
REGEX_T_BYTES = 256  # more than sizeof(regex_t) (64 on glibc x86_64 and aarch64)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc, found once per process: find_library runs `ldconfig -p`, which cost seconds per host in a fleet's
    deploy (every box's offline check asks)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


def glibc_regex_available() -> bool:
    return _libc() is not None


def posix_matches(pattern: str, names) -> set[str] | None:
    """The names regexec() matches with `pattern` compiled by regcomp(REG_EXTENDED | REG_NOSUB); None when
    regcomp refuses the pattern."""
    libc = _libc()
    preg = ctypes.create_string_buffer(REGEX_T_BYTES)
    if libc.regcomp(preg, pattern.encode(), REG_EXTENDED | REG_NOSUB) != 0:
        return None
    try:
        return {n for n in names if libc.regexec(preg, n.encode(), 0, None, 0) == 0}
    finally:
        libc.regfree(preg)


# --- netplan -------------------------------------------------------------------------------------------------------


def netplan(root: Path, texts: dict[str, str]) -> list[Problem]:
    """netplan generate on the file in a private root dir: texts = {"<name>.yaml": text}."""
    files = {name: _write(root, f"etc/netplan/{name}", text) for name, text in texts.items()}
    output = _run(["netplan", "generate", "--root-dir", str(root)], warnings_fail=False)
    if not output:
        return []
    return _located(output, files, r"(?P<path>/\S+?):(?P<line>\d+):") or [Problem(next(iter(texts)), None, output)]


def available(tool: str) -> bool:
    return shutil.which(tool) is not None


# --- the gateway's keepalived.conf and nftables ruleset: in namespaces of their own ---------------------------------

PEER_IF = "sparkctlpeer0"  # the other end of the veth standing in for the gateway's interface


@functools.cache
def namespaces() -> list[str] | None:
    """How to run a command in new mount and network namespaces here: as an unprivileged user in a user namespace of
    its own (unshare -r), or as root; None when neither works (a container without user namespaces)."""
    for argv in (["unshare", "-rmn"], ["unshare", "-mn"] if os.geteuid() == 0 else None):
        if argv and shutil.which("unshare") and not _run([*argv, "true"], warnings_fail=False):
            return argv
    return None


def nft(root: Path, texts: dict[str, str], users: list[str]) -> list[Problem]:
    """nft -c -f on each ruleset, in a network namespace (nft -c asks the kernel) whose /etc/passwd also holds
    `users` (nft resolves `meta skuid <name>` against it: the routers' user exists on the gateway, not here)."""
    files = {name: _write(root, name, text) for name, text in texts.items()}
    here = Path("/etc/passwd").read_text()
    known = {line.split(":", 1)[0] for line in here.splitlines()}
    added = "".join(f"{u}:x:{64000 + i}:{64000 + i}::/nonexistent:/usr/sbin/nologin\n"
                    for i, u in enumerate(users) if u not in known)
    passwd = _write(root, "passwd", here.rstrip("\n") + "\n" + added, 0o644)
    checks = " && ".join(f"nft -c -f {shlex.quote(str(p))}" for p in files.values())
    output = _run([*namespaces(), "sh", "-c", f"mount --bind {shlex.quote(str(passwd))} /etc/passwd && {checks}"],
                  warnings_fail=False)
    if not output:
        return []
    return _located(output, files, r"(?P<path>/\S+?):(?P<line>\d+):[\d-]+:") or \
        [Problem(next(iter(texts)), None, output.splitlines()[0])]


def keepalived(root: Path, texts: dict[str, str], interface: str, script: tuple[str, str]) -> list[Problem]:
    """keepalived -t -f on the configuration, in a network namespace holding the gateway's interface (a veth of that
    name: keepalived refuses an interface this machine lacks) and the health script it runs (script: its path in the
    rendered configuration, its text)."""
    files = {name: _write(root, name, text) for name, text in texts.items()}
    _write(root, script[0], script[1], 0o755)
    link = f"ip link add {shlex.quote(interface)} type veth peer name {PEER_IF}"
    checks = " && ".join(f"keepalived -t -f {shlex.quote(str(p))}" for p in files.values())
    output = _run([*namespaces(), "sh", "-c", f"{link} && {checks}"], warnings_fail=False)
    if not output:
        return []
    return _located(output, files, r"\((?P<path>/\S+?): Line (?P<line>\d+)\)") or \
        [Problem(next(iter(texts)), None, " ".join(output.splitlines()[-2:]))]
