"""The control machine's wheelhouse: the vLLM venv's requirement set, resolved for the box as `check --resolve`
resolves it (check/resolve.py), downloaded ONCE into a cache on this machine (WHEELHOUSE_CACHE, one directory per
requirement set), pinned there with every wheel's sha256. The vLLM step (tasks/vllm.py) copies that directory to
each box that builds a venv and installs with `pip install --no-index --find-links <it> --require-hashes -r
<pinned file>`: every box builds the same venv from the same files, and no box needs the index. `check --resolve`
reads its resolution from the same cache instead of downloading the set again.

Where the cache is built from: the index this machine reaches (PIP_INDEX_URL, VLLM_PIP_EXTRA_INDEX_URLS), or the
venv's own local wheelhouses where this machine holds them (PIP_NO_INDEX, PIP_FIND_LINKS_HERE: the simulated Spark's
stand-in for PyPI), or WHEELHOUSE_FROM (a directory of wheels carried to a site without Internet). Pure of pyinfra.

A cache directory holds the wheels, `pins.json` (each distribution, its wheel, sha256 and size: the source of the
rest), `requirements.txt` (the set pinned with --hash lines), `pip.txt` (pip itself, pinned: installed first, as the
venv always did), `SHA256SUMS` (what the box checks the copy with, `sha256sum -c`), pip's `report.json` (the
resolution `check --resolve` prints) and `.complete`, written last (a directory without it is rebuilt).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote

from packaging.utils import canonicalize_name

from sparkctl import REPO_ROOT
from sparkctl.check import resolve
from sparkctl.config.quantities import GIB
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError

# a download of the whole set (~4.6 GB for a GX10) over a slow site link: the project's long timeout, s
DOWNLOAD_TIMEOUT_S = 7200
PINS, WHEELS, PIP, SUMS, REPORT, STAMP = "pins.json", "requirements.txt", "pip.txt", "SHA256SUMS", "report.json", \
    ".complete"
PARTIAL = ".partial"  # suffix of a directory being filled (here and on the box); renamed when complete
BOX_SUBDIR = "wheelhouse"  # under SPARKCTL_HOME on the box: one directory per requirement set
HASH_CHUNK = 1 << 20  # bytes read at a time when hashing a wheel


@dataclass(frozen=True)
class Pin:
    """One distribution of the set: its wheel file and what that file must hash to."""

    name: str
    version: str
    wheel: str
    sha256: str
    size: int

    def line(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class Wheelhouse:
    """A complete cache directory on this machine."""

    key: str
    path: Path
    pins: tuple[Pin, ...]

    @property
    def size(self) -> int:
        return sum(p.size for p in self.pins)

    def resolution(self) -> resolve.Resolution:
        """What pip resolved for the box when the cache was built (its report), pip itself left out."""
        doc = json.loads((self.path / REPORT).read_text())
        installs = tuple(r for r in resolve.parse_report(doc) if canonicalize_name(r.name) != "pip")
        meta = json.loads((self.path / STAMP).read_text())
        return resolve.Resolution(tuple(meta["requirements"]), tuple(meta["platforms"]), meta["python_version"],
                                  installs, doc.get("environment", {}))


def requirement_set(cfg: GroupData) -> dict:
    """What decides which files the set is: the requirements, the resolver's constraints and indexes, the box's
    platform tags, Python and implementation, and the pip the venv gets first."""
    return {"requirements": resolve.requirements(cfg), "pip": f"pip=={cfg.PIP_VERSION}",
            "constraints": list(cfg.VLLM_PIP_CONSTRAINTS), "extra_index_urls": list(cfg.VLLM_PIP_EXTRA_INDEX_URLS),
            "platforms": resolve.platform_tags(cfg.BOX_PIP_PLATFORMS), "python_version": cfg.BOX_PYTHON_VERSION,
            "implementation": "cp"}


def key(cfg: GroupData) -> str:
    """The cache directory's name: <dist>-<version>-<hash of the requirement set>; the same set, the same key, on
    every machine."""
    digest = hashlib.sha256(json.dumps(requirement_set(cfg), sort_keys=True).encode()).hexdigest()[:12]
    return f"{cfg.VLLM_DIST}-{cfg.VLLM_VERSION}-{digest}"


def cache_root(cfg: GroupData) -> Path:
    """WHEELHOUSE_CACHE on this machine (a relative path is the repository's)."""
    return REPO_ROOT / cfg.WHEELHOUSE_CACHE


def box_root(cfg: GroupData) -> str:
    return f"{cfg.SPARKCTL_HOME}/{BOX_SUBDIR}"


def box_dir(cfg: GroupData) -> str:
    """Where a box keeps the set's copy: <SPARKCTL_HOME>/wheelhouse/<key>."""
    return f"{box_root(cfg)}/{key(cfg)}"


def install_args(directory: str) -> list[str]:
    """pip's options for an install from a copy of the wheelhouse: that directory alone, every file hash-checked."""
    return ["--no-index", "--find-links", directory, "--require-hashes"]


def pins_from_report(doc: dict, directory: Path) -> tuple[Pin, ...]:
    """Each distribution of pip's report with its wheel in `directory`, the report's sha256 and the file's size.
    Raises ValueError when the report has no sha256 for one or its wheel is not there."""
    pins = []
    for r, item in zip(resolve.parse_report(doc), doc["install"]):
        wheel = unquote(r.wheel)  # a file URL quotes a local version's "+"
        sha = ((item["download_info"].get("archive_info") or {}).get("hashes") or {}).get("sha256")
        if not sha:
            raise ValueError(f"pip's report gives no sha256 for {wheel}")
        if not (directory / wheel).is_file():
            raise ValueError(f"{wheel} is in pip's report but not in {directory}")
        pins.append(Pin(canonicalize_name(r.name), r.version, wheel, sha, (directory / wheel).stat().st_size))
    return tuple(pins)


def render_pinned(pins) -> str:
    """A requirements file every line of which pins a version and its hash (pip --require-hashes)."""
    return "".join(f"{p.line()}\n" for p in pins)


def render_sums(pins) -> str:
    """`sha256sum -c` input: the box checks its copy with coreutils before pip sees it."""
    return "".join(f"{p.sha256}  {p.wheel}\n" for p in pins)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def verify(directory: Path, pins) -> list[str]:
    """Every wheel of `pins` in `directory` hashed against its pin: the problems, each naming the file."""
    problems = []
    for p in pins:
        path = directory / p.wheel
        if not path.is_file():
            problems.append(f"{p.wheel}: missing")
        elif (got := sha256_of(path)) != p.sha256:
            problems.append(f"{p.wheel}: sha256 {got}, pinned {p.sha256}")
    return problems


def load(cfg: GroupData) -> Wheelhouse | None:
    """The complete cache directory of this configuration's set, None when there is none (or one not finished)."""
    path = cache_root(cfg) / key(cfg)
    if not (path / STAMP).is_file():
        return None
    pins = tuple(Pin(**p) for p in json.loads((path / PINS).read_text()))
    return Wheelhouse(key(cfg), path, pins)


def check_paths(cfg: GroupData) -> None:
    """The wheelhouse's paths on this machine: WHEELHOUSE_FROM, when set, is a directory; WHEELHOUSE_CACHE is one
    or does not exist yet. Raises SettingError naming the setting."""
    if cfg.WHEELHOUSE_FROM and not (REPO_ROOT / cfg.WHEELHOUSE_FROM).is_dir():
        raise SettingError("WHEELHOUSE_FROM", cfg.WHEELHOUSE_FROM,
                           "a directory of wheels on this machine (repository-relative or absolute), or \"\" for "
                           "the package index", f"{REPO_ROOT / cfg.WHEELHOUSE_FROM} does not exist or is not a "
                           f"directory")
    root = cache_root(cfg)
    if root.exists() and not root.is_dir():
        raise SettingError("WHEELHOUSE_CACHE", cfg.WHEELHOUSE_CACHE, "a directory on this machine (created when "
                           "missing)", f"{root} exists and is not a directory")


def source_args(cfg: GroupData, work: Path) -> list[str]:
    """Where this machine's pip downloads the set from: WHEELHOUSE_FROM (no index), else the venv's own indexes
    and local wheelhouses as this machine holds them (resolve.local_pip_args). Raises SettingError naming
    WHEELHOUSE_FROM when it is not a directory here, resolve.Skipped when a PIP_FIND_LINKS copy is not here."""
    check_paths(cfg)
    if cfg.WHEELHOUSE_FROM:
        source = REPO_ROOT / cfg.WHEELHOUSE_FROM
        constraints = ["-c", str(_constraints(cfg, work))] if cfg.VLLM_PIP_CONSTRAINTS else []
        return [*constraints, "--no-index", "--find-links", str(source)]
    return resolve.local_pip_args(cfg, work / "constraints.txt")


def _constraints(cfg: GroupData, work: Path) -> Path:
    path = work / "constraints.txt"
    path.write_text("".join(f"{c}\n" for c in cfg.VLLM_PIP_CONSTRAINTS))
    return path


def _box_pip(cfg: GroupData, command: str) -> list[str]:
    """This machine's pip as the box's (its markers, platform, Python, binary wheels only) running `command`."""
    platforms = [a for tag in resolve.platform_tags(cfg.BOX_PIP_PLATFORMS) for a in ("--platform", tag)]
    return [sys.executable, "-c", resolve.PIP_FOR_THE_BOX, json.dumps(resolve.box_environment(cfg)), command,
            "--progress-bar", "off", "--disable-pip-version-check", "--no-input", *platforms, "--python-version",
            cfg.BOX_PYTHON_VERSION, "--implementation", "cp", "--only-binary=:all:"]


def download_command(cfg: GroupData, dest: Path, work: Path) -> list[str]:
    """`pip download` of the whole set (pip included) for the box into `dest`; not into pip's own cache as well (the
    cache directory is the copy this machine keeps)."""
    wanted = requirement_set(cfg)
    return [*_box_pip(cfg, "download"), "--no-cache-dir", "--dest", str(dest), *source_args(cfg, work),
            *wanted["requirements"], wanted["pip"]]


def report_command(cfg: GroupData, dest: Path, work: Path) -> list[str]:
    """pip's dry run of the set against `dest` alone: the report names each wheel there with its sha256."""
    wanted = requirement_set(cfg)
    constraints = ["-c", str(_constraints(cfg, work))] if cfg.VLLM_PIP_CONSTRAINTS else []
    return [*_box_pip(cfg, "install"), "--dry-run", "--ignore-installed", "--target", str(work / "target"),
            "--report", str(work / REPORT), *constraints, "--no-index", "--find-links", str(dest),
            *wanted["requirements"], wanted["pip"]]


def _pip(cfg: GroupData, argv: list[str], cwd: Path, timeout: float) -> None:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=resolve.pip_environment(),
                           stdin=subprocess.DEVNULL, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise resolve.Skipped(f"pip did not finish within {timeout:g} s") from None
    if r.returncode:
        raise resolve.refusal(cfg, resolve.pip_said(r.stdout, r.stderr))


def build(cfg: GroupData, timeout: float = DOWNLOAD_TIMEOUT_S) -> Wheelhouse:
    """Download the set into <cache>/<key>.partial (a rerun after an interrupted one keeps what pip finished),
    pin it from pip's own report, and rename it to <cache>/<key>. Raises SettingError (VLLM_PIP_REQUIREMENT with
    pip's words, or WHEELHOUSE_FROM), resolve.Skipped when it cannot run here."""
    final = cache_root(cfg) / key(cfg)
    partial = final.with_name(final.name + PARTIAL)
    partial.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparkctl-wheelhouse-") as tmp:
        work = Path(tmp)
        _pip(cfg, download_command(cfg, partial, work), work, timeout)
        _pip(cfg, report_command(cfg, partial, work), work, timeout)
        doc = json.loads((work / REPORT).read_text())
    pins = pins_from_report(doc, partial)
    for stray in set(f.name for f in partial.glob("*.whl")) - {p.wheel for p in pins}:
        (partial / stray).unlink()  # a wheel an earlier resolution left: not the set's
    return complete(cfg, partial, pins, doc)


def complete(cfg: GroupData, partial: Path, pins: tuple[Pin, ...], doc: dict) -> Wheelhouse:
    """Write the pinned files beside the wheels in `partial`, stamp it, and rename it to the set's directory."""
    final = partial.with_name(key(cfg))
    (partial / REPORT).write_text(json.dumps(doc, indent=1))
    (partial / PINS).write_text(json.dumps([asdict(p) for p in pins], indent=1))
    (partial / WHEELS).write_text(render_pinned(p for p in pins if p.name != "pip"))
    (partial / PIP).write_text(render_pinned(p for p in pins if p.name == "pip"))
    (partial / SUMS).write_text(render_sums(pins))
    (partial / STAMP).write_text(json.dumps(requirement_set(cfg), indent=1))
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    return Wheelhouse(key(cfg), final, pins)


def ensure(cfg: GroupData, timeout: float = DOWNLOAD_TIMEOUT_S) -> tuple[Wheelhouse, bool]:
    """The cache directory of this configuration's set, built once (under a lock: two deploys of this machine
    download it once); returns it and whether it was downloaded now."""
    check_paths(cfg)
    root = cache_root(cfg)
    if (wh := load(cfg)) is not None:
        return wh, False
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key(cfg)}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (wh := load(cfg)) is not None:
            return wh, False
        return build(cfg, timeout), True


@lru_cache(maxsize=None)
def _verified(path: Path, pins: tuple[Pin, ...]) -> tuple[str, ...]:
    return tuple(verify(path, pins))


def verified(wh: Wheelhouse) -> Wheelhouse:
    """The cache directory hashed against its pins (once per process: a run pushes it to many boxes). Raises
    SettingError naming the bad files and the directory to remove."""
    problems = _verified(wh.path, wh.pins)
    if problems:
        raise SettingError("WHEELHOUSE_CACHE", str(wh.path.parent), "a cache whose wheels match their pins",
                           f"in {wh.path}: {'; '.join(problems)}. Remove {wh.path} and run again: it is downloaded "
                           f"again")
    return wh


def unavailable(cfg: GroupData) -> str | None:
    """Why no source on this machine can provide the set (None: the cache holds it, or it can be built here: from
    WHEELHOUSE_FROM, the venv's local wheelhouses, or an index that answers). Raises SettingError naming
    WHEELHOUSE_FROM when that directory does not exist."""
    check_paths(cfg)
    if load(cfg) is not None:
        return None
    with tempfile.TemporaryDirectory(prefix="sparkctl-wheelhouse-") as tmp:
        try:
            source_args(cfg, Path(tmp))
        except resolve.Skipped as exc:
            return str(exc)
    if cfg.WHEELHOUSE_FROM:
        return None
    why = resolve.offline(cfg)
    return f"no wheelhouse cache under WHEELHOUSE_CACHE={cfg.WHEELHOUSE_CACHE!r} and {why}" if why else None


def airgap_refusal(cfg: GroupData, box: str) -> SettingError | None:
    """An AIRGAPPED box installs only from the control machine's wheelhouse: refused (naming the box and the
    requirement) when no source here can provide it."""
    if not cfg.AIRGAPPED:
        return None
    why = unavailable(cfg)
    return None if why is None else airgap_error(cfg, box, why)


def airgap_error(cfg: GroupData, box: str, why: str) -> SettingError:
    return SettingError("AIRGAPPED", True, "False, or True with the box's vLLM requirement set available on this "
                        "machine (its wheelhouse cache, WHEELHOUSE_FROM, or an index this machine reaches)",
                        f"{box} has no route to the package index, and nothing here provides "
                        f"{cfg.VLLM_PIP_REQUIREMENT} for it: {why}")


def disk_refusal(cfg: GroupData, box: str, free: int | None, need: int) -> str | None:
    """The box's free bytes under SPARKCTL_HOME against what the copy will write plus DISK_HEADROOM_GIB."""
    want = need + int(cfg.DISK_HEADROOM_GIB * GIB)
    if free is None:
        return f"{box}: could not read the free space under SPARKCTL_HOME={cfg.SPARKCTL_HOME} (df)"
    if free >= want:
        return None
    return (f"{box}: {free / GIB:.1f} GiB free under SPARKCTL_HOME={cfg.SPARKCTL_HOME}, but the wheelhouse of "
            f"VLLM_PIP_REQUIREMENT={cfg.VLLM_PIP_REQUIREMENT!r} needs {need / GIB:.2f} GiB there plus "
            f"DISK_HEADROOM_GIB={cfg.DISK_HEADROOM_GIB} (nothing was copied)")


def box_check_command(partial: str) -> str:
    """The box's check of its copy, before it is renamed into place: every wheel against SHA256SUMS (coreutils);
    a wheel that fails is named on stderr, and the command fails."""
    said = (f"the wheelhouse copy in {partial}: the wheels above FAILED their sha256 (nothing was installed; "
            f"the next run copies them again)")
    return (f"cd {shlex.quote(partial)} && {{ sha256sum --quiet --strict -c {SUMS} >&2 || "
            f"{{ echo {shlex.quote(said)} >&2; exit 1; }}; }}")


def missing_on_box(pins, have: dict[str, str]) -> list[Pin]:
    """The wheels a box's partial copy (`have`: file name -> sha256, as `sha256sum` reads them there) still needs:
    an interrupted copy resumes with the rest."""
    return [p for p in pins if have.get(p.wheel) != p.sha256]


def resolve_note(cfg: GroupData) -> str:
    """The check's line for the resolution, from the wheelhouse cache (built once when missing): what resolved, or
    why it was skipped. Raises SettingError when pip cannot resolve the requirement for the box."""
    wh = load(cfg)
    how = "from the wheelhouse cache"
    if wh is None:
        why = unavailable(cfg)
        if why:
            return f"pip resolution for the box: skipped ({why})"
        try:
            wh, _ = ensure(cfg)
        except resolve.Skipped as exc:
            return f"pip resolution for the box: skipped ({exc})"
        how = "downloaded once into the wheelhouse cache"
    res = wh.resolution()
    where = f"{cfg.BOX_PIP_PLATFORMS[0] if cfg.BOX_PIP_PLATFORMS else 'this machine'}, Python {cfg.BOX_PYTHON_VERSION}"
    return (f"pip resolution for the box ({where}): {len(res.installs)} distributions: "
            f"{res.versions(resolve.SHOWN)} ({how} {wh.path}, {wh.size / 1e9:.2f} GB)")
