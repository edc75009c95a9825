"""Per-box choices for every GX10 (group `gx10`). The flip is one line: CODING_MODEL.

Flip for one run without editing:  pyinfra inventory.py deploy.py --data CODING_MODEL=laguna-s-2.1
"""

CODING_MODEL = "qwen3.8-27b"  # the coding model served as CODER_SERVED_NAME: qwen3.8-27b | laguna-s-2.1

CODER_KV_CACHE_GIB = {  # KV-cache budget of each coding model the box keeps on disk and may flip to, GiB
    "qwen3.8-27b": 36,  # 3.9 concurrent 262K-token requests, measured
    "laguna-s-2.1": 12,  # 1.2 concurrent 262K-token requests
}

# The fleet's pools (README "A fleet"): each pool serves one coding model, its boxes counted (placed by the planner
# in inventory order, after the named ones) or named (inventory host names): {"qwen3.8-27b": 3, "laguna-s-2.1": 1}
# or {"qwen3.8-27b": ["spark-1", "spark-2"]}; the long form {"model": key, "boxes": 2, "tensor_parallel": True,
# "embedders": False, "served_name": "laguna"} makes a pool of tensor-parallel pairs, boxes without the EMBEDDERS,
# or another OpenAI model id (default: CODER_SERVED_NAME for CODING_MODEL's pool, else the pool's name).
# {} (the default): SPARK_TOPOLOGY's pools, as before (replicas: one pool; split: a pool per box; tensor-parallel:
# one pair); `python -m sparkctl plan` shows the placement, each box's memory, each pool's capacity and the waves
FLEET_POOLS = {}

EMBEDDERS = [  # the two embedding models, served with --runner pooling on EMBEDDER_PORTS
    {"model": "qwen3-embedding-0.6b", "kv_cache_gib": 2},  # kv_cache_gib: its KV budget, GiB
    {"model": "bge-m3", "kv_cache_gib": 2},
]

# What a vLLM engine holds beside its weights and its KV budget (activations, CUDA graphs, the CUDA context, a vision
# tower's workspace), GiB: a model whose catalog entry types no resident_gib is planned as weights (the lock's
# safetensors sizes) + this. coder: 24 = Qwen3.8-27B's 44 GiB resident, measured in production, minus its ~20 GiB of
# weights (the catalog's estimate until `lock refresh` records the checkpoint's sizes: recompute it then); Laguna's
# 86 GiB resident estimate minus its ~64 GiB of weights gives 22, the same within 2 GiB. embedder: 1.7 = the
# embedders' 2.8 GiB calibrated resident minus Qwen3-Embedding-0.6B's ~1.1 GiB of BF16 weights (0.6B parameters).
MODEL_RUNTIME_OVERHEAD_GIB = {"coder": 24.0, "embedder": 1.7}

# Catalog entries added as data (the same shape, and the same checks, as the built-in ones in
# sparkctl/config/catalog_entries.py); a coding model here is planned (`python -m sparkctl plan`), and becomes
# selectable, and kept on disk, once it has a CODER_KV_CACHE_GIB budget. memory.hub_facts: the checkpoint's
# config.json facts and weight size as its Hub page shows them, typed in until `lock refresh` records the
# checkpoint's own (then the lock's are used, and these lines can go). Both are unmeasured on a GX10: no measured_*
# or published figure, so a first flip is judged against the roofline and the KV plan only.
CATALOG_MODELS = {
    # the write-up's first next candidate ("What a second DGX Spark would change"): Laguna S 2.1's main revision,
    # "99.7 GB, the eight BF16 expert layers Poolside kept for quality" (the shipped laguna-s-2.1 was measured on an
    # earlier revision of the same repository: pin each entry's revision to its commit once `lock refresh` shows it)
    "laguna-s-2.1-main": {
        "role": "coder",
        "title": "Poolside Laguna S 2.1, main revision (NVFP4 with 8 BF16 expert layers, DFlash draft of 7)",
        "checkpoint": {"repo": "poolside/Laguna-S-2.1-NVFP4", "revision": "main"},
        "draft": {"repo": "poolside/Laguna-S-2.1-DFlash-NVFP4", "revision": "main"},
        "max_model_len": 262144,  # tokens per request, as the shipped revision
        "kv_cache_dtype": "fp8",
        "speculative": {"method": "dflash", "num_speculative_tokens": 7},
        "extra_args": ["--reasoning-parser", "poolside_v1", "--tool-call-parser", "poolside_v1",
                       "--enable-auto-tool-choice"],
        "memory": {
            # estimate, GB per decode step: the shipped revision's 4.3 plus its 8 BF16 expert layers' active experts
            # read at 2 bytes a weight instead of NVFP4's ~0.56 (~8.5B active over 48 layers: +1.4 GB)
            "bytes_read_per_step_gb": 5.7,
            "draft_attention_layers": 6,  # the DFlash draft's 6 layers keep a full-context KV (as laguna-s-2.1)
            "hub_facts": {
                "weights_bytes": 99_700_000_000,  # 99.7 GB: the write-up's figure for the main revision on the Hub
                # the model card (huggingface.co/poolside/Laguna-S-2.1, main): 48 layers, 118B total / ~8B active;
                # the layout of the NVFP4 config.json as mirrored publicly for the shipped revision (3 sliding-window
                # layers of 512 tokens, then 1 full-attention layer, 12 times; 8 KV heads of 128). The main revision
                # changes the experts' precision, not the attention
                "config": {"architectures": ["LagunaForCausalLM"], "model_type": "laguna", "num_hidden_layers": 48,
                           "num_key_value_heads": 8, "head_dim": 128, "sliding_window": 512,
                           "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 12,
                           "num_experts": 256, "torch_dtype": "bfloat16"},
                "source": "huggingface.co/poolside/Laguna-S-2.1 model card (main) and the Laguna-S-2.1-NVFP4 "
                          "config.json as mirrored publicly; 99.7 GB: model-decision-writeup.md",
            },
        },
    },
    # the write-up's second: "a 122B-A10B MoE at NVFP4 (83.5 GB on the Hub)", Qwen3.5-122B-A10B in NVIDIA's
    # ModelOpt NVFP4 (MTP left off: spark-vllm.md gotcha 4, check its index for mtp.* tensors before turning it on)
    "qwen3.5-122b-a10b-nvfp4": {
        "role": "coder",
        "title": "Qwen3.5-122B-A10B (NVIDIA ModelOpt NVFP4, 256-expert MoE, 10B active)",
        "checkpoint": {"repo": "nvidia/Qwen3.5-122B-A10B-NVFP4", "revision": "main"},
        "max_model_len": 262144,  # tokens per request: the model's native context
        "kv_cache_dtype": "fp8",
        "extra_args": ["--limit-mm-per-prompt", '{"image":4,"video":0}', "--reasoning-parser", "qwen3",
                       "--tool-call-parser", "qwen3_xml", "--enable-auto-tool-choice"],
        "memory": {
            # estimate, GB per decode step: ~10B active parameters at NVFP4 plus the BF16 router, shared experts and
            # lm-head; a DGX Spark user measured ~6 GB active per token for its INT4 build
            # (github.com/Entrpi/qwen3.5-122B-A10B-on-spark docs/FINDINGS.md)
            "bytes_read_per_step_gb": 6.0,
            "hub_facts": {
                "weights_bytes": 83_500_000_000,  # 83.5 GB: the write-up's figure on the Hub
                # Qwen/Qwen3.5-122B-A10B's text_config as the model cards of its quantizations state it
                # (huggingface.co/btbtyler09/Qwen3.5-122B-A10B-GPTQ-4bit: 48 layers, 36 linear + 12 full attention,
                # 3:1, 1 MTP layer; apxml.com/models/qwen35-122b-a10b: 32 heads, 2 KV heads of 256, hidden 3072;
                # Gated DeltaNet 16 key / 64 value heads of 128, conv kernel 4). Cross-checked: with these, the
                # planner's hybrid allocator gives the 2,240-token attention block a Spark's vLLM logged for it
                # (tests/capacity/test_catalog_facts.py)
                "config": {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                           "text_config": {"num_hidden_layers": 48, "full_attention_interval": 4,
                                           "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
                                           "hidden_size": 3072, "linear_num_key_heads": 16,
                                           "linear_num_value_heads": 64, "linear_key_head_dim": 128,
                                           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
                                           "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1,
                                           "num_experts": 256, "num_experts_per_tok": 8,
                                           "max_position_embeddings": 262144, "dtype": "bfloat16"}},
                "source": "model cards of Qwen/Qwen3.5-122B-A10B's quantizations (main), see group_data/gx10.py; "
                          "83.5 GB: model-decision-writeup.md",
            },
        },
    },
}
