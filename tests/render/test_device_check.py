"""The device check's transient unit (sparkctl/render/device_check.py): it carries every sandbox, device and limit
line of the rendered vLLM unit, none that belongs to a long-running service, its own runtime directory and env
file, and the unit's ordering after the GPU's preparation as root (sparkctl-devices.service); and its properties,
written as a unit, pass systemd-analyze verify, as does the preparation's unit."""

from __future__ import annotations

import shlex

import pytest

from sparkctl.config import box_paths, groupdata
from sparkctl.render import device_check as dc
from sparkctl.render import units
from tests.conftest import FAKE_LOCK
from tests.render.test_render import env_values, needs_systemd_analyze, settings_for, systemd_root, verify

GROUPS = (["all", "gx10"], ["all", "gx10", "sim"])


def box(groups, tmp_path):
    data = groupdata.load(groups)
    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp_path))
    s = settings_for(data)
    return s, units.vllm_venv(s.cfg)


def sandbox_section(unit_text: str) -> list[str]:
    """The rendered unit's lines from its "--- sandbox" comment to the end of [Service]."""
    lines = unit_text.split("# --- sandbox", 1)[1].split("[Install]", 1)[0].splitlines()[1:]
    return [ln for ln in lines if ln.strip() and not ln.startswith("#")]


@pytest.mark.parametrize("groups", GROUPS)
def test_every_sandbox_line_of_the_vllm_unit_is_a_property_of_the_check(groups, token_file, tmp_path):
    s, venv = box(groups, tmp_path)
    unit = units.render_unit(s.coder, s.cfg)
    props = dc.properties(s.coder, s.cfg, venv)
    sandbox = sandbox_section(unit)
    assert "NoNewPrivileges=yes" in sandbox and "DevicePolicy=closed" in sandbox and "CapabilityBoundingSet=" in sandbox
    assert [ln for ln in sandbox if ln not in props] == []
    # and everything else in [Service] but how a long-running service starts, restarts and stops
    for key in ("User", "Group", "WorkingDirectory", "LimitNOFILE", "OOMScoreAdjust", "UMask"):
        assert [p for p in props if p.startswith(f"{key}=")] == [f"{k}={v}" for k, v in dc.service_lines(unit)
                                                                 if k == key], key
    assert [f"DeviceAllow={dev} rw" for dev in s.cfg.NVIDIA_DEVICES] == [p for p in props
                                                                         if p.startswith("DeviceAllow=")]
    keys = [p.split("=", 1)[0] for p in props]
    assert not {"ExecStart", "Restart", "RestartSec", "Type", "KillSignal", "TimeoutStopSec"} & set(keys)
    # its own runtime directory (the service's would be removed under it when the check ends), env file, time limit
    name = dc.unit_name(venv)
    assert f"RuntimeDirectory={name}" in props and f"RuntimeDirectory=vllm-{s.coder.name}" not in props
    assert f"EnvironmentFile={s.cfg.ENV_DIR}/sparkctl-device-check.env" in props
    assert f"RuntimeMaxSec={s.cfg.DEVICE_CHECK_TIMEOUT_S}" in props
    # after the GPU's preparation as root, exactly as the unit (and nothing the unit runs first: the simulated
    # Spark's admission belongs to an engine's start)
    prepared = [f"{k}={units.DEVICES_UNIT}" for k in ("Wants", "After")] if s.cfg.VLLM_DEVICE_PREPARE else []
    assert [f"{k}={v}" for k, v in dc.unit_lines(unit) if v == units.DEVICES_UNIT] == prepared
    assert [p for p in props if p.split("=", 1)[0] in ("Wants", "After", "Requires", "ExecStartPre")] == prepared


def test_a_real_box_prepares_its_devices_and_checks_the_gpu(gx10_data):
    s = settings_for(gx10_data)
    venv = units.vllm_venv(s.cfg)
    argv = dc.argv(s.coder, s.cfg, venv, box_paths.bin_dir(s.cfg.SPARKCTL_HOME))
    assert argv[:5] == ["systemd-run", "--wait", "--pipe", "--collect", "--quiet"]
    assert "--property=Wants=sparkctl-devices.service" in argv and "--property=After=sparkctl-devices.service" in argv
    assert "ExecStart=/usr/bin/nvidia-modprobe -u -c=0\n" in units.render_devices_unit(s.cfg)  # as root, once per boot
    assert "--property=DeviceAllow=char-nvidia-uvm rw" in argv and "--property=User=vllm" in argv
    tail = argv[argv.index(f"{venv}/bin/python"):]
    assert tail == [f"{venv}/bin/python", "/opt/sparkctl/bin/device_check.py", "--dist", "vllm", "--version",
                    "0.32.0", "--compute-cap", "12.1", "--checks", "import", "toolchain", "cuda", "triton", "flashinfer",
                    "flashinfer_jit"]


def test_the_check_has_the_services_environment_in_its_own_tmpdir(gx10_data):
    s = settings_for(gx10_data)
    venv = units.vllm_venv(s.cfg)
    env = env_values(dc.render_env(s.coder, s.cfg, venv))
    service = units.service_environment(s.coder, s.cfg)
    assert env == {**service, "TMPDIR": f"/run/{dc.unit_name(venv)}"}
    # the JIT toolchain it resolves is the unit's: the candidate venv's bin first (its ninja), then CUDA's
    assert env["PATH"].split(":")[:2] == [f"{venv}/bin", f"{s.cfg.CUDA_HOME}/bin"]
    assert env["CUDA_HOME"] == "/usr/local/cuda-13.0"
    other = "/opt/sparkctl/venvs/0.32.0-other"
    assert env_values(dc.render_env(s.coder, s.cfg, other))["PATH"].startswith(f"{other}/bin:")
    assert service["TMPDIR"] == f"/run/vllm-{s.coder.name}"  # the running service's: not the check's
    assert env["TORCHINDUCTOR_CACHE_DIR"] == f"{s.cfg.STATE_DIR}/cache/inductor"


def test_one_check_unit_per_candidate_venv():
    assert dc.unit_name("/opt/sparkctl/venvs/0.32.0-aaa") != dc.unit_name("/opt/sparkctl/venvs/0.32.0-bbb")
    assert dc.unit_name("/x").startswith("sparkctl-device-check-")


@needs_systemd_analyze
@pytest.mark.parametrize("groups", GROUPS)
def test_the_checks_properties_as_a_unit_pass_systemd_analyze_verify(groups, token_file, tmp_path):
    """The same KEY=VALUE lines in a unit file: systemd parses every one of them (a warning counts)."""
    s, venv = box(groups, tmp_path)
    argv = dc.argv(s.coder, s.cfg, venv, box_paths.bin_dir(s.cfg.SPARKCTL_HOME))
    name, text = f"{dc.unit_name(venv)}.service", dc.as_unit(s.coder, s.cfg)
    props = [a.split("=", 1)[1] for a in argv if a.startswith("--property=")]
    lines = [ln for ln in text.splitlines() if "=" in ln and not ln.startswith(("#", "Type=", "ExecStart="))]
    assert sorted(lines) == sorted(props)
    assert text.splitlines()[-1] == f"ExecStart={shlex.join(argv[argv.index(f'{venv}/bin/python'):])}"
    rendered = {name: text}
    if s.cfg.VLLM_DEVICE_PREPARE:
        rendered[units.DEVICES_UNIT] = units.render_devices_unit(s.cfg)
    prepare = [c.split()[0] for c in s.cfg.VLLM_DEVICE_PREPARE]
    root = systemd_root(tmp_path, rendered, [f"{venv}/bin/python", *prepare])
    (root / dc.env_path(s.cfg).lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / dc.env_path(s.cfg).lstrip("/")).write_text(dc.render_env(s.coder, s.cfg, venv))
    for unit in rendered:
        rc, out = verify(root, unit)
        assert (rc, out) == (0, ""), out
