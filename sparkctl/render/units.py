"""What runs on a box: the vLLM services a configuration implies, their `vllm serve` arguments and env files.

Pure functions of the typed settings (`cfg`, sparkctl.config.schema.GroupData, and the Service values
sparkctl.config.settings derives); the pyinfra tasks only upload what these render. Rendering uses templates/ with
jinja2's StrictUndefined, exactly as the tests do (templates read settings as `d.SETTING`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import shlex

import jinja2

from sparkctl import REPO_ROOT
from sparkctl.box import contract
from sparkctl.capacity import admission
from sparkctl.capacity.venv import pip_args, ray_requirement, vllm_venv  # noqa: F401 - the units' names for them
from sparkctl.config import box_paths
from sparkctl.config.catalog import CODER
from sparkctl.config.schema import GroupData
from sparkctl.config.service import Service, snapshot_path
from sparkctl.errors import SettingError

# the oneshot unit that prepares the GPU's modules and device nodes as root (VLLM_DEVICE_PREPARE); the vLLM and Ray
# units Want it and start After= it (templates/sparkctl-devices.service.j2 says why not an ExecStartPre=+)
DEVICES_UNIT = "sparkctl-devices.service"
TP_UNIT_ENV = "SPARKCTL_TP_UNIT"  # read on the box by sparkctl/box/rollout_peer.py (TP_UNIT)
ENV_FILE_KEYS = ("SPARKCTL_MODEL", "SPARKCTL_REVISION", "SPARKCTL_MODEL_PATH", "SPARKCTL_PLANNED_GIB",
                 "VLLM_ARGS")  # templates/vllm.env.j2
# environment variables a setting of their own renders (only when set): {name: setting}; VLLM_EXTRA_ENV and
# GPU_ARCH_ENV may not name them (sparkctl/check/rules.py extra_env)
SETTING_ENV = {"TRITON_PTXAS_BLACKWELL_PATH": "TRITON_PTXAS_BLACKWELL_PATH",
               "VLLM_NCCL_SO_PATH": "NCCL_SYSTEM_LIBRARY", "NCCL_IB_GID_INDEX": "NCCL_IB_GID_INDEX"}
RUNTIME_ROOT = "/run"  # where systemd puts a unit's RuntimeDirectory (wiped at every stop): never a kernel cache's


def vllm_args(svc: Service, cfg: GroupData) -> list[str]:
    """The full `vllm serve` argument list (after `serve`) for a service."""
    m = svc.model
    args = [snapshot_path(cfg.MODEL_STORE, svc.checkpoint),
            "--served-model-name", svc.served_name,
            "--host", cfg.LISTEN_ADDRESS, "--port", str(svc.port),
            "--max-model-len", str(m.max_model_len),
            "--kv-cache-memory-bytes", str(svc.kv_cache_bytes),
            # vLLM's start-up admission (sparkctl/capacity/admission.py): its plan + a margin, never the 0.92 default
            "--gpu-memory-utilization", str(admission.service_utilization(svc, cfg))]
    if m.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", m.kv_cache_dtype]
    for flag, backend in (("--moe-backend", m.moe_backend), ("--linear-backend", m.linear_backend)):
        if backend != "auto":  # the catalog's kernel override; "auto": vLLM chooses
            args += [flag, backend]
    if m.speculative:
        spec = dict(m.speculative)
        if svc.draft is not None:
            spec["model"] = snapshot_path(cfg.MODEL_STORE, svc.draft)
        args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    if svc.role == CODER:
        args += ["--max-num-seqs", str(cfg.CODER_MAX_NUM_SEQS),
                 "--max-num-batched-tokens", str(cfg.CODER_MAX_NUM_BATCHED_TOKENS)]
    args += list(m.extra_args) + list(svc.extra_args) + list(cfg.VLLM_COMMON_ARGS)
    if svc.headless:
        args.append("--headless")
    for a in args:
        if not a or "\n" in a:
            raise SettingError(f"vLLM argument of {svc.name}", a, "a non-empty single-line value")
    return args


def env_file_value(args: list[str]) -> str:
    """The words as systemd's EnvironmentFile + `$VAR` expansion will give them back to vLLM.

    Words are shell-quoted (JSON in single quotes); the whole is then escaped for a double-quoted env value."""
    joined = shlex.join(args)
    return "".join("\\" + c if c in '"\\`$' else c for c in joined)


def toolchain_path(cfg: GroupData, venv: str) -> str:
    """The engines' PATH: the venv's bin (its pip `ninja`, which FlashInfer's JIT runs and vLLM's has_flashinfer()
    looks for), CUDA_HOME's bin (nvcc, ptxas), then ENGINE_SYSTEM_PATH (the C compilers)."""
    return ":".join([f"{venv}/bin", f"{cfg.CUDA_HOME}/bin", *cfg.ENGINE_SYSTEM_PATH])


def kernel_caches(cfg: GroupData) -> dict[str, str]:
    """{variable: absolute directory} of every kernel cache (KERNEL_CACHES), under STATE_DIR."""
    return {name: f"{cfg.STATE_DIR}/{sub}" for name, sub in cfg.KERNEL_CACHES.items()}


def service_environment(svc: Service, cfg: GroupData, venv: str | None = None) -> dict[str, str]:
    """Environment every vLLM service gets: the JIT toolchain (PATH, CUDA_HOME), the kernel caches under STATE_DIR,
    offline hub, loopback IPC, the GPU's arch. venv: the vLLM venv whose bin leads PATH (default: vllm_venv(cfg))."""
    state = cfg.STATE_DIR
    env = {
        "PATH": toolchain_path(cfg, venv or vllm_venv(cfg)),
        "CUDA_HOME": cfg.CUDA_HOME,
        "HF_HUB_OFFLINE": "1",  # checkpoints are downloaded by the deploy, never at serve time
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": f"{state}/hf",
        **kernel_caches(cfg),  # JIT / compile / autotune caches survive restarts
        "XDG_CACHE_HOME": f"{state}/cache",
        "XDG_CONFIG_HOME": f"{state}/config",
        "TMPDIR": f"{RUNTIME_ROOT}/vllm-{svc.name}",  # RuntimeDirectory: wiped on every stop (ZMQ sockets, dist files)
        "VLLM_HOST_IP": cfg.LISTEN_ADDRESS,
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_ENGINE_READY_TIMEOUT_S": str(cfg.VLLM_ENGINE_READY_TIMEOUT_S),
    }
    env.update(cfg.GPU_ARCH_ENV)  # the GB10's arch for the kernels compiled at first use (CuTe DSL, FlashInfer)
    if cfg.TRITON_PTXAS_BLACKWELL_PATH:
        env["TRITON_PTXAS_BLACKWELL_PATH"] = cfg.TRITON_PTXAS_BLACKWELL_PATH
    env.update(cfg.VLLM_EXTRA_ENV)  # the schema allows only string values
    env.update(svc.extra_env)
    return env


@functools.cache  # one per process: it keeps each compiled template (reloaded when its file changes)
def _jinja() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(REPO_ROOT / "templates")),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              autoescape=False)


def render_template(name: str, **context) -> str:
    return _jinja().get_template(name).render(**context)


def render_env(svc: Service, cfg: GroupData) -> str:
    """The service's env file: which checkpoint it serves and with which arguments (the flip lives here)."""
    return render_template("vllm.env.j2", svc=svc, env=service_environment(svc, cfg),
                           vllm_args=env_file_value(vllm_args(svc, cfg)),
                           model_path=snapshot_path(cfg.MODEL_STORE, svc.checkpoint),
                           planned_gib=f"{admission.engine_of(svc, cfg).footprint_gib:.3f}")


def render_unit(svc: Service, cfg: GroupData) -> str:
    return render_template("vllm.service.j2", svc=svc, d=cfg,
                           env_path=f"{cfg.ENV_DIR}/{svc.env_file}",
                           vllm_bin=f"{vllm_venv(cfg)}/bin/vllm", admission_standin=admission_standin(svc, cfg),
                           page_cache=page_cache_step(svc, cfg), devices_unit=DEVICES_UNIT)


def render_devices_unit(cfg: GroupData) -> str:
    """DEVICES_UNIT: VLLM_DEVICE_PREPARE's commands, one ExecStart= each (written only when there are any)."""
    return render_template("sparkctl-devices.service.j2", d=cfg)


def admission_standin(svc: Service, cfg: GroupData) -> str:
    """The simulated Spark's ExecStartPre (UNIFIED_MEMORY_STANDIN, run as root with the venv's python, so vLLM's own
    request_memory judges the start against the stand-in pool); "" on a real box, where vLLM reads the real one."""
    if not cfg.UNIFIED_MEMORY_STANDIN:
        return ""
    return shlex.join([f"{vllm_venv(cfg)}/bin/python", cfg.UNIFIED_MEMORY_STANDIN, "--service", svc.name,
                       "--env-dir", cfg.ENV_DIR, "--total-gib", f"{cfg.BOX_USABLE_MEMORY_GIB:g}",
                       "--os-reserve-gib", f"{cfg.OS_RESERVE_GIB:g}",
                       "--starting-gib", f"{cfg.VLLM_STARTING_ENGINE_GIB:g}",
                       "--page-cache-dir", f"{cfg.MODEL_STORE}/hub"])


def page_cache_step(svc: Service, cfg: GroupData) -> str:
    """The ExecStartPre=+ that evicts the checkpoints' page cache before every start of the service
    (PAGE_CACHE_EVICTION, sparkctl/box/page_cache.py; as root, outside the sandbox), so vLLM's memory snapshot is
    taken after it; "" when off."""
    if cfg.PAGE_CACHE_EVICTION == "off":
        return ""
    return shlex.join([f"{vllm_venv(cfg)}/bin/python", f"{box_paths.bin_dir(cfg.SPARKCTL_HOME)}/page_cache.py",
                       "--mode", cfg.PAGE_CACHE_EVICTION, "--hub", f"{cfg.MODEL_STORE}/hub", "--service", svc.name])


def rollout_env(cfg: GroupData) -> str:
    """Environment prefix telling rollout.py where this deploy keeps things (settings, not hard-coded paths); a
    shell word each (the schema allows only plain paths; quoted anyway: it precedes commands run as root)."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in (("SPARKCTL_ENV_DIR", cfg.ENV_DIR),
                                                          ("SPARKCTL_STATE_DIR", cfg.STATE_DIR),
                                                          ("SPARKCTL_DRAIN_DIR", cfg.DRAIN_DIR)))


def rollout_values(cfg: GroupData) -> dict:
    """{setting: value} of every setting the box's rollout.py is told (its contract's option table names them)."""
    return {name: getattr(cfg, name) for name in contract.SETTINGS}


def gate_kind(svc: Service) -> str:
    """What the box's health gate sends the service (contract.KINDS): a chat completion to the coder, an embedding
    to an embedder, nothing to a tensor-parallel worker's headless engine (it has no API; its head's gate is its)."""
    return "none" if svc.headless else "chat" if svc.role == CODER else "embed"


def apply_verdict_args(cfg: GroupData, service) -> dict:
    """The facts `rollout.py apply` needs to wait for a verdict after its health gate (contract dests
    verdict_timeout, verdict_default; {} = do not wait: acceptance off, or not the coder's head). The default is what
    the box does alone when the time is up."""
    if not cfg.ACCEPTANCE_ENABLED or service.role != CODER or service.headless:
        return {}
    return {"verdict_timeout": cfg.ACCEPTANCE_VERDICT_TIMEOUT_S,
            "verdict_default": contract.decision(False, cfg.ACCEPTANCE_MODE)}


def tp_unit_id(coders: list[tuple[Service, GroupData]]) -> str:
    """Tensor-parallel: one id for both boxes' coder (head first), a hash of each one's rendered unit and env file.
    Written into both env files (rollout_peer.TP_UNIT), so a change on either box changes both candidates: head and
    worker always roll out together, and the worker's transaction knows which head transaction is its own."""
    h = hashlib.sha256()
    for svc, cfg in coders:
        for text in (render_unit(svc, cfg), render_env(svc, cfg)):
            h.update(hashlib.sha256(text.encode()).digest())
    return h.hexdigest()


def with_tp_unit(svc: Service, unit_id: str) -> Service:
    return dataclasses.replace(svc, extra_env={**svc.extra_env, TP_UNIT_ENV: unit_id})
