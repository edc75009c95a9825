"""Catalog and rendering: every entry renders, the flip touches only the coder's env file, and the rendered
units and proxy config pass the real validators (systemd-analyze verify, nginx -t)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest

from sparkctl.box.check_vllm_args import unescape_env_value
from sparkctl.check.load import host_config
from sparkctl.check.validate import validate_host as validate
from sparkctl.config import catalog, groupdata, pki
from sparkctl.config.quantities import GIB
from sparkctl.config.settings import derive
from sparkctl.errors import SettingError
from sparkctl.render import units
from tests.conftest import FAKE_LOCK


def settings_for(data: dict, model: str | None = None):
    """The deploy's whole validation of raw group data (optionally another CODING_MODEL): Settings, with cfg."""
    d = dict(data)
    if model:
        d["CODING_MODEL"] = model
    return validate(d, "test-box")


def standin_settings(data: dict):
    """Settings for a box stood in by a temporary directory (its paths under /tmp): what the check layer derives,
    without the deploy's layout rule that refuses a real box's directories there (sparkctl/check/rules.py)."""
    return derive(host_config(data, "test-box"))


def env_values(text: str) -> dict:
    """KEY=VALUE lines as systemd reads the EnvironmentFile (double-quoted values unescaped)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k] = unescape_env_value(v)
    return out


@pytest.mark.parametrize("groups", [["all", "gx10"], ["all", "gx10", "sim"]])
def test_every_catalog_entry_renders(groups, token_file, tmp_path):
    data = groupdata.load(groups)
    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp_path))
    # every coding model a box keeps (one with a KV budget: CATALOG_MODELS entries without one are only planned)
    coders = [k for k, m in settings_for(data).catalog.items() if m.role == catalog.CODER
              and k in data["CODER_KV_CACHE_GIB"]]
    assert sorted(coders) == ["laguna-s-2.1", "qwen3.8-27b"]
    for key in coders:
        s = settings_for(data, key)
        for svc in s.services:
            env = env_values(units.render_env(svc, s.cfg))
            args = shlex.split(env["VLLM_ARGS"])  # the systemd word split, as $VLLM_ARGS in ExecStart
            assert args == units.vllm_args(svc, s.cfg)  # the env file gives vLLM exactly these words
            assert args[0] == units.snapshot_path(data["MODEL_STORE"], svc.checkpoint)
            assert args[args.index("--served-model-name") + 1] == svc.served_name
            assert args[args.index("--host") + 1] == "127.0.0.1"
            assert int(args[args.index("--kv-cache-memory-bytes") + 1]) == svc.kv_cache_bytes
            assert "ExecStart=" in units.render_unit(svc, s.cfg)


def test_qwen_and_laguna_arguments(gx10_data):
    qwen = settings_for(gx10_data, "qwen3.8-27b")
    q = units.vllm_args(qwen.coder, qwen.cfg)
    assert json.loads(q[q.index("--speculative-config") + 1]) == {"method": "mtp", "num_speculative_tokens": 3}
    assert q[q.index("--max-model-len") + 1] == "262144"
    assert q[q.index("--kv-cache-memory-bytes") + 1] == str(36 * GIB) == "38654705664"
    assert q[q.index("--kv-cache-dtype") + 1] == "fp8"
    assert json.loads(q[q.index("--limit-mm-per-prompt") + 1])["image"] > 0  # images on
    assert q[q.index("--reasoning-parser") + 1] == "qwen3"
    s = settings_for(gx10_data, "laguna-s-2.1")
    lg = units.vllm_args(s.coder, s.cfg)
    spec = json.loads(lg[lg.index("--speculative-config") + 1])
    assert spec["method"] == "dflash" and spec["num_speculative_tokens"] == 7
    assert spec["model"] == units.snapshot_path(gx10_data["MODEL_STORE"], s.coder.draft)
    assert lg[lg.index("--tool-call-parser") + 1] == "poolside_v1"
    for e in s.embedders:
        a = units.vllm_args(e, s.cfg)
        assert a[a.index("--runner") + 1] == "pooling"


def test_the_gb10_runtime_reaches_every_service_and_a_kernel_override_only_its_model(gx10_data):
    """GPU_ARCH_ENV in every service's env file (TRITON_PTXAS_BLACKWELL_PATH only when set); a catalog entry's moe_backend /
    linear_backend render as vLLM 0.32.0's flags, "auto" as nothing (the shipped entries set none)."""
    s = settings_for(gx10_data, "laguna-s-2.1")
    for svc in s.services:
        env = env_values(units.render_env(svc, s.cfg))
        assert env["CUTE_DSL_ARCH"] == "sm_121a" and env["FLASHINFER_CUDA_ARCH_LIST"] == "12.1a"
        assert "TRITON_PTXAS_BLACKWELL_PATH" not in env and "TRITON_PTXAS_PATH" not in env
        assert not {"--moe-backend", "--linear-backend"} & set(units.vllm_args(svc, s.cfg))
    data = {**gx10_data, "TRITON_PTXAS_BLACKWELL_PATH": "/usr/local/cuda-13.0/bin/ptxas",
            "CATALOG_OVERRIDES": {"laguna-s-2.1": {"moe_backend": "marlin", "linear_backend": "marlin"}}}
    s = settings_for(data, "laguna-s-2.1")
    args = units.vllm_args(s.coder, s.cfg)
    assert args[args.index("--moe-backend") + 1] == args[args.index("--linear-backend") + 1] == "marlin"
    env = env_values(units.render_env(s.coder, s.cfg))
    # Triton 3.7 reads this one for sm_90 and newer (the GB10's sm_121a); TRITON_PTXAS_PATH only for older GPUs
    assert env["TRITON_PTXAS_BLACKWELL_PATH"] == "/usr/local/cuda-13.0/bin/ptxas" and "TRITON_PTXAS_PATH" not in env
    assert all("--moe-backend" not in units.vllm_args(e, s.cfg) for e in s.embedders)


def test_flip_changes_only_the_coder_env_file(gx10_data):
    qwen, laguna = settings_for(gx10_data, "qwen3.8-27b"), settings_for(gx10_data, "laguna-s-2.1")
    for a, b in zip(qwen.services, laguna.services):
        assert a.unit == b.unit and a.served_name == b.served_name  # same URL, same served name
        assert units.render_unit(a, qwen.cfg) == units.render_unit(b, laguna.cfg)
        same_env = units.render_env(a, qwen.cfg) == units.render_env(b, laguna.cfg)
        assert same_env == (a.role != catalog.CODER), a.unit
    # both coders' checkpoints stay on the box whichever is selected: flipping back downloads nothing
    assert {c.repo for c in qwen.checkpoints} == {c.repo for c in laguna.checkpoints}


def test_unknown_coding_model_names_the_valid_ones(gx10_data):
    with pytest.raises(SettingError) as exc:
        settings_for(gx10_data, "gpt-5")
    msg = str(exc.value)
    assert "CODING_MODEL" in msg and "'gpt-5'" in msg and "laguna-s-2.1" in msg and "qwen3.8-27b" in msg


def test_templates_are_strict_about_missing_variables():
    with pytest.raises(jinja2.UndefinedError):
        units.render_template("vllm.service.j2", svc=None, d={}, env_path="x", vllm_bin="y")


# --- the real validators ------------------------------------------------------------------------------------

def systemd_root(tmp_path: Path, units: dict[str, str], executables: list[str]) -> Path:
    """A root directory systemd-analyze can verify in: the host's system units plus ours and stub binaries."""
    root = tmp_path / "root"
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for name, text in units.items():
        (root / "etc/systemd/system" / name).write_text(text)
    for exe in executables:
        p = root / exe.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("#!/bin/sh\n")
        p.chmod(0o755)
    return root


def verify(root: Path, unit: str) -> tuple[int, str]:
    r = subprocess.run(["systemd-analyze", "verify", f"--root={root}", f"/etc/systemd/system/{unit}"],
                       capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")


@needs_systemd_analyze
@pytest.mark.parametrize("groups", [["all", "gx10"], ["all", "gx10", "sim"]])
def test_units_pass_systemd_analyze_verify_and_security(groups, token_file, tmp_path):
    data = groupdata.load(groups)
    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp_path))
    s = settings_for(data)
    rendered = {svc.unit: units.render_unit(svc, s.cfg) for svc in s.services}
    rendered["ssh.service"] = "[Service]\nExecStart=/usr/sbin/sshd -D\n"
    (tmp_path / "dropin").mkdir()
    if s.cfg.VLLM_DEVICE_PREPARE:  # what the vLLM units want first (a real box's): its ExecStart= programs stubbed
        rendered[units.DEVICES_UNIT] = units.render_devices_unit(s.cfg)
    prepare = [cmd.split()[0] for cmd in s.cfg.VLLM_DEVICE_PREPARE]
    root = systemd_root(tmp_path, rendered, [f"{units.vllm_venv(s.cfg)}/bin/vllm", f"{units.vllm_venv(s.cfg)}/bin/python",
                                             "/usr/sbin/sshd", *prepare])
    dropin = root / "etc/systemd/system/ssh.service.d"
    dropin.mkdir()
    (dropin / "sparkctl-memory.conf").write_text(units.render_template("sshd-memory.conf.j2", d=s.cfg))
    for unit in [*rendered]:
        rc, out = verify(root, unit)
        assert (rc, out) == (0, ""), f"{unit}: {out}"  # warnings (unknown keys...) count as failures
    for svc in s.services:
        r = subprocess.run(["systemd-analyze", "security", "--offline=true", f"--root={root}", svc.unit],
                           capture_output=True, text=True)
        exposure = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout).group(1))
        print(f"{svc.unit}: systemd-analyze security exposure {exposure}")
        assert exposure <= 3.0, r.stdout[-2000:]


@needs_systemd_analyze
def test_a_tensor_parallel_engine_unit_passes_systemd_analyze_verify(gx10_data, tmp_path):
    """The pair's coder with the link's lines (the verbs devices, LimitMEMLOCK) is a unit systemd accepts."""
    pair = ["spark-1", "spark-2"]
    s = validate(dict(gx10_data, SPARK_TOPOLOGY="tensor-parallel"), "spark-2", hosts=pair)
    text = units.render_unit(s.coder, s.cfg)
    assert "LimitMEMLOCK=infinity" in text.splitlines()
    root = systemd_root(tmp_path, {s.coder.unit: text}, [f"{units.vllm_venv(s.cfg)}/bin/vllm",
                                                         f"{units.vllm_venv(s.cfg)}/bin/python"])  # page cache step
    assert verify(root, s.coder.unit) == (0, "")


@needs_systemd_analyze
def test_verify_gate_catches_a_misplaced_start_limit(tmp_path):
    """The gate above is not vacuous: StartLimitIntervalSec in [Service] is only a warning with rc 0."""
    bad = "[Unit]\nDescription=x\n[Service]\nStartLimitIntervalSec=60\nExecStart=/usr/bin/true\n"
    root = systemd_root(tmp_path, {"bad.service": bad}, ["/usr/bin/true"])
    rc, out = verify(root, "bad.service")
    assert rc == 0 and "Unknown key" in out


TOKEN = "T" * 43 + "-_9"  # as long as secrets.token_urlsafe(32): nginx's map hash must take it
SCRAPE_TOKEN = "scrape-" + "s" * 56  # the scrape token: another full-length token


def nginx_check(tmp_path: Path, site: str) -> subprocess.CompletedProcess:
    conf = tmp_path / "nginx.conf"
    conf.write_text("pid %s/nginx.pid;\nerror_log stderr;\nevents {}\nhttp {\n    access_log off;\n"
                    "    include %s;\n}\n" % (tmp_path, tmp_path / "site.conf"))
    (tmp_path / "site.conf").write_text(site)
    return subprocess.run(["nginx", "-t", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True)


def render_proxy_files(cfg, services, tmp_path: Path, cert, key) -> str:
    """The site, and its root-only token file (both maps) under tmp_path, as tasks/proxy.py renders them from the
    typed settings (cfg)."""
    from sparkctl.render import box_files

    token = tmp_path / "token.conf"
    token.write_text(box_files.tokens(cfg, TOKEN, SCRAPE_TOKEN))
    return box_files.site(cfg, services, token_file=str(token), cert_path=str(cert), key_path=str(key))


def render_proxy_site(data: dict, s, tmp_path: Path) -> str:
    """The proxy site of settings s (validated from the raw group data `data`: what renders is s.cfg)."""
    cert, key, _ca = pki.ensure_server_cert(tmp_path / "pki", "test-box", ["10.0.0.5", "gx10.test"])
    return render_proxy_files(s.cfg, s.services, tmp_path, cert, key)


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed (apt-get install nginx-light)")
def test_nginx_config_passes_nginx_t(gx10_data, tmp_path):
    s = settings_for(gx10_data)
    site = render_proxy_site(gx10_data, s, tmp_path)
    r = nginx_check(tmp_path, site)
    assert r.returncode == 0, r.stderr
    for svc in s.services:  # the allow-list (exact routes per model; tests/render/test_proxy.py runs it)
        assert f"location = /{svc.served_name}/v1/models {{" in site
        assert f"location /{svc.served_name}/" not in site  # no prefix location passes arbitrary paths upstream
    assert "proxy_read_timeout 7200s;" in site and "ssl_protocols TLSv1.2 TLSv1.3;" in site
    assert TOKEN not in site  # the token lives only in the root-only include
    broken = nginx_check(tmp_path, site.replace("proxy_buffering off;", "proxy_buffering sideways;"))
    assert broken.returncode != 0  # the check is real
