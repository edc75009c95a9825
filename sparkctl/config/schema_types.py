"""The value types of the settings schema (sparkctl/config/schema.py): each with its valid range and unit, and the
words an error message uses for what is valid (the Field description)."""

from __future__ import annotations

import ipaddress
import re
import string
from dataclasses import dataclass
from typing import Annotated, get_args, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, WrapValidator

from sparkctl.config import box_paths
from sparkctl.config.quantities import DAY_S

# upper bounds: beyond these a value is a typo (a unit slip, an extra digit), not a setting; each type says its own
MAX_SECONDS = 7 * DAY_S  # the longest wait, timeout or window any setting means: a week (nginx takes up to 24 days)
MAX_GIB = 1024  # memory of one box, GiB: a GX10 has 128 GB; a KV budget or reserve beyond this is a typo
MAX_DISK_GIB = 1024 * 1024  # disk headroom, GiB (1 PiB)
MAX_COUNT = 1_000_000  # counts without a tighter meaning (restarts, lines, workers, repeats)
MAX_TOKENS = 16 * 1024 * 1024  # token counts: above any model's context (the check compares them with it)


def _check(predicate, what: str):
    def check(value):
        if not predicate(value):
            raise ValueError(what)
        return value
    return AfterValidator(check)


def _refuse(problem_of):
    """A validator refusing a value with the words problem_of(value) gives ("" when it is valid)."""
    def check(value):
        problem = problem_of(value)
        if problem:
            raise ValueError(problem)
        return value
    return AfterValidator(check)


PROJECT_PREFIX = "sparkctl"  # the prefix of every unit, table and directory of the deploy's own (sparkctl-router-...)


@dataclass(frozen=True)
class Owned:
    """The kind of thing a setting names, under the ownership rule: "file" (the deploy writes it), "dir" (the deploy
    creates it and sets its owner and mode), "account" (the deploy creates it), "name" (an nftables table or unit the
    deploy replaces), "program" (run as root, or inside vLLM's services)."""

    kind: str


def owned_kinds(annotation) -> set[str]:
    """The Owned kinds anywhere in a type (inside Annotated, a list's item, a mapping's key or value)."""
    found = set()
    if get_origin(annotation) is Annotated:
        args = get_args(annotation)
        found |= {m.kind for m in args[1:] if isinstance(m, Owned)}
        return found | owned_kinds(args[0])
    for arg in get_args(annotation):
        found |= owned_kinds(arg)
    return found


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _is_interface(text: str) -> bool:
    try:
        ipaddress.ip_interface(text)
        return "/" in text
    except ValueError:
        return False


def _is_regex(text: str) -> bool:
    """Quotable for earlyoom's EARLYOOM_ARGS ('...'); whether glibc compiles it as earlyoom does is checked by the
    check layer (sparkctl/check/render.py), with the real regcomp."""
    return bool(text) and "'" not in text


def _keep_int(value, handler):
    """A number setting given as a whole number stays that int once checked: 7200 renders as 7200 in nginx, systemd
    and rollout.py arguments, never 7200.0 (which nginx refuses)."""
    checked = handler(value)
    return value if type(value) is int else checked


def typed(base, description: str, *extra, **constraints):
    """A type with its valid range and the words an error message uses for it (a float keeps a given int)."""
    keep = (WrapValidator(_keep_int),) if base is float else ()
    return Annotated[base, Field(description=description, **constraints), *extra, *keep]


def pattern(regex: str, description: str):
    return typed(str, description, pattern=regex)


# the placeholders the box's watchdog fills in its command settings (sparkctl/box/watchdog.py PLACEHOLDERS)
WATCHDOG_PLACEHOLDERS = ("unit", "service", "port", "served", "kind", "rollout", "limits", "peer")


def template_problem(text: str, placeholders: tuple[str, ...], needs: tuple[str, ...]) -> str:
    """What is wrong with a command template ("" when nothing): an unknown placeholder, a format spec, no `needs`."""
    try:
        parsed = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
    except (ValueError, TypeError):
        return "an unbalanced { or }"
    for f, spec, conv in parsed:
        if f not in placeholders or spec or conv:
            return "unknown placeholder {" + f + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
    if not {f for f, _, _ in parsed} & set(needs):
        return f"no {' or '.join('{' + n + '}' for n in needs)}"
    return ""


def template_description(needs: tuple[str, ...], placeholders: tuple[str, ...] = WATCHDOG_PLACEHOLDERS) -> str:
    return (f"a command containing {' or '.join('{' + n + '}' for n in needs)}, with no placeholders but "
            f"{' '.join('{' + p + '}' for p in placeholders)} (a literal brace is written {{{{ or }}}})")


def command_template(needs: tuple[str, ...], placeholders: tuple[str, ...] = WATCHDOG_PLACEHOLDERS):
    """A command template: only the named placeholders (bare, no format spec), at least one of `needs`."""
    what = template_description(needs, placeholders)
    return typed(str, what, _check(lambda v: not template_problem(v, placeholders, needs), what))


Seconds = typed(float, f"a number of seconds greater than 0 and at most {MAX_SECONDS}", gt=0, le=MAX_SECONDS)
WholeSeconds = typed(int, f"a whole number of seconds from 1 to {MAX_SECONDS}", ge=1, le=MAX_SECONDS)
NginxSeconds = typed(int, f"a whole number of seconds from 1 to {MAX_SECONDS} (nginx refuses a fraction such as "
                          "7200.5s)", ge=1, le=MAX_SECONDS)
LONG_GENERATION_S = 7200  # the proxy timeout production learned long reasoning generations need, s
Count = typed(int, f"a whole number from 1 to {MAX_COUNT:,}", ge=1, le=MAX_COUNT)
Streams = typed(int, "a whole number of concurrent streams from 1 to 1024", ge=1, le=1024)
Tokens = typed(int, f"a whole number of tokens from 1 to {MAX_TOKENS:,}", ge=1, le=MAX_TOKENS)
GiB = typed(float, f"a size in GiB greater than 0 and at most {MAX_GIB}", gt=0, le=MAX_GIB)
GiBOrZero = typed(float, f"a size in GiB from 0 to {MAX_GIB}", ge=0, le=MAX_GIB)
DiskGiB = typed(float, f"a size in GiB from 0 to {MAX_DISK_GIB:,}", ge=0, le=MAX_DISK_GIB)
Port = typed(int, "an integer TCP port from 1 to 65535", ge=1, le=65535)
# a port an unprivileged process binds: vLLM (no capabilities at all, CapabilityBoundingSet=), node exporter, the
# tensor-parallel rendezvous; vLLM's own parser refuses ports below 1024 too
UserPort = typed(int, "an integer TCP port from 1024 to 65535 (an unprivileged service cannot bind below 1024)",
                 ge=1024, le=65535)
OomScore = typed(int, "an integer OOM score adjustment from -1000 to 1000", ge=-1000, le=1000)
Text = typed(str, "a non-empty string", min_length=1)
LocalPath = typed(str, "a control-machine path (relative to the repository or absolute)", min_length=1)


def _box_path(problem_of, empty_ok: bool = False):
    """A plain absolute box path, normalised (what is stored and used is the normalised one), then `problem_of`
    its normalised form: refused with that problem's words (empty_ok: "" passes as "none")."""
    def check(value):
        if empty_ok and value == "":
            return value
        problem = box_paths.plain_problem(value)
        if problem:
            raise ValueError(problem)
        norm = box_paths.normalised(value)
        problem = problem_of(norm)
        if problem:
            raise ValueError(problem)
        return norm
    return AfterValidator(check)


# the directories the deploy keeps below STATE_DIR (tasks/vllm.py, tasks/monitoring.py): a file setting below
# STATE_DIR must not land in one of them
STATE_SUBDIRS = ("cache", "config", "hf", "rollout", "watchdog")
_STATE_FILE = re.compile(r"[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*(/[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*)*")


def _state_file_problem(path: str) -> str:
    if not isinstance(path, str) or not _STATE_FILE.fullmatch(path):
        return f"a plain file path relative to STATE_DIR ({box_paths.PLAIN_WORDS}; no leading /, no '.' or '..')"
    if "/" in path and path.split("/")[0] in STATE_SUBDIRS or path in STATE_SUBDIRS:
        return f"a path outside STATE_DIR's own {', '.join(STATE_SUBDIRS)} directories"
    return ""


StateFile = typed(str, "a plain file path relative to STATE_DIR, outside its cache, config, hf, rollout and watchdog "
                       "directories", _refuse(_state_file_problem), Owned("file"))

_PLAIN = f"a plain absolute path ({box_paths.PLAIN_WORDS}; no '..')"
AbsPath = typed(str, f"an absolute path other than /: {_PLAIN}",
                _box_path(lambda p: "an absolute path other than /" if p == "/" else ""))
AbsPathOrEmpty = typed(str, f"an absolute path other than /, or empty: {_PLAIN}",
                       _box_path(lambda p: "an absolute path other than /" if p == "/" else "", empty_ok=True))
DeployDir = typed(str, f"a directory of the deploy's own, not / or a system directory: {_PLAIN}",
                  _box_path(box_paths.deploy_dir_problem), Owned("dir"))


# --- the ownership rule: what the deploy writes, creates, flushes or runs as root is its own --------------------------
# Every setting that names a file the deploy writes, a directory it owns, an account it creates, an nftables table or
# unit it replaces, or a program it runs as root is typed with one of the types below (each carries an `Owned` marker:
# tests/config/test_ownership.py holds every such setting to it, and a new setting of that kind without it fails).

# where a root-run program may live: root-owned, not world-writable directories of the system's own layout
ROOT_PROGRAM_DIRS = ("/usr", "/opt", "/bin", "/sbin", "/lib")
# nothing the deploy writes or runs lives below these: virtual, wiped at boot, writable by every user, or a user's
OWNED_NEVER_BELOW = (*box_paths.VOLATILE_ROOTS, "/home")
_PROGRAM_WHERE = (f"an absolute path below {', '.join(ROOT_PROGRAM_DIRS)} (root-owned, not world-writable; never "
                  f"below /tmp, /var/tmp, /dev/shm or /home), with no '..'")


def program_problem(path: str) -> str:
    """Why `path` cannot be a program the deploy runs as root ("" when it can): a relative path, a '..', or a
    directory outside the root-owned system ones."""
    if not isinstance(path, str) or not path.startswith("/"):
        return _PROGRAM_WHERE
    if ".." in path.split("/"):
        return f"{_PROGRAM_WHERE} (it climbs out of its directory with '..')"
    problem = box_paths.plain_problem(path)
    if problem:
        return problem
    norm = box_paths.normalised(path)
    if not any(box_paths.is_below(norm, d) and norm != d for d in ROOT_PROGRAM_DIRS):
        return _PROGRAM_WHERE
    return ""


def _program(empty_ok: bool = False, name_ok: bool = False):
    def problem(value: str) -> str:
        if (empty_ok and value == "") or (name_ok and not value.startswith("/")):
            return ""
        return program_problem(value)
    return _refuse(problem)


RootProgramOrEmpty = typed(str, f"{_PROGRAM_WHERE}, or empty", _program(empty_ok=True), Owned("program"))
# a program found by name on root's PATH (nvidia-smi), or an absolute path as above
RootProgramOrName = typed(str, f"a program name (found on root's PATH) or {_PROGRAM_WHERE}",
                          _program(name_ok=True), Owned("program"),
                          pattern=r"^(/[A-Za-z0-9._+@-]+)+$|^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def root_command(description: str):
    """A command run as root: an absolute program (program_problem) and plain arguments."""
    return typed(str, description, _refuse(lambda v: program_problem(v.split(" ", 1)[0])), Owned("program"),
                 pattern=r"^(/[A-Za-z0-9._+-]+)+( [A-Za-z0-9._=,:/+-]+)*$")


def _owned_file_problem(allowed: dict[str, str]):
    listed = "; ".join(f"{p} ({why})" for p, why in allowed.items())
    where = (f"a file below a directory of the deploy's own (a directory named {PROJECT_PREFIX}..., such as "
             f"/etc/{PROJECT_PREFIX}/<file>)" + (f", or {listed}" if listed else ""))

    def problem(norm: str) -> str:
        for path in allowed:
            if norm == path or (path.endswith("/") and norm.startswith(path) and "/" not in norm[len(path):]):
                return ""
        parents = norm.split("/")[1:-1]
        root = next((r for r in OWNED_NEVER_BELOW if box_paths.is_below(norm, r)), None)
        if root:
            return f"{where}; not below {root} (virtual, wiped at boot or writable by others)"
        if not any(p.startswith(PROJECT_PREFIX) for p in parents):
            return f"{where} (the deploy would overwrite a file it does not own)"
        return ""
    return where, problem


# netplan files the installer, cloud-init or NetworkManager write: the host's own network, never the link's file
NETPLAN_SYSTEM_FILES = ("/etc/netplan/00-installer-config.yaml", "/etc/netplan/01-netcfg.yaml",
                        "/etc/netplan/01-network-manager-all.yaml", "/etc/netplan/50-cloud-init.yaml")


def owned_file(allowed: dict[str, str] | None = None, program: bool = False, pattern: str | None = None,
               description: str | None = None, refused: tuple[str, ...] = ()):
    """A file the deploy writes (installs over whatever is there): below a directory of the deploy's own (one
    named with the project's prefix), or on `allowed` (path -> why; a path ending in / allows the files directly in
    that directory), never one of `refused`. program: it is also run as root (a script), so it must sit where a root
    program may. pattern/description: a narrower shape and its words."""
    where, problem = _owned_file_problem(allowed or {})

    def owned(norm: str) -> str:
        if norm in refused:
            return f"{description or where}, not {norm}: the host's own file"
        return problem(norm)
    extra = (_refuse(program_problem),) if program else ()
    constraints = {"pattern": pattern} if pattern else {}
    return typed(str, description or where, _box_path(owned), *extra, Owned("file"), **constraints)


def program_or_empty(regex: str, description: str):
    """A program (or library) the deploy's services load, by absolute path (program_problem), or empty."""
    return typed(str, description, _program(empty_ok=True), Owned("program"), pattern=regex)


RootProgramDir = typed(str, f"a directory whose programs root runs: {_PROGRAM_WHERE}", _program(), Owned("program"))


def _search_dir_problem(path: str) -> str:
    """Why `path` cannot be on an engine's PATH ("" when it can): a root-owned system directory itself (/usr/bin,
    /bin) or one below it, as a program's is; never a directory another user could write a `ninja` into."""
    if isinstance(path, str) and box_paths.normalised(path) in ROOT_PROGRAM_DIRS and ".." not in path.split("/"):
        return ""
    return program_problem(path)


# a directory on the engines' PATH: every program the JIT runs by name (ninja, cc) is looked up there
SearchDir = typed(str, f"a directory whose programs the engines run by name: {_PROGRAM_WHERE}",
                  _refuse(_search_dir_problem), Owned("program"))


Url = pattern(r"^https?://[^\s/$.?#][^\s]*$", "an http:// or https:// URL")
Version = pattern(r"^\d+(\.\d+)+$", "a version such as 13.0")
# a release as pip spells it (PEP 440 public version, optional local tag): it becomes a directory name on the box
RELEASE_RE = re.compile(r"\d+(\.\d+)+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?")
Release = pattern(f"^{RELEASE_RE.pattern}$",
                  "a release such as 0.32.0 or 0.32.0+cpu (digits, dots, an optional pre/post/dev and +local tag)")
ReleaseOrEmpty = pattern(f"^({RELEASE_RE.pattern})?$", "a release such as 0.32.0+cpu, or empty")
DebPackage = pattern(r"^[a-z0-9][a-z0-9+.-]+$", "a Debian package name")
PipName = pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", "a pip distribution name")
IfName = pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$", "a network interface name (up to 15 characters)")
IfNameOrEmpty = pattern(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,14})?$", "a network interface name, or empty")
Name = pattern(r"^[a-z0-9][a-z0-9._-]{0,62}$", "a lower-case name usable as a URL path segment")
EnvName = pattern(r"^[A-Za-z_][A-Za-z0-9_]*$", "an environment variable name: letters, digits and _, not starting "
                  "with a digit, such as VLLM_LOGGING_LEVEL")
_JOINED = "a value not ending in a backslash (systemd would join the next line of the env file to it)"
# a value of an env file's NAME=value line: text, as the environment is (a number is written "1")
EnvValue = typed(str, 'a string such as "1" (an environment value is text), not ending in a backslash',
                 _refuse(lambda v: _JOINED if v.endswith("\\") else ""))


# a directory below another one (KERNEL_CACHES: under STATE_DIR): plain words joined by /, never . or ..
SubDir = typed(str, "a directory relative to STATE_DIR such as 'cache/triton' (letters, digits, _ . - and /; no "
               "'..')", _refuse(lambda v: "a directory relative to STATE_DIR, no '..'" if
                                any(part in (".", "..") for part in v.split("/")) else ""),
               pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$")


def env_mapping(what: str):
    """A mapping of environment variable names to values (VLLM_EXTRA_ENV, GPU_ARCH_ENV)."""
    return Annotated[dict[EnvName, EnvValue], Field(description=what)]


# ssh -o options that run a command (as root, on the box that connects) or load code, beside the forced command the
# other box pins its key to, or that send the connection through another host: the options the link's copy needs
# (BatchMode, StrictHostKeyChecking, ConnectTimeout, Ciphers, ...) do none of this; ssh reads names in any case
SSH_COMMAND_OPTIONS = ("ProxyCommand", "ProxyJump", "LocalCommand", "PermitLocalCommand", "RemoteCommand",
                       "KnownHostsCommand", "PKCS11Provider", "SecurityKeyProvider", "Include", "Match")
_SSH_OPTION = "an ssh -o option such as BatchMode=yes (NAME=value, no spaces or quotes)"


def _ssh_option_problem(option: str) -> str:
    name = option.split("=", 1)[0]
    if name.lower() in {o.lower() for o in SSH_COMMAND_OPTIONS}:
        return (f"an ssh -o option other than {', '.join(SSH_COMMAND_OPTIONS)} ({name} runs a command, loads code or "
                f"sends the connection through another host, as root on the box, beside the link's forced commands)")
    return ""


SshOption = typed(str, _SSH_OPTION, _refuse(_ssh_option_problem), pattern=r"^[A-Za-z0-9]+=[^\s'\"]+$")
# accounts an Ubuntu/Debian box (and DGX OS) already has, or that cloud images and operators log in as: the deploy
# makes each account it creates (SERVICE_USER, ROUTER_USER) a nologin system user, which would take a login's shell
# and home away, lock out the deploy itself (root), or lend a daemon's files and rights to a service (preflight and
# the gateway step also read the host's own passwd entry: tasks/preflight.py)
RESERVED_USERS = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "gnats", "nobody", "nogroup", "_apt", "messagebus", "syslog", "sshd", "polkitd", "tss",
    "uuidd", "tcpdump", "landscape", "pollinate", "fwupd-refresh", "usbmux", "dnsmasq", "avahi", "rtkit", "colord",
    "geoclue", "pulse", "gdm", "lightdm", "kernoops", "saned", "whoopsie", "speech-dispatcher", "cups-pk-helper",
    "nvidia-persistenced", "prometheus", "nginx", "postfix", "ntp", "chrony", "_chrony", "lxd", "dhcpcd",
    "keepalived_script", "ubuntu", "debian", "admin", "administrator", "pi", "ec2-user", "centos", "fedora",
    "cloud-user", "user", "nvidia", "dgx", "operator", "ops", "sudo", "wheel", "adm", "staff", "users",
})
_DEDICATED = ("a dedicated system user of the deploy's own such as vllm (lower case, up to 32 characters; not root, "
              "not an account the system or an operator already has, not systemd-* or _*)")


def _account_problem(user: str) -> str:
    if user in RESERVED_USERS or user.startswith(("systemd-", "_")):
        return (f"{_DEDICATED}: the deploy makes it a nologin system user, which would take {user}'s shell and home, "
                "or lend its files to the service")
    return ""


DedicatedUser = typed(str, _DEDICATED, _refuse(_account_problem), Owned("account"),
                      pattern=r"^[a-z_][a-z0-9_-]{0,31}$")


def owned_name(max_length: int, what: str):
    """A name of the deploy's own (an nftables table, a unit): it starts with the project's prefix, so replacing or
    flushing it never touches the host's own (`filter`, `nat`, the distribution's units)."""
    rest = max_length - len(PROJECT_PREFIX)
    return typed(str, f"{what} starting with {PROJECT_PREFIX} (lower case, digits and _, up to {max_length} "
                      f"characters), such as {PROJECT_PREFIX}_bridge: the deploy replaces it whole",
                 Owned("name"), pattern=f"^{PROJECT_PREFIX}[a-z0-9_]{{0,{rest}}}$")
FileName = pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", "a file name without '/'")
K8sName = pattern(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$", "a Kubernetes namespace (a DNS label)")
ServerNames = pattern(r"^[A-Za-z0-9_.*~:\[\]-]+( [A-Za-z0-9_.*~:\[\]-]+)*$",
                       "nginx server_name values separated by spaces (no ';', quotes or braces)")
HostName = typed(str, "a DNS name or an IP address", _check(
    lambda n: _is_ip(n) or re.fullmatch(r"[A-Za-z0-9*]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9-]{1,63})*\.?", n) is not None,
    "a DNS name or an IP address"))
Cidr = typed(str, "an address with its prefix length, e.g. 192.168.100.10/24",
             _check(_is_interface, "an address/prefix"))
# the proxy's upstreams, node exporter's listen address, the watchdog's URLs and the health probes write it as
# ADDRESS:PORT, where an IPv6 address would need brackets none of them adds
Ipv4Address = typed(str, "an IPv4 address such as 127.0.0.1", _check(
    lambda a: _is_ip(a) and ipaddress.ip_address(a).version == 4, "an IPv4 address such as 127.0.0.1"))
Ipv4OrEmpty = typed(str, "an IPv4 address such as 192.168.1.50, or empty", _check(
    lambda a: a == "" or (_is_ip(a) and ipaddress.ip_address(a).version == 4), "an IPv4 address, or empty"))
Regex = typed(str, "a POSIX extended regular expression without single quotes",
              _check(_is_regex, "a POSIX extended regular expression without single quotes"))
SystemdSize = pattern(r"^[1-9][0-9]{0,15}[KMGT]?$", "a size in bytes with an optional K, M, G or T suffix (base 1024) "
                      "as systemd parses it, e.g. 64M")
Fraction = typed(float, "a fraction greater than 0 and at most 1", gt=0, le=1)
Percent = typed(float, "a percentage greater than 0 and below 100", gt=0, lt=100)


def list_of(item, description: str, min_length: int = 0):
    return Annotated[list[item], Field(description=description, min_length=min_length)]


DebPackages = list_of(DebPackage, "a list of Debian package names")


def _distinct(values: list) -> list:
    """Each value once: a stream count measured twice is one window kept and one dropped (the judge refuses it)."""
    repeated = sorted({v for i, v in enumerate(values) if v in values[:i]})
    if repeated:
        raise ValueError(f"each value once ({', '.join(map(str, repeated))} listed more than once)")
    return values


def distinct_list_of(item, description: str, min_length: int = 0):
    return Annotated[list[item], Field(description=description, min_length=min_length), AfterValidator(_distinct)]


# --- the fleet's waits and buffers: each bounded by what it controls (group_data/all.py says why, beside each) -------
# the longest one generation can take: a 262,144-token answer (the longest context in the catalog) at 10 tokens/s,
# half the 27B coder's one-stream decode on a GX10, is 26,214 s; a request, a queue wait or a router's stop past this
# is hung, not generating, s
LONGEST_GENERATION_S = 28_800
# a dead or hung box leaves every router's rotation within this, s: ROUTER_HEALTH_FAILURE_THRESHOLD x
# (ROUTER_HEALTH_INTERVAL_S + ROUTER_HEALTH_TIMEOUT_S); requests the cache-aware policy sends it meanwhile fail
MAX_ROUTER_HEALTH_WINDOW_S = 120
# a failed front door gives up the VIP within this, s: FRONT_HEALTH_FALL x (FRONT_HEALTH_INTERVAL_S +
# FRONT_HEALTH_TIMEOUT_S); every client request through the VIP fails meanwhile
MAX_FRONT_HEALTH_WINDOW_S = 60


def whole_seconds(low: int, high: int, why: str):
    """Whole seconds from `low` to `high`, the bound's reason in the words an error message gives."""
    return typed(int, f"a whole number of seconds from {low} to {high} ({why})", ge=low, le=high)


def bounded_count(high: int, what: str, why: str):
    return typed(int, f"a whole number of {what} from 1 to {high} ({why})", ge=1, le=high)


# --- the fleet: pools of boxes and rollouts in waves (group_data/gx10.py FLEET_POOLS, all.py ROLLOUT_WAVES) ----------

_WAVE_SIZE = 'a whole number of boxes from 1 to 10000, or a percentage from 1% to 100% such as "25%"'
_WAVE_PERCENT = re.compile(r"^(100|[1-9][0-9]?)%$")
MAX_BOXES = 10_000


def _wave_size(value):
    """A batch of boxes: a whole number of them, or a percentage as Ansible's `serial:` reads one ("25%")."""
    whole = type(value) is int and 1 <= value <= MAX_BOXES
    if not (whole or (isinstance(value, str) and _WAVE_PERCENT.match(value))):
        raise ValueError(_WAVE_SIZE)
    return value


WaveSize = Annotated[int | str, PlainValidator(_wave_size), Field(description=_WAVE_SIZE)]


def _pool_long_form(value):
    """A FLEET_POOLS short form as its long form: 3 -> {"count": 3}; ["spark-1"] -> {"boxes": ["spark-1"]}."""
    if type(value) is int:
        return {"count": value}
    if isinstance(value, list):
        return {"boxes": value}
    if isinstance(value, dict) and type(value.get("boxes")) is int:
        return {**{k: v for k, v in value.items() if k != "boxes"}, "count": value["boxes"]}
    return value


class FleetPool(BaseModel):
    """A FLEET_POOLS entry, its short forms (a number of boxes, a list of host names) read as this long form."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    model: Annotated[str | None, Field(description="a coding model's catalog key (default: the pool's name)")] = None
    count: typed(int, f"a whole number of boxes from 0 to {MAX_BOXES}", ge=0, le=MAX_BOXES) = 0
    boxes: list_of(typed(str, "an inventory host name", min_length=1), "a list of inventory host names") = []
    tensor_parallel: bool = False
    embedders: bool = True
    served_name: Annotated[Name | None, Field(
        description="the OpenAI model id clients ask for (default: CODER_SERVED_NAME for CODING_MODEL's pool, else "
                    "the pool's name)")] = None


FleetPoolValue = Annotated[FleetPool, BeforeValidator(_pool_long_form), Field(
    description='a number of boxes, a list of inventory host names, or {"model", "boxes", "tensor_parallel", '
                '"embedders", "served_name"}')]
EstimateRange = Annotated[list[typed(float, f"a number of seconds from 0 to {MAX_SECONDS}", ge=0, le=MAX_SECONDS)],
                          Field(description="[low, high] in seconds", min_length=2, max_length=2)]
