"""Per-box choices for every GX10 (group `gx10`). The flip is one line: CODING_MODEL.

Flip for one run without editing:  pyinfra inventory.py deploy.py --data CODING_MODEL=laguna-s-2.1
"""

CODING_MODEL = "qwen3.8-27b"  # the coding model served as CODER_SERVED_NAME: qwen3.8-27b | laguna-s-2.1

CODER_KV_CACHE_GIB = {  # KV-cache budget of each coding model (--kv-cache-memory-bytes), GiB
    "qwen3.8-27b": 36,  # 3.9 concurrent 262K-token requests, measured
    "laguna-s-2.1": 12,  # 1.2 concurrent 262K-token requests
}

EMBEDDERS = [  # the two embedding models, served with --runner pooling on EMBEDDER_PORTS
    {"model": "qwen3-embedding-0.6b", "kv_cache_gib": 2},  # kv_cache_gib: its KV budget, GiB
    {"model": "bge-m3", "kv_cache_gib": 2},
]
