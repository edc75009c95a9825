"""The versioned venv a configuration runs vLLM from: its pip options, what Ray adds, and its name
(<SPARKCTL_HOME>/venvs/<version>-<hash of what is installed>). Pure, from the typed settings: the rendered units
(render/units.py) name it in ExecStart, and a bench record names it as its vLLM build (measure/labels.py), so the
two never disagree on what a build is.
"""

from __future__ import annotations

import hashlib
import json

from sparkctl.config.schema import GroupData


def pip_args(cfg: GroupData) -> list[str]:
    """pip's options for every install into a vLLM venv (constraints file, indexes, local wheelhouses)."""
    args = []
    if cfg.VLLM_PIP_CONSTRAINTS:
        args += ["-c", f"{cfg.SPARKCTL_HOME}/constraints.txt"]
    for url in cfg.VLLM_PIP_EXTRA_INDEX_URLS:
        args += ["--extra-index-url", url]
    return args + index_args(cfg)


def index_args(cfg: GroupData) -> list[str]:
    """Where pip looks for wheels besides (or instead of) PyPI: local wheelhouses, no index (an air-gapped host).
    Every pip install the deploy runs takes these (a vLLM venv, the gateway's router venv)."""
    args = []
    for path in cfg.PIP_FIND_LINKS:
        args += ["--find-links", path]
    if cfg.PIP_NO_INDEX:
        args.append("--no-index")
    return args


def ray_requirement(cfg: GroupData) -> str | None:
    """What tensor-parallel over Ray adds to the vLLM venv (its actors import vLLM from the Ray units' python);
    None for every other configuration."""
    if cfg.SPARK_TOPOLOGY != "tensor-parallel" or cfg.TP_BACKEND != "ray":
        return None
    return f"ray[default]=={cfg.RAY_VERSION}"


def vllm_venv(cfg: GroupData) -> str:
    """The versioned venv this configuration's vLLM lives in: <SPARKCTL_HOME>/venvs/<version>-<hash of what is
    installed>. A changed requirement, pip option or constraint is a new venv beside the running one, and a new
    unit file (ExecStart names it), so it is rolled out, and rolled back, like any other change. Ray, when the
    configuration runs it, is one of those requirements: it is installed into a new venv, never into a running one."""
    ray = ray_requirement(cfg)  # appended only then: every venv without Ray keeps the name it had
    what = json.dumps([cfg.VLLM_PIP_REQUIREMENT, pip_args(cfg), cfg.VLLM_PIP_CONSTRAINTS, cfg.VLLM_PIP_REMOVE,
                       cfg.VLLM_METADATA_ALIAS, cfg.PIP_VERSION, *([ray] if ray else [])], sort_keys=True)
    return f"{cfg.SPARKCTL_HOME}/venvs/{cfg.VLLM_VERSION}-{hashlib.sha256(what.encode()).hexdigest()[:12]}"
