"""The built-in catalog entries: the production write-up's two coding models and two embedders, written in exactly
the shape group data's CATALOG_MODELS entries take (sparkctl/config/catalog.py validates both with one model).

Memory facts typed here are hand-typed: each overrides what `lock refresh` derives from the checkpoint's own files,
and the plan says so. GiB are 2**30 bytes; 'measured' figures come from the production box (model-decision-writeup.md).
"""

from __future__ import annotations

# the write-up's probe (docs/acceptance.md "Measuring": the probe this repository's bench reproduces): code-generation
# requests through the proxy, run to their natural end, 40 s decode windows, one fresh 12K (12,288-token) prefill
PROBE_WORKLOAD = {"workload": "codegen-v1", "ignore_eos": False}
PROBE_SOURCE = ("production write-up (model-decision-writeup.md, Finding 2): \"Laguna leads at every count: 46.5, 52, "
                "96 and 176 tokens/s aggregate against Qwen's 18.3, 40, 73 and 122 ... Prefill is Laguna's at every "
                "length: 3,550 tokens/s against 2,088 on a 12K prompt\"; the bench probe on one GX10, 40 s windows")

# What vLLM 0.32.0 chooses on a GB10 (sm_121, FP8 KV, NVFP4 weights) with FlashInfer on, derived from its selection
# code (not yet read off a GX10's log: `rehearse` does, and flags a difference): attention, vllm/platforms/cuda.py
# _get_backend_priorities (SM12x: FLASH_ATTN first, which FP8 KV rules out, then FLASHINFER); NVFP4 linear,
# vllm/model_executor/kernels/linear/__init__.py _POSSIBLE_NVFP4_KERNELS (FlashInferCuteDsl needs sm_10x, then
# FlashInferCutlass: FlashInfer and >= sm_100; without FlashInfer, CutlassNvFp4LinearKernel); NVFP4 MoE,
# fused_moe/oracle/nvfp4.py (FLASHINFER_TRTLLM and FLASHINFER_CUTEDSL need sm_10x, FLASHINFER_CUTLASS supports
# the 12.x family). The write-up measured Laguna on "FlashInfer's CUTLASS NVFP4 kernels" (model-decision-writeup.md)
GB10_KERNELS_SOURCE = ("vLLM 0.32.0's selection on SM12x (vllm/platforms/cuda.py, kernels/linear/__init__.py, "
                       "fused_moe/oracle/nvfp4.py); the write-up measured on FlashInfer's CUTLASS NVFP4 kernels")

QWEN = {
    "role": "coder",
    "title": "Qwen3.8-27B (unsloth community NVFP4, MTP depth 3)",
    "checkpoint": {"repo": "unsloth/Qwen3.8-27B-NVFP4", "revision": "main"},
    "max_model_len": 262144,
    "kv_cache_dtype": "fp8",
    "speculative": {"method": "mtp", "num_speculative_tokens": 3},
    "extra_args": [
        "--limit-mm-per-prompt", '{"image":4,"video":0}',  # images on
        "--reasoning-parser", "qwen3",
        "--tool-call-parser", "qwen3_xml",
        "--enable-auto-tool-choice",
    ],
    # a dense model (its MLPs NVFP4, no experts): no NVFP4 MoE kernel
    "expected_kernels": {"attention": "FLASHINFER", "nvfp4_linear": "FlashInferCutlassNvFp4LinearKernel",
                         "nvfp4_moe": "", "flashinfer": True, "source": GB10_KERNELS_SOURCE},
    "memory": {
        "resident_gib": 44.0,
        "resident_source": "measured",
        "bytes_read_per_step_gb": 16.0,
        "tokens_per_step": 2.5,
        "full_attention_layers": 16,
        "kv_heads": 4,
        "head_dim": 256,
        "linear_attention_layers": 48,
        "linear_state_bytes_per_layer": 3_145_728 + 122_880,
        "measured_kv_tokens": {36: 1_014_892},
        "measured_decode_tokens_per_s": 18.3,
        "measured_on": "unsloth/Qwen3.8-27B-NVFP4",
        "measured_source": "production write-up (model-decision-writeup.md, Finding 3): \"At the 36 GiB of KV we "
                           "deployed, Qwen holds nearly four concurrent 262K-token requests (3.9: 1,014,892 cached "
                           "tokens, measured)\"; decode: the bench probe, single stream",
        "draft_attention_layers": 1,  # the MTP head's attention layer (the config's mtp_num_hidden_layers)
        "calibrated": {"draft_attention_layers": "the MTP layer is counted in the KV pool because 16 + 1 pool layers "
                                                 "reproduce the measured 1,014,892 tokens (whether it shares the pool "
                                                 "is not documented)"},
        "weights_gib": 20.0,  # estimate: NVFP4 MLPs, FP8 attention, BF16 embeddings/MTP/vision tower
        # 2.5 tokens per step at depth 3 = 1.5 accepted of 3 drafted: about half at each position
        "measured_acceptance_rate": 0.5,
        "measured_acceptance_per_position": [0.5, 0.5, 0.5],
        "measured_acceptance_source": "production write-up (model-decision-writeup.md): \"Qwen's single MTP layer, "
                                      "re-run three times, accepts about half at each position on either workload: "
                                      "2.5 tokens per step\"",
        # the write-up states 2.5 tokens per step; the rate is that arithmetic (1.5 of 3) and the positions a reading
        # of "about half at each position": chained acceptance falls with depth, so those are never judged
        "acceptance_provenance": {"tokens_per_step": "measured", "acceptance_rate": "derived",
                                  "per_position": "derived"},
        "published_decode_tokens_per_s": {1: 18.3, 2: 40.0, 4: 73.0, 8: 122.0},
        "published_prefill_tokens_per_s": {12288: 2088.0},
        "published_workload": PROBE_WORKLOAD,
        "published_source": PROBE_SOURCE,
    },
}

LAGUNA = {
    "role": "coder",
    "title": "Poolside Laguna S 2.1 (NVFP4 117B MoE, DFlash draft of 7)",
    "checkpoint": {"repo": "poolside/Laguna-S-2.1-NVFP4", "revision": "main"},
    "draft": {"repo": "poolside/Laguna-S-2.1-DFlash-NVFP4", "revision": "main"},
    "max_model_len": 262144,
    "kv_cache_dtype": "fp8",
    "speculative": {"method": "dflash", "num_speculative_tokens": 7},
    "extra_args": [
        "--reasoning-parser", "poolside_v1",
        "--tool-call-parser", "poolside_v1",
        "--enable-auto-tool-choice",
    ],
    # no kernel override (moe_backend, linear_backend: vLLM's "auto"): the production write-up measured Laguna on
    # FlashInfer's CUTLASS NVFP4 kernels, "the same kernel family that makes Laguna fast on this silicon"
    # (model-decision-writeup.md); Marlin for its experts, were a vLLM release to need it on SM12x, is one line of
    # group data: CATALOG_OVERRIDES = {"laguna-s-2.1": {"moe_backend": "marlin"}} (docs/operating.md)
    "expected_kernels": {"attention": "FLASHINFER", "nvfp4_linear": "FlashInferCutlassNvFp4LinearKernel",
                         "nvfp4_moe": "FLASHINFER_CUTLASS", "flashinfer": True, "source": GB10_KERNELS_SOURCE},
    "memory": {
        "resident_gib": 86.0,  # the write-up's ~98 GiB was measured with its 12 GiB KV allocated: 98 - 12
        "resident_source": "estimate",
        "bytes_read_per_step_gb": 4.3,
        "tokens_per_step": 5.1,
        "full_attention_layers": 12,
        "kv_heads": 8,
        "head_dim": 128,
        "linear_attention_layers": 36,  # sliding-window attention (layer_types: 3 sliding, then 1 full, 12 times)
        "linear_state_bytes_per_layer": 0,
        "sliding_window": 512,  # the checkpoint's config.json (an earlier NVFP4 revision, as mirrored publicly)
        "measured_concurrency": {12: 1.2},
        "measured_decode_tokens_per_s": 46.5,
        "measured_on": "poolside/Laguna-S-2.1-NVFP4",
        "measured_source": "production write-up (model-decision-writeup.md, Finding 3): \"Its 12 GiB KV budget holds "
                           "1.2 full-context requests\"; decode: the bench probe, single stream",
        # the DFlash draft's 6 layers (HF card: a 6-layer sliding-attention drafter); vLLM's laguna_dflash.py keeps
        # their full KV allocation ("DFlash inserts verifier-context K/V at absolute cache slots"). Their KV heads and
        # head dim are assumed to be the target's (8 x 128) until the lock records the draft's config.json
        "draft_attention_layers": 6,
        "weights_gib": 64.0,  # estimate: 117.6B at NVFP4 plus the ~1B BF16 DFlash draft
        "measured_acceptance_rate": 0.58,  # per position not published: only the overall rate has a floor
        "measured_acceptance_source": "production write-up (model-decision-writeup.md): \"Laguna's DFlash draft "
                                      "proposes 7 tokens per step. On our code-generation probe it lands 58% of them "
                                      "- 5.1 tokens per step\"",
        "acceptance_provenance": {"tokens_per_step": "measured", "acceptance_rate": "measured"},
        "published_decode_tokens_per_s": {1: 46.5, 2: 52.0, 4: 96.0, 8: 176.0},
        "published_prefill_tokens_per_s": {12288: 3550.0},
        "published_workload": PROBE_WORKLOAD,
        "published_source": PROBE_SOURCE,
    },
}

QWEN_EMBED = {
    "role": "embedder",
    "title": "Qwen3-Embedding-0.6B",
    "checkpoint": {"repo": "Qwen/Qwen3-Embedding-0.6B", "revision": "main"},
    "served_name": "embed-qwen3",
    # what one embedding request needs, not the model's 32,768-token limit: an embedding input is one chunk of a
    # document, and the OpenAI-compatible embeddings API the gateway serves caps an input at 8,191 tokens
    # (text-embedding-3's limit, which clients chunk to); bge-m3 beside it takes 8,192. The KV of one request
    # (config.json: 28 layers x 2 x 8 KV heads x 128 x 2 bytes BF16 = 112 KiB a token) is then 8,192 x 112 KiB =
    # 0.875 GiB, where 32,768 tokens would need 3.5 GiB each, taken from the Laguna flip's slack (docs/capacity.md)
    "max_model_len": 8192,
    "extra_args": ["--runner", "pooling"],
    # calibrated: set so both embedders (+2 GiB KV each) and OS_RESERVE_GIB add up to the 15.6 GiB the production
    # figures imply (121.6 usable - 44 resident - 62 free)
    "memory": {"resident_gib": 2.8, "resident_source": "calibrated", "bytes_read_per_step_gb": 1.2},
}

BGE_M3 = {
    "role": "embedder",
    "title": "BAAI bge-m3",
    "checkpoint": {"repo": "BAAI/bge-m3", "revision": "main"},
    "served_name": "embed-bge-m3",
    # the model's own limit (config.json: 8,194 positions, 2 of them XLM-R's offset) and the OpenAI-sized input above;
    # an encoder-only model: vLLM 0.32.0 allocates it no KV cache, so its budget is an upper bound (docs/capacity.md)
    "max_model_len": 8192,
    "extra_args": ["--runner", "pooling"],
    "memory": {"resident_gib": 2.8, "resident_source": "calibrated",  # calibrated like the other embedder's
               "bytes_read_per_step_gb": 1.1},
}

BUILTIN = {"qwen3.8-27b": QWEN, "laguna-s-2.1": LAGUNA, "qwen3-embedding-0.6b": QWEN_EMBED, "bge-m3": BGE_M3}
