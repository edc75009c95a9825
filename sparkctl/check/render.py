"""Render every file the deploy writes to a box, with the functions the tasks use, and run the real validators on
the control machine before the box is touched (part of check/validate.py validate_host: `python -m sparkctl check`
and the deploy's preflight run it alike).

| what                                   | validator                                                              |
|----------------------------------------|------------------------------------------------------------------------|
| nginx site + token file                | nginx -t in a private prefix                                           |
| vLLM units, box facts service + timer, | systemd-analyze verify in a private root (a warning counts)            |
| watchdog unit, Ray unit (+ the head's  |                                                                        |
| coder drop-in), sshd drop-in, the      |                                                                        |
| device check's transient unit          |                                                                        |
| earlyoom's arguments                   | glibc's regcomp/regexec on its --prefer/--avoid (vLLM first, never sshd) |
| vLLM env files                         | the argument list read back as systemd gives it; vLLM's own parser when  |
|                                        | vLLM is installed here (else the box runs it before anything stops)      |
| netplan file (tensor-parallel)         | netplan generate when installed here, else parsed as YAML               |
| watchdog.json, node exporter ARGS      | rendered (a render error is a refusal)                                  |

A file a validator refuses is blamed on the setting that produced the failing line: each setting is changed in
turn, the file rendered again, and the settings whose change changes that line are the candidates (the one the
operator changed first). Results are cached per rendered content: identical hosts are validated once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shlex
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sparkctl.box.check_vllm_args import unescape_env_value
from sparkctl.check import tools
from sparkctl.check.blame import culprits, describe
from sparkctl.check.load import shipped
from sparkctl.config import pki
from sparkctl.config.schema import GroupData
from sparkctl.config.settings import Settings
from sparkctl.errors import SettingError
from sparkctl.render import box_files, device_check, ray, units
from sparkctl.render import monitoring as mon
from sparkctl.render.box_files import EARLYOOM_NEVER_PREFER, EARLYOOM_VITAL, EARLYOOM_VLLM

Render = Callable[[GroupData], str]


@dataclass(frozen=True)
class BoxFile:
    path: str  # where the deploy writes it on the box
    render: Render  # the task's own render function, for this host's services: re-run with other settings to blame
    secret: bool = False  # it holds a token or a password: neither its lines nor a validator's words are shown
    hidden: tuple[str, ...] = ()  # secrets on some of its lines, never shown (the rest of the file is)


def _units(s: Settings) -> dict[str, BoxFile]:
    """Every systemd unit (and drop-in) the deploy writes, by name below /etc/systemd/system."""
    out = {svc.unit: BoxFile(f"/etc/systemd/system/{svc.unit}", lambda c, svc=svc: units.render_unit(svc, c))
           for svc in s.services}
    out[mon.FACTS_UNIT] = BoxFile(f"/etc/systemd/system/{mon.FACTS_UNIT}",
                                  lambda c: mon.facts_service(c, box_files.CERT_PATH))
    out[mon.FACTS_TIMER] = BoxFile(f"/etc/systemd/system/{mon.FACTS_TIMER}", mon.facts_timer)
    out[mon.WATCHDOG_UNIT] = BoxFile(f"/etc/systemd/system/{mon.WATCHDOG_UNIT}", mon.watchdog_service)
    if ray.runs_ray(s.role, s.cfg):
        name = ray.unit_name(s.role)
        out[name] = BoxFile(f"/etc/systemd/system/{name}", lambda c: ray.render_unit(s.role, s.coder, c))
        if s.role.name == "head":
            out[f"{s.coder.unit}.d/{ray.COORDINATION_DROPIN}"] = BoxFile(ray.coder_dropin_path(s.coder),
                                                                        lambda c: ray.render_coder_dropin())
    out["ssh.service.d/sparkctl-memory.conf"] = BoxFile(box_files.SSHD_DROPIN, box_files.sshd_dropin)
    if s.cfg.VLLM_DEVICE_PREPARE:
        out[units.DEVICES_UNIT] = BoxFile(f"/etc/systemd/system/{units.DEVICES_UNIT}", units.render_devices_unit)
    check = f"{device_check.unit_name(units.vllm_venv(s.cfg))}.service"  # systemd-run's, when a venv is built
    out[check] = BoxFile(f"/run/systemd/transient/{check}", lambda c: device_check.as_unit(s.coder, c))
    return out


@lru_cache(maxsize=1)
def throwaway_pair() -> tuple[str, str]:
    """A certificate and key for nginx -t to load (secrets.check_tls_pair checks the operator's own pair)."""
    with tempfile.TemporaryDirectory(prefix="sparkctl-check-pki-") as tmp:
        cert, key, _ca = pki.ensure_server_cert(Path(tmp), "sparkctl-check", ["sparkctl-check"])
        return cert.read_text(), key.read_text()


def _proxy(s: Settings, root: Path, scrape_token: str) -> dict[str, BoxFile]:
    """The site (its include and TLS paths pointing into nginx's private prefix) and the token file, as
    tasks/proxy.py renders them."""
    api = [svc for svc in s.services if not svc.headless]
    cert, key = throwaway_pair()
    local = {"token_file": str(root / "token.conf"), "cert_path": str(root / "server.pem"),
             "key_path": str(root / "server.key")}
    return {"site.conf": BoxFile(box_files.SITE, lambda c: box_files.site(c, api, **local)),
            "token.conf": BoxFile(box_files.TOKEN_FILE, lambda c: box_files.tokens(c, s.api_token, scrape_token),
                                  secret=True),
            "server.pem": BoxFile(box_files.CERT_PATH, lambda c: cert),
            "server.key": BoxFile(box_files.KEY_PATH, lambda c: key)}


# --- the checks ----------------------------------------------------------------------------------------------------

_CACHE: dict[str, list] = {}  # sha256 of (validator, rendered texts) -> its problems
# one run per content at a time: hosts checked at once (the deploy's greenlets, whose locks gevent makes its own)
# wait for the first host's run instead of each starting the same one
_RUNNING: dict[str, threading.Lock] = {}


def validated(tool: str, root: Path, files: dict[str, BoxFile], cfg: GroupData, run) -> None:
    """Run `run(root, {name: text})` once per distinct content; refuse on its first problem, blaming a setting."""
    texts = {name: f.render(cfg) for name, f in files.items()}
    stable = sorted((name, text.replace(str(root), "<root>")) for name, text in texts.items())
    key = hashlib.sha256(repr((tool, stable)).encode()).hexdigest()
    with _RUNNING.setdefault(key, threading.Lock()):
        if key not in _CACHE:
            root.mkdir(mode=0o700)
            _CACHE[key] = run(root, texts)
    if _CACHE[key]:
        problem = _CACHE[key][0]
        raise _refusal(tool, files[problem.name], cfg, problem)


def _refusal(tool: str, f: BoxFile, cfg: GroupData, problem: tools.Problem) -> SettingError:
    text = f.render(cfg).splitlines()
    line = text[problem.line - 1].strip() if problem.line and problem.line <= len(text) else ""
    secret = f.secret  # the token file's lines and the validator's words about them hold a token
    where = f"{f.path} line {problem.line}" if problem.line else f.path
    said = f"{where} (not shown: it holds a secret)" if secret else \
        f"{where}{f' `{line}`' if line else ''}: {problem.message}"
    for hidden in f.hidden:  # a password on one of its lines: the rest of the file is shown
        said, line = said.replace(hidden, "<secret>"), line.replace(hidden, "<secret>")
    names = culprits(f.render, cfg, problem.line, shipped())
    if not names:
        return SettingError(f"the rendered {f.path}", line if not secret else "<secret>", f"a file {tool} accepts",
                            said)
    others = f" (the line also reads {', '.join(names[1:])})" if names[1:] else ""
    return SettingError(names[0], describe(getattr(cfg, names[0])), f"a value {tool} accepts in {f.path}",
                        f"{tool} refuses {said}{others}")


def _earlyoom(s: Settings) -> str:
    """earlyoom's --prefer/--avoid as the package's unit gives them (EnvironmentFile, then $EARLYOOM_ARGS split),
    through glibc's regex: --prefer matches vLLM's processes and none the box needs, --avoid all it needs."""
    line = next(x for x in box_files.earlyoom(s.cfg).splitlines() if x.startswith("EARLYOOM_ARGS="))
    argv = shlex.split(unescape_env_value(line.split("=", 1)[1]))
    given = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i] in ("--prefer", "--avoid")}
    names = EARLYOOM_VLLM + EARLYOOM_NEVER_PREFER
    for flag, setting in (("--prefer", "EARLYOOM_PREFER"), ("--avoid", "EARLYOOM_AVOID")):
        if tools.posix_matches(given[flag], names) is None:
            raise SettingError(setting, given[flag], "a POSIX extended regular expression (glibc's regcomp compiles "
                                                     "it as earlyoom does)", "regcomp refuses it")
    preferred = tools.posix_matches(given["--prefer"], names)
    wrong = sorted(preferred & set(EARLYOOM_NEVER_PREFER))
    if wrong or not preferred & set(EARLYOOM_VLLM):
        raise SettingError("EARLYOOM_PREFER", given["--prefer"], f"a pattern matching vLLM's processes "
                           f"({', '.join(EARLYOOM_VLLM)}) and none of {', '.join(EARLYOOM_NEVER_PREFER)}",
                           f"It matches {', '.join(wrong)}: earlyoom would kill it first" if wrong else
                           "It matches no vLLM process: earlyoom would not kill vLLM first")
    missed = sorted(set(EARLYOOM_VITAL) - tools.posix_matches(given["--avoid"], names))
    if missed:
        raise SettingError("EARLYOOM_AVOID", given["--avoid"], f"a pattern matching every process the box needs "
                           f"({', '.join(EARLYOOM_VITAL)})", f"It misses {', '.join(missed)}")
    return "earlyoom: --prefer/--avoid through glibc's regex"


def _vllm_args(s: Settings) -> str:
    """Each env file gives vLLM exactly the deploy's argument list; vLLM's own parser where it is installed."""
    argvs = {}
    for svc in s.services:
        env = next(x for x in units.render_env(svc, s.cfg).splitlines() if x.startswith("VLLM_ARGS="))
        if shlex.split(unescape_env_value(env.split("=", 1)[1])) != units.vllm_args(svc, s.cfg):
            raise SettingError(f"vLLM arguments of {svc.unit}", env, "an argument list systemd gives vLLM unchanged")
        argvs[svc.unit] = ["serve", *units.vllm_args(svc, s.cfg)]
    if importlib.util.find_spec("vllm") is None:
        return ("vLLM's argument parser: skipped (vLLM is not installed on this control machine); the box runs it "
                "from the candidate venv before anything stops (sparkctl/box/check_vllm_args.py)")
    from sparkctl.box import check_vllm_args

    for unit, problems in check_vllm_args.check(argvs).items():
        if problems:
            raise _vllm_refusal(s, unit, problems[0])
    return "vLLM's argument parser: every service's arguments"


def _vllm_refusal(s: Settings, unit: str, problem: str) -> SettingError:
    """The free-form list holding the flag vLLM refused (VLLM_COMMON_ARGS, else the catalog entry's extra_args)."""
    svc = next(v for v in s.services if v.unit == unit)
    for i, arg in enumerate(s.cfg.VLLM_COMMON_ARGS):
        if arg.startswith("-") and arg.split("=")[0] in problem:
            return SettingError(f"VLLM_COMMON_ARGS[{i}]", arg, "an argument vLLM accepts", f"{unit}: {problem}")
    where = f"CATALOG_OVERRIDES[{svc.model.key!r}]" if svc.model.key in s.cfg.CATALOG_OVERRIDES else \
        f"the catalog entry {svc.model.key!r}"
    return SettingError(where, list(svc.model.extra_args), "arguments vLLM accepts", f"{unit}: {problem}")


def _netplan(s: Settings, root: Path) -> str:
    """netplan generate where it is installed; else the file must at least be the YAML netplan reads."""
    name = Path(s.cfg.CX7_NETPLAN_FILE).name
    f = BoxFile(s.cfg.CX7_NETPLAN_FILE, lambda c: box_files.netplan(c, s.host_name))
    if tools.available("netplan"):
        validated("netplan generate", root / "netplan", {name: f}, s.cfg, tools.netplan)
        return "netplan generate: the CX7 link's file"
    import yaml

    try:
        doc = yaml.safe_load(f.render(s.cfg))
    except yaml.YAMLError as exc:
        raise _refusal("a YAML parser", f, s.cfg, tools.Problem(name, None, str(exc))) from None
    network = doc.get("network") if isinstance(doc, dict) else None
    if not isinstance(network, dict) or network.get("version") != 2:
        raise _refusal("netplan", f, s.cfg, tools.Problem(name, None, "no network: version: 2"))
    return "netplan generate: skipped (netplan is not installed on this control machine); the YAML parsed"


def with_tool(root: Path, exe: str, tool: str, files: dict[str, BoxFile], cfg: GroupData, run) -> str:
    if not tools.available(exe):
        return skipped(tool, exe)
    validated(tool, root / exe, files, cfg, run)
    shown = [Path(f.path).name for f in files.values() if not f.path.startswith(box_files.TLS_DIR)]
    return f"{tool}: {', '.join(shown)}"


def skipped(tool: str, exe: str) -> str:
    """What `check` says of a validator this control machine lacks (scripts/control-packages.txt lists them all)."""
    return (f"{tool}: skipped ({exe} is not installed on this control machine: apt-get install the packages of "
            "scripts/control-packages.txt)")


def check_box_files(s: Settings, scrape_token: str) -> tuple[str, ...]:
    """Render every file the deploy would write to this box and run the validators there are; a file one refuses
    is a SettingError naming the setting behind the failing line. Returns what was validated and what skipped."""
    mon.watchdog_config(s.cfg, s.services)  # JSON and an env line: rendering them is their check
    mon.node_exporter_defaults(s.cfg)
    with tempfile.TemporaryDirectory(prefix="sparkctl-check-") as tmp:  # 0700: the token file is written here
        root = Path(tmp)
        notes = [with_tool(root, "systemd-analyze", "systemd-analyze verify", _units(s), s.cfg,
                            tools.systemd)]
        if s.role.serves_api:
            notes.append(with_tool(root, "nginx", "nginx -t", _proxy(s, root / "nginx", scrape_token), s.cfg,
                                    tools.nginx))
        notes.append(_earlyoom(s) if tools.glibc_regex_available() else
                     "earlyoom: skipped (no glibc regex on this control machine)")
        notes.append(_vllm_args(s))
        if s.role.tensor_parallel and s.cfg.CX7_MANAGE_NETPLAN:
            notes.append(_netplan(s, root))
    return tuple(notes)
