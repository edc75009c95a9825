"""What vLLM chose, read from its log (sparkctl/rehearse/kernels.py), against the catalog's expected kernels for the
model on a GB10: the lines as vLLM 0.32.0 prints them (vllm/platforms/cuda.py, kernels/linear/__init__.py,
fused_moe/oracle/nvfp4.py, utils/flashinfer.py, v1/sample/ops/topk_topp_sampler.py), in its journal's format."""

from __future__ import annotations

import re

import pytest

from sparkctl.check.load import load
from sparkctl.rehearse import boxread, kernels
from sparkctl.rehearse.figures import BAD, NOT_MEASURED, OK

P = "1100.000000 spark-1 vllm[7]: (EngineCore pid=4321)"
ATTENTION = (f"{P} INFO 12-06 10:00:01 [cuda.py:506] Using FLASHINFER attention backend out of potential backends: "
             "['FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].")
LINEAR = f"{P} INFO 12-06 10:00:02 [__init__.py:1240] Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM"
MOE = (f"{P} INFO 12-06 10:00:02 [nvfp4.py:314] Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential "
       "backends: ['FLASHINFER_TRTLLM', 'FLASHINFER_CUTEDSL', 'FLASHINFER_CUTEDSL_BATCHED', 'FLASHINFER_CUTLASS', "
       "'VLLM_CUTLASS', 'MARLIN', 'HUMMING', 'EMULATION'].")
SAMPLER = f"{P} INFO 12-06 10:00:09 [topk_topp_sampler.py:124] Using FlashInfer for top-p & top-k sampling."
DISABLED = (f"{P} WARNING 12-06 10:00:00 [flashinfer.py:99] FlashInfer kernels are disabled: flashinfer-cubin is not "
            "installed and nvcc (CUDA_HOME, CUDA_PATH, PATH or /usr/local/cuda) or ninja (PATH) is missing. Set "
            "CUDA_HOME to a CUDA toolkit and put ninja on PATH, or run `vllm download-kernels`.")
CUTLASS_LINEAR = f"{P} INFO 12-06 10:00:02 [__init__.py:1240] Using CutlassNvFp4LinearKernel for NVFP4 GEMM"
VLLM_MOE = (f"{P} INFO 12-06 10:00:02 [nvfp4.py:314] Using 'VLLM_CUTLASS' NvFp4 MoE backend out of potential "
            "backends: ['FLASHINFER_TRTLLM', 'VLLM_CUTLASS', 'MARLIN'].")
ASKED = f"{P} INFO 12-06 10:00:01 [cuda.py:446] Using AttentionBackendEnum.TRITON_ATTN backend."
OTHER = [f"{P} INFO 12-06 10:00:01 [selector.py:131] Using FLASHMLA MLA prefill backend.",
         f"{P} INFO 12-06 10:00:01 [unquantized.py:529] Using TritonExperts MoE backend",
         f"{P} WARNING 12-06 10:00:01 [cpu_worker.py:140] CPU backend doesn't allow to use `torch.set_num_threads`"]


@pytest.fixture(scope="module")
def catalog():
    return load(["all", "gx10"]).catalog


def figs(journal, spec) -> dict:
    return {f.name.split(": ", 1)[1]: f for f in kernels.kernel_figures("spark-1", {"services": {"coder": {
        "journal": journal}}}, {"coder": spec})}


def test_the_log_lines_parse_into_what_vllm_chose():
    c = kernels.parse([ATTENTION, LINEAR, MOE, SAMPLER, *OTHER])
    assert (c.attention, c.nvfp4_linear, c.nvfp4_moe) == (["FLASHINFER"], ["FlashInferCutlassNvFp4LinearKernel"],
                                                          ["FLASHINFER_CUTLASS"])
    assert c.flashinfer is True
    assert kernels.parse([ASKED]).attention == ["TRITON_ATTN"]  # --attention-backend given: "Using X backend."
    assert kernels.parse(OTHER).attention == [] and kernels.parse(OTHER).flashinfer is None  # nothing to tell
    off = kernels.parse([DISABLED, ATTENTION, CUTLASS_LINEAR])
    assert off.flashinfer is False and off.attention == ["FLASHINFER"]  # chosen anyway: the JIT then needs ninja


def test_the_journal_read_keeps_every_kernel_line():
    for line in (ATTENTION, LINEAR, MOE, SAMPLER, DISABLED, CUTLASS_LINEAR, VLLM_MOE, ASKED):
        assert re.search(boxread.JOURNAL_LINES, line), line


def test_lagunas_kernels_on_a_gb10_match_the_catalog(catalog):
    got = figs([ATTENTION, LINEAR, MOE, SAMPLER], catalog["laguna-s-2.1"])
    assert {k: (f.value, f.verdict) for k, f in got.items()} == {
        "attention backend": ("FLASHINFER", OK), "NVFP4 linear kernel": ("FlashInferCutlassNvFp4LinearKernel", OK),
        "NVFP4 MoE kernel": ("FLASHINFER_CUTLASS", OK), "FlashInfer": ("on", OK)}
    assert got["NVFP4 MoE kernel"].against == "catalog: FLASHINFER_CUTLASS"


def test_a_unit_without_ninja_on_its_path_is_flagged(catalog):
    """Issue #39's first start: has_flashinfer() False (no ninja on PATH), FlashInfer attention chosen anyway, CUTLASS
    NVFP4 GEMM and vLLM's own MoE kernels instead of FlashInfer's."""
    got = figs([DISABLED, ATTENTION, CUTLASS_LINEAR, VLLM_MOE], catalog["laguna-s-2.1"])
    assert (got["FlashInfer"].value, got["FlashInfer"].verdict, got["FlashInfer"].against) == ("off", BAD,
                                                                                                "catalog: on")
    assert (got["NVFP4 linear kernel"].value, got["NVFP4 linear kernel"].verdict) == ("CutlassNvFp4LinearKernel", BAD)
    assert got["NVFP4 MoE kernel"].verdict == BAD and got["attention backend"].verdict == OK
    assert "toolchain step" in got["FlashInfer"].bad_means


def test_a_dense_model_expects_no_moe_kernel(catalog):
    got = figs([ATTENTION, LINEAR], catalog["qwen3.8-27b"])
    assert (got["NVFP4 MoE kernel"].value, got["NVFP4 MoE kernel"].verdict) == ("none logged", OK)
    assert got["NVFP4 MoE kernel"].against == "catalog: none (no such layers)"
    assert figs([ATTENTION, LINEAR, MOE], catalog["qwen3.8-27b"])["NVFP4 MoE kernel"].verdict == BAD


def test_nothing_logged_or_nothing_expected_is_never_a_pass(catalog):
    got = figs([], catalog["qwen3.8-27b"])
    assert {f.verdict for k, f in got.items() if k != "NVFP4 MoE kernel"} == {NOT_MEASURED}
    embedder = figs([ATTENTION], catalog["bge-m3"])  # the catalog states nothing for the embedders
    assert list(embedder) == ["kernels"] and embedder["kernels"].verdict == NOT_MEASURED
    assert "attention backend FLASHINFER" in embedder["kernels"].value
    assert "nothing to compare with" in embedder["kernels"].against
