"""The whole deploy run against pyinfra 3.10's @fake connector: what it does to a DGX OS box and to a plain
Ubuntu box, and that bad input stops it before a single command reaches the host."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from sparkctl import REPO_ROOT
from sparkctl.config import box_paths
from sparkctl.render import device_check, units
from tests.conftest import API_TOKEN, SCRAPE_TOKEN
from tests.render.test_render import settings_for


def run_fake(kind: str, tmp_path, *extra: str, token: str | None = API_TOKEN,
             scrape_token: str | bool = SCRAPE_TOKEN, env_extra: dict | None = None) -> dict:
    env = dict(os.environ, FAKE_KIND=kind, PYINFRA_FAKE_DELAY="0", PYINFRA_FAKE_DELAY_JITTER="0",
               SPARKCTL_TEST_SECRETS=str(tmp_path / "secrets"), GX10_HOSTS="", **(env_extra or {}))
    if token is not None:
        tf = tmp_path / "api_token"
        tf.write_text(token)
        tf.chmod(0o600)  # secrets readable by others are refused
        env["SPARK_API_TOKEN_FILE"] = str(tf)
    else:
        env["SPARK_API_TOKEN_FILE"] = str(tmp_path / "missing-token")
    if scrape_token:  # the proxy's scrape paths have their own token
        (tmp_path / "scrape_token").write_text(scrape_token)
        (tmp_path / "scrape_token").chmod(0o600)
    env["SPARK_SCRAPE_TOKEN_FILE"] = str(tmp_path / "scrape_token")
    r = subprocess.run([sys.executable, "tests/standins/deploy_runner.py", "tests/standins/gx10_inventory.py", *extra],
                       cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    line = next(x for x in r.stdout.splitlines() if x.startswith("FAKE-DRIVER-JSON "))
    out = json.loads(line.split(" ", 1)[1])
    out["log"] = r.stdout + r.stderr
    return out


def changes(out: dict) -> list[str]:
    """Commands that change the host (facts are reads: uname, cat, stat, dpkg -l, ...)."""
    reads = ("uname", "cat /etc/", "! (test -e", "if command -v", "p= ", "command -v", "for i in `cat",
             "cd /etc/ &&", "[ -x", "[ -f", "curl -fsS --max-time", "journalctl", "systemctl show",
             "s=$(systemctl show", "test -d", "! test", "systemctl is-enabled", "systemctl --no-legend",
             "systemctl -al", "ls ", "stat ", "getent passwd", "awk '/^MemTotal:/",
             "for f in /etc/sparkctl/vllm-*.env; do")  # tasks/facts.py PlannedHolds
    return [c for c in out["commands"] if not c.lstrip().startswith(reads)]


@pytest.fixture(scope="module")
def dgx(tmp_path_factory):
    return run_fake("dgx", tmp_path_factory.mktemp("dgx"))


@pytest.fixture(scope="module")
def ubuntu(tmp_path_factory):
    return run_fake("ubuntu", tmp_path_factory.mktemp("ubuntu"))


def test_dgx_os_box_gets_no_nvidia_packages(dgx):
    ops = dgx["ops"]
    assert not any("NVIDIA driver and CUDA |" in o for o in ops), "DGX OS: the driver and CUDA are the OS's"
    cmds = "\n".join(changes(dgx))
    assert "cuda-keyring" not in cmds and "nvidia-open-580" not in cmds and "cuda-toolkit" not in cmds
    # the rest of the rollout is there, in order
    order = [o.split(" | ")[0] for o in ops]
    firsts = [order.index(step) for step in ("vLLM", "Checkpoints", "OOM guard", "TLS proxy", "vLLM services",
                                             "Health")]
    assert firsts == sorted(firsts)
    assert any("install python3-venv libnuma1 curl nginx earlyoom rsync build-essential python3-dev" in c
               for c in dgx["commands"])  # Triton compiles its launcher with the C compiler and Python.h
    installs = [c for c in dgx["commands"] if "pip install" in c and "vllm==0.32.0" in c]
    assert installs and not any("--extra-index-url" in c or ".whl" in c for c in installs)  # from PyPI alone
    fetches = [c for c in dgx["commands"] if "fetch_checkpoint.py" in c and "--listing" in c]
    assert len(fetches) == 5  # both coders, Laguna's draft, both embedders
    rollouts = [c for c in dgx["commands"] if "rollout.py apply" in c]
    assert [c.split("apply ")[1].split()[0] for c in rollouts] == ["coder", "embed-qwen3", "embed-bge-m3"]
    assert all(" --unready-wait 20 " in c for c in rollouts)  # ROUTER_OUT_WAIT_S: the routers' window first
    assert any("nginx -t" in c for c in dgx["commands"])
    assert not any(API_TOKEN in c for c in dgx["commands"])  # the token never appears in a command


def test_plain_ubuntu_box_installs_driver_and_cuda_from_nvidia_repo(ubuntu):
    cmds = changes(ubuntu)
    joined = "\n".join(cmds)
    assert "cuda-keyring_1.1-1_all.deb" in joined  # NVIDIA's ubuntu2404/sbsa repository keyring
    install = [c for c in cmds if "apt-get" in c and "install" in c and "nvidia-open-580" in c]
    assert install and "nvidia-driver-pinning-580" in install[0] and "cuda-toolkit-13-0" in install[0]
    assert any("NVIDIA driver and CUDA | Check the NVIDIA driver answers" == o for o in ubuntu["ops"])


def test_unknown_coding_model_fails_before_any_command(tmp_path):
    out = run_fake("dgx", tmp_path, "--data", "CODING_MODEL=gpt-5")
    assert out["commands"] == []
    assert "CODING_MODEL = 'gpt-5' is not valid" in out["log"]
    assert "laguna-s-2.1" in out["log"] and "qwen3.8-27b" in out["log"]


def test_missing_token_fails_before_any_command(tmp_path):
    out = run_fake("dgx", tmp_path, token=None)
    assert out["commands"] == []
    assert "SPARK_API_TOKEN_FILE" in out["log"]


def test_not_a_gx10_is_refused_after_reading_facts_only(tmp_path):
    out = run_fake("x86", tmp_path)
    assert "preflight refused this box" in out["log"] and "x86_64" in out["log"]
    assert changes(out) == [], changes(out)


def test_a_new_venv_is_device_checked_in_the_vllm_units_sandbox_before_it_is_marked_built(dgx, gx10_data):
    """venv_build's last steps: the device check as a transient unit with the rendered coder unit's sandbox
    (sparkctl/render/device_check.py), then the marker; no import check as root outside the sandbox."""
    s = settings_for(gx10_data)
    venv = units.vllm_venv(s.cfg)
    cmds = dgx["commands"]
    check = [i for i, c in enumerate(cmds) if "systemd-run --wait --pipe --collect" in c]
    marker = [i for i, c in enumerate(cmds) if c.endswith(f"touch {venv}/.sparkctl-built")]
    install = [i for i, c in enumerate(cmds) if "pip install" in c and "vllm==0.32.0" in c]
    assert len(check) == 1 and install[0] < check[0] < marker[0], (check, marker)
    expected = device_check.argv(s.coder, s.cfg, venv, box_paths.bin_dir(s.cfg.SPARKCTL_HOME))
    assert cmds[check[0]].endswith(" ".join(shlex.quote(a) for a in expected))
    for prop in ("User=vllm", "NoNewPrivileges=yes", "DevicePolicy=closed", "DeviceAllow=char-nvidia-uvm rw",
                 "CapabilityBoundingSet=", "Wants=sparkctl-devices.service", "After=sparkctl-devices.service"):
        assert shlex.quote(f"--property={prop}") in cmds[check[0]], prop
    # the GPU's modules and nodes prepared as root by their own unit, started (never restarted) before the check
    ops = dgx["ops"]
    assert ops.index("vLLM | Unit sparkctl-devices.service (VLLM_DEVICE_PREPARE)") < \
        ops.index("vLLM | sparkctl-devices.service enabled and started") < \
        next(i for i, o in enumerate(ops) if "Build and device-check vLLM" in o)
    assert not any("restart sparkctl-devices" in c for c in cmds)
    assert "--checks import toolchain cuda triton flashinfer flashinfer_jit" in cmds[check[0]]
    assert not any("import importlib.metadata as m, vllm" in c for c in cmds)  # the old check as root: gone
    env_put = [o for o in dgx["ops"] if "Write the device check's environment" in o]
    assert env_put and dgx["ops"].index(env_put[0]) < next(i for i, o in enumerate(dgx["ops"])
                                                           if "Build and device-check vLLM" in o)
    assert "device_check.py" in "\n".join(cmds)  # uploaded with the other box scripts


def test_a_rollout_vllm_would_refuse_beside_what_the_box_runs_now_is_refused_before_any_change(tmp_path):
    """The box's embedders hold 30 GiB each by their live env files (an earlier configuration): the coder, rolled
    out first at its 80 GiB plan, would be refused by vLLM's admission beside them; the preflight says so."""
    holds = "HOLDS embed-qwen3 30.0 active,HOLDS embed-bge-m3 30.0 active,HOLDS coder 80.000 active"
    out = run_fake("dgx", tmp_path, env_extra={"FAKE_HOLDS": holds})
    assert "preflight refused this box" in out["log"]
    assert "coder (this deploy's rollout, 1 of 3, beside the box as it runs now): vLLM would refuse it" in out["log"]
    assert "embed-qwen3 (now) 30.00" in out["log"] and "Deploy what frees memory first" in out["log"]
    assert [c for c in changes(out) if not c.startswith("if [ -x /usr/bin/nvidia-modprobe ]")] == []


def test_a_box_whose_driver_lacks_a_device_group_is_refused_before_any_change(tmp_path):
    """The driver answers but /proc/devices (read after VLLM_DEVICE_PREPARE ran) has no nvidia-uvm: DeviceAllow=
    would allow nothing for it, and CUDA in the sandboxed services would fail at their first start."""
    out = run_fake("dgx", tmp_path, env_extra={"FAKE_PROC_DEVICES": "C mem,C nvidia,C nvidiactl,C nvidia-caps"})
    assert "preflight refused this box" in out["log"]
    assert "NVIDIA_DEVICES: char-nvidia-uvm not in this box's /proc/devices" in out["log"]
    # nothing changed but what every vLLM start runs first (the fact's device preparation, as nvidia-smi loads the driver)
    assert [c for c in changes(out) if not c.startswith("if [ -x /usr/bin/nvidia-modprobe ]")] == []


def test_box_scripts_an_earlier_version_uploaded_under_another_name_are_removed(dgx):
    removals = [o for o in dgx["ops"] if o.startswith("vLLM | Remove ") and o.endswith("(renamed)")]
    assert removals == [f"vLLM | Remove {s} (renamed)" for s in ("rollout_gate.py", "rollout_drain.py", "retire.py")]
