"""What vLLM chose, read from the engine's log, against what the catalog expects for the model on a GB10
(ModelSpec.expected_kernels): the attention backend, the NVFP4 linear and MoE kernels, FlashInfer on or off. Pure:
journal lines and the catalog entry in, Figures out.

The lines, as vLLM 0.32.0 logs them (each once per engine):

    Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN'].
                                                  (vllm/platforms/cuda.py; "Using X backend." when one was asked for)
    Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM          (vllm/model_executor/kernels/linear/__init__.py)
    Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential backends: [...]   (fused_moe/oracle/nvfp4.py)
    FlashInfer kernels are disabled: flashinfer-cubin is not installed and nvcc ... or ninja (PATH) is missing.
                                                  (vllm/utils/flashinfer.py has_flashinfer, a warning)
    Using FlashInfer for top-p & top-k sampling.                     (vllm/v1/sample/ops/topk_topp_sampler.py)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkctl.rehearse.figures import BAD, NOT_MEASURED, OK, Figure

ATTENTION_RE = re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]*) (?:attention )?backend"
                          r"(?: out of potential backends|\.)")
NVFP4_LINEAR_RE = re.compile(r"Using (\w+) for NVFP4 GEMM")
NVFP4_MOE_RE = re.compile(r"Using '(\w+)' NvFp4 MoE backend")
FLASHINFER_OFF = "FlashInfer kernels are disabled"
FLASHINFER_SAMPLER = "Using FlashInfer for top-p & top-k sampling"
# what boxread greps the unit's journal for (an extended regular expression, as `grep -E` reads it)
JOURNAL_LINES = (r"attention backend out of potential|Using [A-Za-z.]*[A-Z0-9_]+ backend\.|for NVFP4 GEMM|"
                 r"NvFp4 MoE backend|FlashInfer kernels are disabled|Using FlashInfer for")
ASPECTS = {"attention": "attention backend", "nvfp4_linear": "NVFP4 linear kernel",
           "nvfp4_moe": "NVFP4 MoE kernel", "flashinfer": "FlashInfer"}

HOW = ("journal of the unit's current start: vLLM's \"Using X attention backend\", \"Using X for NVFP4 GEMM\", "
       "\"Using 'X' NvFp4 MoE backend\" and \"FlashInfer kernels are disabled\" lines")
BAD_MEANS = ("vLLM runs other kernels than the ones the catalog's figures were measured on: speed and memory are "
             "not the write-up's. FlashInfer off means ninja or nvcc is missing from the unit's environment (the "
             "device check's toolchain step names which) and its attention backend dies in the JIT; another kernel "
             "with FlashInfer on is a vLLM or checkpoint change: confirm it, then correct the catalog's "
             "expected_kernels (CATALOG_OVERRIDES) or pin the kernel (moe_backend, linear_backend)")


@dataclass
class Chosen:
    """What one engine's log says it chose; each list in the order logged (a draft model logs its own)."""
    attention: list[str] = field(default_factory=list)
    nvfp4_linear: list[str] = field(default_factory=list)
    nvfp4_moe: list[str] = field(default_factory=list)
    flashinfer_off: bool = False
    flashinfer_sampler: bool = False

    @property
    def flashinfer(self) -> bool | None:
        """Off when vLLM said so; on when it chose a FlashInfer kernel; else not known from the log."""
        if self.flashinfer_off:
            return False
        names = self.attention + self.nvfp4_linear + self.nvfp4_moe
        if self.flashinfer_sampler or any("flashinfer" in n.lower() for n in names):
            return True
        return None


def parse(lines: list[str]) -> Chosen:
    out = Chosen()
    for line in lines:
        for regex, into in ((ATTENTION_RE, out.attention), (NVFP4_LINEAR_RE, out.nvfp4_linear),
                            (NVFP4_MOE_RE, out.nvfp4_moe)):
            if (m := regex.search(line)) and m.group(1) not in into:
                into.append(m.group(1))
        out.flashinfer_off |= FLASHINFER_OFF in line
        out.flashinfer_sampler |= FLASHINFER_SAMPLER in line
    return out


def _on(value: bool | None) -> str:
    return "-" if value is None else "on" if value else "off"


def judge(aspect: str, chosen: Chosen, expected) -> tuple[str, str, str]:
    """(value, against, verdict) of one aspect: the engine's first choice against the catalog's."""
    want = getattr(expected, aspect)
    if aspect == "flashinfer":
        got = chosen.flashinfer
        against = f"catalog: {_on(want)}"
        if got is None:
            return "not logged", against, NOT_MEASURED
        return _on(got), against, OK if got == want else BAD
    logged = getattr(chosen, aspect)
    value = ", ".join(logged) if logged else "none logged"
    if want == "":
        return value, "catalog: none (no such layers)", OK if not logged else BAD
    if not logged:
        return value, f"catalog: {want}", NOT_MEASURED
    return value, f"catalog: {want}", OK if logged[0] == want else BAD


def kernel_figures(box: str, facts: dict, models: dict) -> list[Figure]:
    """Per service the kernels its engine logged against its catalog entry's expected_kernels (models: service ->
    ModelSpec; a headless worker's engine logs its own); one NOT_MEASURED figure naming what it chose where the
    catalog states nothing."""
    out = []
    for service, spec in models.items():
        journal = ((facts.get("services") or {}).get(service) or {}).get("journal", [])
        chosen = parse(journal)
        expected = getattr(spec, "expected_kernels", None)
        if expected is None:
            said = "; ".join(f"{ASPECTS[a]} {', '.join(getattr(chosen, a)) or '-'}" for a in
                             ("attention", "nvfp4_linear", "nvfp4_moe")) + f"; FlashInfer {_on(chosen.flashinfer)}"
            out.append(Figure("kernels", box, f"{service}: kernels", said,
                              "nothing to compare with: the catalog entry states no expected_kernels", NOT_MEASURED,
                              HOW, BAD_MEANS))
            continue
        for aspect, name in ASPECTS.items():
            if getattr(expected, aspect) is None:
                continue
            value, against, verdict = judge(aspect, chosen, expected)
            out.append(Figure("kernels", box, f"{service}: {name}", value, against, verdict, HOW, BAD_MEANS))
    return out
