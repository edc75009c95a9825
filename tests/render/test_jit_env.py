"""The GPU-only start path's environment (issue #39): every vLLM and Ray unit, and the device check, carry the JIT
toolchain (PATH: the venv's bin with pip's ninja, CUDA_HOME's bin, then the system's; CUDA_HOME), and every kernel
cache the engine's libraries write (KERNEL_CACHES) under STATE_DIR, never in TMPDIR or a RuntimeDirectory, which
systemd wipes at every stop."""

from __future__ import annotations

import pytest

from sparkctl.config import groupdata
from sparkctl.render import device_check, ray, units
from tests.render.test_device_check import box
from tests.render.test_ray_units import ray_pair, service_section
from tests.render.test_render import env_values

GROUPS = (["all", "gx10"], ["all", "gx10", "sim"])
# every cache the engine's libraries write, by the variable each reads (vLLM 0.32.0, torch 2.13.0, Triton 3.7,
# FlashInfer 0.7: flashinfer/jit/env.py, nvidia-cutlass-dsl, the CUDA driver): none may be left to its default
# ($HOME/.cache, or TMPDIR for CuTe DSL: TMPDIR/<user>/cutlass_python_cache)
LIBRARY_CACHES = {"VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
                  "CUTE_DSL_CACHE_DIR", "CUDA_CACHE_PATH"}


def _ray_envs(groups, tmp_path) -> list[tuple]:
    """(environment, cfg, venv) of each Ray unit of a pair (its own venv: Ray is installed into it)."""
    pair = ray_pair(groups, tmp_path)
    return [(dict(v.strip('"').split("=", 1) for v in service_section(ray.render_unit(s.role, s.coder, s.cfg))
                  ["Environment"]), s.cfg, units.vllm_venv(s.cfg)) for s in pair.values()]


def _engine_envs(groups, tmp_path):
    """(what, its environment, its RuntimeDirectory or None, cfg) of every engine unit and the device check."""
    s, venv = box(groups, tmp_path)
    out = []
    for svc in s.services:
        unit = service_section(units.render_unit(svc, s.cfg))
        out.append((svc.unit, env_values(units.render_env(svc, s.cfg)), unit["RuntimeDirectory"][0], s.cfg, venv))
    out.append(("device check", env_values(device_check.render_env(s.coder, s.cfg, venv)),
                device_check.unit_name(venv), s.cfg, venv))
    for i, (env, cfg, ray_venv) in enumerate(_ray_envs(groups, tmp_path)):
        out.append((f"ray unit {i}", env, None, cfg, ray_venv))
    return out


@pytest.mark.parametrize("groups", GROUPS)
def test_every_engine_unit_has_the_jit_toolchain_on_its_path(groups, token_file, tmp_path):
    for what, env, _rt, cfg, venv in _engine_envs(groups, tmp_path):
        assert env["PATH"].split(":") == [f"{venv}/bin", f"{cfg.CUDA_HOME}/bin", *cfg.ENGINE_SYSTEM_PATH], what
        assert env["CUDA_HOME"] == cfg.CUDA_HOME == "/usr/local/cuda-13.0", what  # the sim's stand-in nvcc is there
    s, venv = box(groups, tmp_path)
    # the unit's own vllm is the one whose bin leads PATH (so `ninja` is that venv's)
    exec_start = service_section(units.render_unit(s.coder, s.cfg))["ExecStart"][0]
    assert exec_start.startswith(env_values(units.render_env(s.coder, s.cfg))["PATH"].split(":")[0] + "/vllm ")


@pytest.mark.parametrize("groups", GROUPS)
def test_every_kernel_cache_persists_under_state_dir(groups, token_file, tmp_path):
    data = groupdata.load(groups)
    assert set(data["KERNEL_CACHES"]) >= LIBRARY_CACHES
    for what, env, runtime_dir, cfg, _venv in _engine_envs(groups, tmp_path):
        tmpdir = env.get("TMPDIR")
        for name in cfg.KERNEL_CACHES:
            where = env[name]
            assert where.startswith(f"{cfg.STATE_DIR}/"), (what, name, where)
            assert not where.startswith(f"{units.RUNTIME_ROOT}/"), (what, name, where)  # no RuntimeDirectory's
            if tmpdir:
                assert not (where + "/").startswith(tmpdir.rstrip("/") + "/"), (what, name, where)
            if runtime_dir:
                assert f"/{runtime_dir}" not in where, (what, name, where)
    # and the sandbox lets the engine write there
    s, _ = box(groups, tmp_path)
    assert service_section(units.render_unit(s.coder, s.cfg))["ReadWritePaths"] == [s.cfg.STATE_DIR]


def test_the_kernel_caches_are_one_list_of_settings(gx10_data):
    """Moving a cache is one line of group data, and every unit follows it."""
    from tests.render.test_render import settings_for

    data = {**gx10_data, "KERNEL_CACHES": {**gx10_data["KERNEL_CACHES"], "CUTE_DSL_CACHE_DIR": "jit/cute"}}
    s = settings_for(data)
    for svc in s.services:
        assert env_values(units.render_env(svc, s.cfg))["CUTE_DSL_CACHE_DIR"] == f"{s.cfg.STATE_DIR}/jit/cute"
    assert units.kernel_caches(s.cfg)["CUTE_DSL_CACHE_DIR"] == f"{s.cfg.STATE_DIR}/jit/cute"
