#!/usr/bin/env python3
"""On the box, with a candidate venv's python, in the vLLM unit's own sandbox: can this venv serve on this box?

    device_check.py --dist DIST --version VERSION --compute-cap 12.1 --checks import cuda triton flashinfer

The deploy runs it before a newly built venv is marked built (tasks/vllm.py venv_build), as a transient unit with
the vLLM unit's user, sandbox, device policy, environment and limits (sparkctl/render/device_check.py), after the
unit's own device preparation (VLLM_DEVICE_PREPARE, as root); so what the sandbox or a missing compiler would break
at the first start breaks here, while the running services still run their own venv. The checks (DEVICE_CHECKS):

    import         vLLM imports and its distribution is VERSION
    cuda           CUDA initialises, a tiny kernel runs; the GPU's compute capability; integrated; free memory
    triton         a tiny Triton kernel compiles and runs (the C compiler and Python.h for its launcher, ptxas)
    flashinfer     flashinfer imports (skipped when it is not installed)
    torch_compile  torch.compile (inductor) builds and runs a tiny function on the CPU (the C++ compiler, Python.h)

Compilers run in a fresh cache (removed at the end), so a kernel cached by an earlier run never hides a missing
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
    ("ptxas", "ptxas cannot build this GPU's kernels (sm_121a needs CUDA 12.9 or later): point TRITON_PTXAS_PATH at "
              "CUDA_HOME's bin/ptxas through VLLM_EXTRA_ENV"),
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


def check_flashinfer(opts) -> str:
    if importlib.util.find_spec("flashinfer") is None:
        return "flashinfer is not installed: skipped"
    try:
        import flashinfer
    except Exception as exc:  # noqa: BLE001
        raise Missing(cause("import flashinfer", exc)) from None
    return f"flashinfer {getattr(flashinfer, '__version__', '?')} imports"


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


CHECKS = {"import": check_import, "cuda": check_cuda, "triton": check_triton, "flashinfer": check_flashinfer,
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
    """Inductor's and Triton's caches in a new directory beside the service's own caches (XDG_CACHE_HOME, under
    STATE_DIR: writable in the sandbox, and not on /run, which Ubuntu mounts noexec: a compiled kernel could not be
    loaded from there); the caller removes it."""
    tmp = tempfile.mkdtemp(prefix="device-check-", dir=os.environ.get("XDG_CACHE_HOME") or None)
    for name, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
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
