"""The device check of a new venv, as the command the deploy runs on the box: a transient unit in the vLLM unit's
own sandbox (systemd-run), running sparkctl/box/device_check.py with the candidate venv's python.

Its properties are taken from the rendered vLLM unit (the coder's, render_unit): every line of its [Service]
section but the few that belong to a long-running service and make no sense for a one-shot (NOT_FOR_A_ONESHOT), so
the check runs with the unit's exact user, group, sandbox, device policy and allow list, working directory and
limits, and the two cannot drift. What it replaces: its own runtime directory (the unit's, /run/vllm-<service>,
belongs to the running service: a second unit naming it would remove it when it ends) and so TMPDIR; the env file
(the coder's environment, service_environment, with that TMPDIR and the candidate venv's bin first on PATH, so the
check resolves the JIT toolchain as the unit will; root-only like the services' own: the live one may not exist yet
on a first install). Like the unit, it Wants and starts After= the GPU's preparation as root
(DEVICES_UNIT, VLLM_DEVICE_PREPARE: its [Unit] lines that name it), and RuntimeMaxSec bounds the whole
(DEVICE_CHECK_TIMEOUT_S).
"""

from __future__ import annotations

import hashlib
import shlex

from sparkctl.config import box_paths
from sparkctl.config.schema import GroupData
from sparkctl.config.service import Service
from sparkctl.render.units import DEVICES_UNIT, render_unit, service_environment, vllm_venv

SCRIPT = "device_check.py"  # sparkctl/box/device_check.py, uploaded with the other box scripts (tasks/vllm.py)
ENV_FILE = "sparkctl-device-check.env"  # in ENV_DIR, root-only (not vllm-*.env: no service's)
# [Service] keys of the vLLM unit that a one-shot check does not take: how the service starts, restarts and stops
# (the check's command is its own ExecStart; what a start runs first belongs to a served engine, such as the simulated
# Spark's admission), and the runtime directory and env file the check replaces with its own (above)
NOT_FOR_A_ONESHOT = frozenset({
    "Type", "ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecStopPost", "ExecReload", "Restart",
    "RestartSec", "KillSignal", "TimeoutStopSec", "RuntimeDirectory", "RuntimeDirectoryMode",
    "RuntimeDirectoryPreserve", "EnvironmentFile",
})


UNIT_KEYS = ("Wants", "After")  # the properties from the unit's [Unit] section (the preparation's ordering)


def unit_name(venv: str) -> str:
    """The transient unit's name, one per candidate venv (shown by systemctl and the journal while it runs)."""
    return f"sparkctl-device-check-{hashlib.sha256(venv.encode()).hexdigest()[:12]}"


def env_path(cfg: GroupData) -> str:
    return f"{cfg.ENV_DIR}/{ENV_FILE}"


def section_lines(unit_text: str, section: str) -> list[tuple[str, str]]:
    """(key, value) of every setting in one section of a unit ("[Service]"), in order (comments, blanks left out)."""
    out, current = [], ""
    for raw in unit_text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line
        elif current == section and line and not line.startswith(("#", ";")) and "=" in line:
            key, value = line.split("=", 1)
            out.append((key.strip(), value))
    return out


def service_lines(unit_text: str) -> list[tuple[str, str]]:
    return section_lines(unit_text, "[Service]")


def unit_lines(unit_text: str) -> list[tuple[str, str]]:
    return section_lines(unit_text, "[Unit]")


def sandbox_properties(unit_text: str) -> list[str]:
    """The unit's [Service] lines a one-shot check takes, as KEY=VALUE."""
    return [f"{k}={v}" for k, v in service_lines(unit_text) if k not in NOT_FOR_A_ONESHOT]


def render_env(svc: Service, cfg: GroupData, venv: str) -> str:
    """The check's env file: the service's environment (service_environment: its JIT toolchain on PATH, the candidate
    venv's bin first; CUDA_HOME; the kernel caches), TMPDIR in the check's own runtime directory. KEY=VALUE lines as
    in the services' env files (templates/vllm.env.j2)."""
    env = {**service_environment(svc, cfg, venv), "TMPDIR": f"/run/{unit_name(venv)}"}
    head = (f"# {ENV_FILE}: rendered by sparkctl (sparkctl/render/device_check.py) - the {svc.name} service's "
            f"environment for the device check of a new venv\n")
    return head + "".join(f"{k}={v}\n" for k, v in env.items())


def properties(svc: Service, cfg: GroupData, venv: str) -> list[str]:
    """Every --property of the check's transient unit: the vLLM unit's sandbox and limits, then the check's own."""
    own = [f"RuntimeDirectory={unit_name(venv)}", "RuntimeDirectoryMode=0700", f"EnvironmentFile={env_path(cfg)}",
           f"RuntimeMaxSec={cfg.DEVICE_CHECK_TIMEOUT_S}"]
    # the GPU's modules and nodes prepared first, as for the unit: the [Unit] lines that name DEVICES_UNIT
    unit = render_unit(svc, cfg)
    prepare = [f"{k}={v}" for k, v in unit_lines(unit) if v == DEVICES_UNIT]
    return [*sandbox_properties(unit), *own, *prepare]


def check_args(cfg: GroupData) -> list[str]:
    """device_check.py's arguments: what it checks, and against which settings."""
    return ["--dist", cfg.VLLM_DIST, "--version", cfg.VLLM_VERSION, "--compute-cap", cfg.REQUIRED_COMPUTE_CAP,
            "--checks", *cfg.DEVICE_CHECKS]


def argv(svc: Service, cfg: GroupData, venv: str, bin_dir: str) -> list[str]:
    """The whole command, as root on the box: systemd-run waits for the check, its output on the caller's, and
    exits with the check's status (0 passed; non-zero: the venv is refused)."""
    return ["systemd-run", "--wait", "--pipe", "--collect", "--quiet", "--service-type=exec",
            f"--unit={unit_name(venv)}", *[f"--property={p}" for p in properties(svc, cfg, venv)],
            f"{venv}/bin/python", f"{bin_dir}/{SCRIPT}", *check_args(cfg)]


def as_unit(svc: Service, cfg: GroupData) -> str:
    """The transient unit systemd makes of argv(), as a unit file (what it writes under /run/systemd/transient/): what
    `python -m sparkctl check` runs systemd-analyze verify on (sparkctl/check/render.py)."""
    venv = vllm_venv(cfg)
    words = argv(svc, cfg, venv, box_paths.bin_dir(cfg.SPARKCTL_HOME))
    props = [w.split("=", 1)[1] for w in words if w.startswith("--property=")]
    deps = [p for p in props if p.split("=", 1)[0] in UNIT_KEYS]
    command = words[words.index(f"{venv}/bin/python"):]
    return (f"# {unit_name(venv)}.service: systemd-run's transient unit of the device check "
            f"(sparkctl/render/device_check.py)\n[Unit]\n" + "".join(f"{p}\n" for p in deps) +
            "[Service]\nType=exec\n" + "".join(f"{p}\n" for p in props if p not in deps) +
            f"ExecStart={shlex.join(command)}\n")
