#!/usr/bin/env python3
"""On the box, with a candidate venv's python, in the vLLM unit's own sandbox: can this venv serve on this box?

    device_check.py --dist DIST --version VERSION --compute-cap 12.1 --checks import toolchain cuda triton ...

The deploy runs it before a newly built venv is marked built (tasks/vllm.py venv_build), as a transient unit with
the vLLM unit's user, sandbox, device policy, environment and limits (sparkctl/render/device_check.py), after the
unit's own device preparation (VLLM_DEVICE_PREPARE, as root); so what the sandbox or a missing compiler would break
at the first start breaks here, while the running services still run their own venv. The checks (DEVICE_CHECKS):

    import          vLLM imports and its distribution is VERSION
    toolchain       every program the JIT paths run resolves in the unit's environment and answers --version: ninja
                    on PATH (FlashInfer's JIT, vLLM's has_flashinfer()), nvcc and ptxas under CUDA_HOME, the C
                    compiler (Triton's launcher: $CC, clang or gcc), the C++ compiler (nvcc's host compiler, inductor),
                    TRITON_PTXAS_BLACKWELL_PATH when set
    cuda            CUDA initialises, a tiny kernel runs; the GPU's compute capability; integrated; free memory
    triton          a tiny Triton kernel compiles and runs (the C compiler and Python.h for its launcher, ptxas)
    flashinfer      flashinfer imports (skipped when it is not installed)
    flashinfer_jit  vLLM's has_flashinfer() is True, and FlashInfer JIT-builds its RMSNorm module and runs it
    torch_compile   torch.compile (inductor) builds and runs a tiny function on the CPU (the C++ compiler, Python.h)

Compilers run in fresh caches (removed at the end), so a kernel cached by an earlier run never hides a missing
compiler.
Each passed check prints one line. The first that fails prints one line naming what is missing and exits 1; the
command line refused exits 64. Standard library only, plus the venv's vllm, torch, triton, flashinfer.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

USAGE = 64  # the command line was refused (contract.py's `usage`)
FAILED = 1


class Missing(Exception):
    """What this box or venv lacks, in one line."""


# --- what a compiler's failure means, in one line ----------------------------------------------------------------

# (text in the error, what is missing); the first match wins
CAUSES = (
    ("InvalidCxxCompiler", "no C++ compiler: torch.compile (inductor) needs g++ to build its kernels; install it "
                           "through VLLM_BUILD_PACKAGES (e.g. g++)"),
    ("C++ compiler", "no C++ compiler: torch.compile (inductor) needs g++ to build its kernels; install it through "
                     "VLLM_BUILD_PACKAGES (e.g. g++)"),
    ("Failed to find C compiler", "no C compiler: Triton compiles its kernel launcher with cc/gcc; install one "
                                  "through VLLM_BUILD_PACKAGES (e.g. gcc)"),
    ("Python.h", "no Python headers (Python.h): the launcher is built against them; install python3-dev through "
                 "VLLM_BUILD_PACKAGES"),
    ("ptxas fatal", "ptxas cannot build this GPU's kernels (sm_121a needs CUDA 12.9 or later): set the setting "
                    "TRITON_PTXAS_BLACKWELL_PATH to CUDA_HOME's bin/ptxas (Triton reads it for sm_90 and newer)"),
    ("No such file or directory: 'ninja'", "no ninja on the unit's PATH: FlashInfer's JIT runs it; PATH must "
                                           "start with the venv's bin (the units render it: rerun the deploy)"),
    ("Permission denied", "permission denied in the vLLM unit's sandbox"),
    ("Operation not permitted", "an operation the vLLM unit's sandbox does not permit"),
)


def cause(what: str, exc: BaseException) -> str:
    """One line: what `what` needed that is missing (a known cause), with the error's line that says so; else the
    error's own last line."""
    lines = [ln.strip() for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip()]
    for needle, why in CAUSES:
        said = next((ln for ln in lines if needle in ln), None)
        if said:
            return f"{what}: {why} ({said[:300]})"
    return f"{what} failed: {(lines or [type(exc).__name__])[-1][:300]}"


# --- the checks --------------------------------------------------------------------------------------------------

def check_import(opts) -> str:
    try:
        installed = importlib.metadata.version(opts.dist)
    except importlib.metadata.PackageNotFoundError:
        raise Missing(f"vLLM is not installed: no distribution {opts.dist} in {sys.prefix}") from None
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure is the answer
        raise Missing(cause("import vllm", exc)) from None
    if installed.split("+")[0] != opts.version:
        raise Missing(f"{opts.dist} {installed} is installed, VLLM_VERSION is {opts.version}")
    return f"vllm imports ({opts.dist} {installed})"


def _torch():
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        raise Missing(cause("import torch", exc)) from None
    return torch


def check_cuda(opts) -> str:
    torch = _torch()
    if not torch.cuda.is_available():
        raise Missing("CUDA is not available in the vLLM unit's sandbox: a device group NVIDIA_DEVICES does not "
                      "allow, a device node VLLM_DEVICE_PREPARE did not create, or a CPU build of torch "
                      f"(torch {torch.__version__}, CUDA {torch.version.cuda})")
    try:
        torch.cuda.init()
        cap = "%d.%d" % torch.cuda.get_device_capability(0)
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info(0)
        ran = (torch.ones(4, device="cuda") * 2).sum().item()
    except Exception as exc:  # noqa: BLE001
        raise Missing(cause("CUDA", exc)) from None
    if cap != opts.compute_cap:
        raise Missing(f"GPU {props.name} has compute capability {cap}; REQUIRED_COMPUTE_CAP is {opts.compute_cap}")
    if ran != 8:
        raise Missing(f"a CUDA kernel on {props.name} computed {ran}, not 8")
    return (f"{props.name}, compute capability {cap}, integrated {bool(getattr(props, 'is_integrated', False))}, "
            f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free")


def _add_one(x_ptr, n, BLOCK: "tl.constexpr"):  # noqa: F821 - Triton reads the annotation; tl is bound below
    offs = tl.arange(0, BLOCK)  # noqa: F821
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)  # noqa: F821


def check_triton(opts) -> str:
    torch = _torch()
    global tl
    try:
        import triton
        import triton.language as tl
        x = torch.zeros(16, device="cuda")
        triton.jit(_add_one)[(1,)](x, 16, BLOCK=16)
        torch.cuda.synchronize()
        total = x.sum().item()
    except Exception as exc:  # noqa: BLE001
        raise Missing(cause("a Triton kernel", exc)) from None
    if total != 16:
        raise Missing(f"a Triton kernel computed {total}, not 16")
    return f"a Triton {triton.__version__} kernel compiled and ran"


SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"  # systemd's PATH for a unit that sets none
TOOL_ADVICE = ("The units render PATH (the venv's bin, CUDA_HOME's bin, then ENGINE_SYSTEM_PATH) and CUDA_HOME: rerun "
               "the deploy if they are missing; the compilers come from VLLM_BUILD_PACKAGES, nvcc and ptxas from "
               "CUDA_PACKAGES (or DGX OS)")
VERSION_TIMEOUT_S = 60  # one program's `--version`, s


def toolchain(env) -> list[tuple[str, str | None, str]]:
    """(name, resolved path or None, where it was looked for) of every program the JIT paths run, resolved from the
    environment `env` the way each caller resolves it (shutil.which over its PATH; nvcc as vLLM's has_flashinfer()
    and FlashInfer's JIT find it, under CUDA_HOME)."""
    path = env.get("PATH", SYSTEM_PATH)
    where = f"PATH={path}"
    out = [("ninja", shutil.which("ninja", path=path), where)]
    cuda = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    for tool in ("nvcc", "ptxas"):
        if cuda:
            full = os.path.join(cuda, "bin", tool)
            out.append((tool, shutil.which(full), full))
        else:
            out.append((tool, None, "CUDA_HOME is not set"))
    cc = env.get("CC")
    out.append(("C compiler", shutil.which(cc, path=path) if cc else
                shutil.which("clang", path=path) or shutil.which("gcc", path=path),
                f"CC={cc}" if cc else f"clang or gcc on {where}"))
    cxx = env.get("CXX")
    out.append(("C++ compiler", shutil.which(cxx, path=path) if cxx else
                shutil.which("g++", path=path) or shutil.which("c++", path=path),
                f"CXX={cxx}" if cxx else f"g++ or c++ on {where}"))
    if env.get("TRITON_PTXAS_BLACKWELL_PATH"):
        ptxas = env["TRITON_PTXAS_BLACKWELL_PATH"]
        out.append(("TRITON_PTXAS_BLACKWELL_PATH", shutil.which(ptxas), ptxas))
    return out


def _answers(path: str) -> str:
    """The first line `path --version` prints; Missing when it does not run (a sandbox, a noexec mount)."""
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Missing(f"{path} does not run in the vLLM unit's sandbox: {exc}") from None
    lines = [ln.strip() for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    if r.returncode != 0:
        raise Missing(f"{path} --version exited {r.returncode} in the vLLM unit's sandbox: "
                      f"{(lines or [''])[-1][:200]}")
    return (lines or ["?"])[-1][:80]


def check_toolchain(opts) -> str:
    found = toolchain(os.environ)
    missing = [f"{name} ({where})" for name, path, where in found if path is None]
    if missing:
        raise Missing("the JIT toolchain is not in the vLLM unit's environment: not found: " + "; ".join(missing) +
                      f". {TOOL_ADVICE}")
    said = [f"{name} {path} ({_answers(path)})" for name, path, _ in found]
    return "resolved and ran: " + ", ".join(said)


def check_flashinfer(opts) -> str:
    if importlib.util.find_spec("flashinfer") is None:
        return "flashinfer is not installed: skipped"
    try:
        import flashinfer
    except Exception as exc:  # noqa: BLE001
        raise Missing(cause("import flashinfer", exc)) from None
    return f"flashinfer {getattr(flashinfer, '__version__', '?')} imports"


def check_flashinfer_jit(opts) -> str:
    torch = _torch()
    try:
        from vllm.utils.flashinfer import has_flashinfer
    except Exception as exc:  # noqa: BLE001
        raise Missing(cause("import vllm.utils.flashinfer", exc)) from None
    if not has_flashinfer():
        raise Missing("vLLM's has_flashinfer() is False in the vLLM unit's environment (flashinfer not installed, or "
                      "ninja not on PATH, or no nvcc under CUDA_HOME: vllm/utils/flashinfer.py): vLLM would choose "
                      "other NVFP4 kernels, and its FlashInfer attention backend and sampler still JIT at start and "
                      "die; the toolchain check names what is missing")
    try:
        import flashinfer
        from flashinfer.norm import rmsnorm  # gen_norm_module().build_and_load(): FlashInfer's JIT (flashinfer/norm.py)

        x = torch.randn(4, 256, device="cuda", dtype=torch.float16)
        w = torch.rand(256, device="cuda", dtype=torch.float16) + 0.5
        got = rmsnorm(x, w, eps=1e-6)  # JIT-builds its norm module (ninja, nvcc) at first use
        torch.cuda.synchronize()
        xf = x.float()
        want = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
        err = (got.float() - want).abs().max().item()
    except Exception as exc:  # noqa: BLE001
        raise Missing(cause("FlashInfer's JIT (its RMSNorm module)", exc)) from None
    if not err < 0.05:
        raise Missing(f"FlashInfer's JIT-built RMSNorm computed a result {err:.3g} away from torch's")
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE", "")
    built = sum(len(files) for _root, _dirs, files in os.walk(base)) if base else 0
    return (f"vLLM's has_flashinfer() is True; FlashInfer {getattr(flashinfer, '__version__', '?')} built its RMSNorm "
            f"module ({built} files in a fresh workspace) and ran it (max error {err:.2g})")


def check_torch_compile(opts) -> str:
    torch = _torch()
    try:
        import torch._dynamo.config as dynamo
        import torch._inductor.config as inductor

        dynamo.suppress_errors = False  # a failed compile is the answer, not a silent fall-back to eager
        inductor.fx_graph_cache = False  # compile, never load a kernel an earlier run cached
        inductor.compile_threads = 1  # in this process: no worker pool for one tiny kernel
        x = torch.arange(8, dtype=torch.float32)
        got = torch.compile(lambda t: t * 2 + 1, backend="inductor", fullgraph=True)(x)
    except Exception as exc:  # noqa: BLE001
        raise Missing(cause("torch.compile", exc)) from None
    if got.tolist() != [float(2 * i + 1) for i in range(8)]:
        raise Missing(f"torch.compile computed {got.tolist()}")
    return f"torch.compile (inductor) built and ran a kernel (torch {torch.__version__})"


CHECKS = {"import": check_import, "toolchain": check_toolchain, "cuda": check_cuda, "triton": check_triton,
          "flashinfer": check_flashinfer, "flashinfer_jit": check_flashinfer_jit,
          "torch_compile": check_torch_compile}  # DEVICE_CHECKS' names (sparkctl/config/schema.py)


# --- the command line --------------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        print(f"device check: {message}", file=sys.stderr)
        raise SystemExit(USAGE)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="device_check.py", description="Can this venv serve on this box, in the vLLM unit's sandbox?")
    p.add_argument("--dist", required=True, help="the pip distribution of vLLM (VLLM_DIST)")
    p.add_argument("--version", required=True, help="the vLLM release it must be (VLLM_VERSION)")
    p.add_argument("--compute-cap", required=True, help="the GPU's compute capability (REQUIRED_COMPUTE_CAP)")
    p.add_argument("--checks", required=True, nargs="+", choices=sorted(CHECKS), help="the checks, in order")
    return p


def fresh_caches() -> str:
    """Inductor's, Triton's, FlashInfer's and CuTe DSL's caches in a new directory beside the service's own caches
    (XDG_CACHE_HOME, under STATE_DIR: writable in the sandbox, and not on /run, which Ubuntu mounts noexec: a compiled
    kernel could not be loaded from there); the caller removes it."""
    tmp = tempfile.mkdtemp(prefix="device-check-", dir=os.environ.get("XDG_CACHE_HOME") or None)
    for name, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"),
                      ("FLASHINFER_WORKSPACE_BASE", "flashinfer"), ("CUTE_DSL_CACHE_DIR", "cute-dsl")):
        os.environ[name] = os.path.join(tmp, sub)
    return tmp


def run(checks: list[str], opts) -> int:
    started = time.monotonic()
    for name in checks:
        t0 = time.monotonic()
        try:
            said = CHECKS[name](opts)
        except Missing as exc:
            print(f"device check FAILED ({name}): {exc}. The venv {sys.prefix} is refused: not marked built, and no "
                  f"service was stopped", file=sys.stderr, flush=True)
            return FAILED
        print(f"device check: {name}: {said} ({time.monotonic() - t0:.1f} s)", flush=True)
    print(f"device check: passed in {time.monotonic() - started:.1f} s: {' '.join(checks)}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    opts = parser().parse_args(argv)
    caches = fresh_caches()
    try:
        return run(opts.checks, opts)
    finally:
        shutil.rmtree(caches, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
