"""vLLM: system packages, a dedicated user, the pinned vLLM in a versioned venv, the box-side helpers.

The venv is <SPARKCTL_HOME>/venvs/<version>-<hash of what is installed> (sparkctl.render.units.vllm_venv), built
and import-checked beside the running one; the units switch to it through the rollout transaction, which can
roll back to the previous venv. Venvs no unit references are pruned after the rollouts (tasks/services.py).
"""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import apt, files, server

from sparkctl import REPO_ROOT
from sparkctl.config.settings import Settings
from sparkctl.render.units import pip_args, vllm_venv
from tasks.ops import venv_build

# pip_args: tasks/link.py installs ray with the same options
__all__ = ["REMOTE_SCRIPTS", "SHARED_SCRIPTS", "pip_args", "vllm"]

REMOTE_SCRIPTS = ("rollout.py", "rollout_txn.py", "rollout_gate.py", "rollout_drain.py", "rollout_peer.py",
                  "rollout_restart.py", "rollout_verdict.py", "fetch_checkpoint.py", "check_vllm_args.py",
                  "contract.py", "boxio.py")
# uploaded here, before any rollout, and imported by the monitoring step's scripts too (the box boundary's contract,
# the one atomic write): vllm() returns their uploads, and the monitoring step restarts its watchdog when they change
SHARED_SCRIPTS = ("contract.py", "boxio.py")


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
    files.directory(name=f"Create {state}/rollout (root)", path=f"{state}/rollout", user="root", group="root",
                    mode="0755")
    for path in (home, f"{home}/bin", f"{home}/venvs"):
        files.directory(name=f"Create {path}", path=path, user="root", group="root", mode="0755")
    files.directory(name=f"Create {cfg.ENV_DIR} (root-only)", path=cfg.ENV_DIR, user="root", group="root",
                    mode="0700")
    uploads = {script: files.put(name=f"Upload {script}", src=str(REPO_ROOT / "sparkctl" / "box" / script),
                                 dest=f"{home}/bin/{script}", user="root", group="root", mode="0755")
               for script in REMOTE_SCRIPTS}
    files.put(name="Write pip constraints", src=StringIO("".join(f"{c}\n" for c in cfg.VLLM_PIP_CONSTRAINTS)),
              dest=f"{home}/constraints.txt", user="root", group="root", mode="0644")
    # a new venv beside the running one: a failed install touches no running service
    venv_build(name=f"Build and import-check vLLM {cfg.VLLM_VERSION} ({cfg.VLLM_DIST}) in {venv}", venv=venv,
               pip_version=cfg.PIP_VERSION, dist=cfg.VLLM_DIST, version=cfg.VLLM_VERSION,
               requirement=cfg.VLLM_PIP_REQUIREMENT, pip_args=pip_args(cfg), remove=cfg.VLLM_PIP_REMOVE,
               alias=cfg.VLLM_METADATA_ALIAS)
    return [uploads[script] for script in SHARED_SCRIPTS]
