"""vLLM's KV-cache allocator, done on paper: what a model's KV cache is made of (its layer facts, from the catalog or
a checkpoint's config.json) and how one vLLM engine divides a KV budget into blocks and requests.

Per-token KV = full-attention layers x 2 x KV heads x head dim x bytes of the KV dtype. Hybrid models count only
their full-attention layers (Qwen3.8-27B: 16 of 64, 4 KV heads, head dim 256: 64 KiB/token BF16, 32 KiB FP8);
linear-attention (Gated DeltaNet) layers hold a fixed state per sequence instead, whatever the context length.
vLLM's hybrid allocator keeps one pool of equal pages, and `kv_capacity` follows it:

* the attention block size is raised (in steps of 16 tokens) until one attention page holds one GDN state,
  and GDN pages are padded up to it (Qwen FP8: 1,600-token blocks); plain attention models use 16-token blocks;
* layers are grouped into KV-cache groups of equal size (the smallest layer count of a kind, or the largest when
  the counts are within 25 %), padding the remainder; one block of memory is group_size pages;
* a request needs ceil(max_context / block) blocks in each full-attention group, 1 + num_speculative_tokens
  blocks in each GDN group (one more with prefix caching, which is on unless --no-enable-prefix-caching), and
  ceil((window - 1 + max_num_batched_tokens) / block) + 1 in each sliding-window group;
* concurrency = blocks / blocks per request; tokens = int(concurrency x max_context), vLLM's group-aware figure.

Draft layers share the pool as full-attention layers: the MTP head's attention layer (method "mtp": the config's
mtp_num_hidden_layers, else MemoryFacts draft_attention_layers) and a DFlash draft's layers (method "dflash":
MemoryFacts draft_attention_layers), counted with the target's KV heads and head dim. Sliding-window layers are
counted when the window is known (the config's sliding_window, or MemoryFacts sliding_window); linear layers of
neither a known state nor a known window are left out (the estimate is then an upper bound). Layer facts come from
the checkpoint's config.json when one is given or found in a local Hugging Face cache (layer_types /
full_attention_interval / text_config are read), else from the catalog.

Pure logic: no pyinfra, no printing.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from sparkctl.config.catalog import ModelSpec
from sparkctl.config.lock import cache_dirname
from sparkctl.errors import SettingError

DEFAULT_BLOCK_SIZE = 16  # vLLM's attention block on CUDA, tokens
BLOCK_ALIGNMENT = 16  # a hybrid model's attention block grows in steps of this many tokens
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # vLLM's default chunk, tokens: a sliding-window group holds window + chunk

DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "float8_e4m3fn": 1, "int8": 1,
}
FULL_TYPES = {"full_attention", "attention", "global_attention", "full"}
LINEAR_TYPES = {"linear_attention", "gated_delta_net", "mamba", "mamba2", "linear"}
SLIDING_TYPES = {"sliding_attention", "sliding_window_attention", "local_attention", "chunked_attention"}
# speculative methods whose draft layers keep a full-context KV in the target's pool: the MTP head's attention layer,
# a DFlash draft's layers (vLLM's laguna_dflash.py drops their sliding window from the KV allocation: "DFlash
# inserts verifier-context K/V at absolute cache slots"), and a separate draft model's layers (measured on the
# simulated Spark's vLLM CPU build: a 1-layer draft beside a 2-layer target left 2/3 of the tokens, 87.3K of 131K)
DRAFT_IN_POOL = ("mtp", "dflash", "draft_model")


def dtype_bytes(name: str | None, default: int = 2) -> int:
    if not name:
        return default
    name = str(name).lower().removeprefix("torch.")
    return DTYPE_BYTES.get(name, default)


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int = 2) -> int:
    """Bytes per KV element: "auto" is the model's dtype (BF16 for every catalog model), fp8* is one byte."""
    if not kv_cache_dtype or kv_cache_dtype == "auto":
        return model_dtype_bytes
    return dtype_bytes(kv_cache_dtype, model_dtype_bytes)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def floor_to(value: float, step: float = 0.1) -> float:
    """value rounded down to a step (a KV budget that fits: 0.1 GiB)."""
    return math.floor(round(value / step, 6)) * step


def ceil_to(value: float, step: float = 0.1) -> float:
    """value rounded up to a step (a KV budget that holds one request: 0.1 GiB)."""
    return math.ceil(round(value / step, 6)) * step


def num_speculative_tokens(spec: ModelSpec) -> int:
    return int((spec.speculative or {}).get("num_speculative_tokens", 0) or 0)


def spec_method(spec: ModelSpec) -> str:
    return str((spec.speculative or {}).get("method", "") or "")


# --- layer facts ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvLayout:
    """What a model's KV cache is made of (for one whole engine, before tensor-parallel splitting)."""

    full_layers: int  # the model's full-attention layers (KV grows with context)
    kv_heads: int
    head_dim: int
    kv_dtype_bytes: int
    state_layers: int = 0  # linear-attention (GDN/Mamba) layers with a fixed state per sequence
    state_bytes_per_layer: int = 0  # that state, per sequence per layer, bytes
    window_layers: int = 0  # sliding-window layers of known window
    window_tokens: int = 0
    draft_layers: int = 0  # speculative (MTP) attention layers in the same pool, on top of full_layers
    source: str = "catalog"

    def bytes_per_token_per_layer(self, tp: int = 1) -> int:
        return 2 * max(1, self.kv_heads // tp) * self.head_dim * self.kv_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Full-attention KV per token of the model's own layers (the issue's 64 KiB BF16 / 32 KiB FP8 for Qwen)."""
        return self.full_layers * self.bytes_per_token_per_layer()

    @property
    def pool_full_layers(self) -> int:
        return self.full_layers + self.draft_layers


def layout_from_catalog(spec: ModelSpec) -> KvLayout | None:
    """Layer facts from the catalog's MemoryFacts; None when they are missing (embedders, unknown models)."""
    m = spec.memory
    if m.full_attention_layers <= 0 or m.kv_heads <= 0 or m.head_dim <= 0:
        return None
    # linear layers of neither a known state nor a known window are left out: the estimate is then an upper bound
    state_layers = m.linear_attention_layers if m.linear_state_bytes_per_layer > 0 else 0
    window_layers = m.linear_attention_layers if not state_layers and m.sliding_window > 0 else 0
    return KvLayout(
        full_layers=m.full_attention_layers, kv_heads=m.kv_heads, head_dim=m.head_dim,
        kv_dtype_bytes=kv_dtype_bytes(spec.kv_cache_dtype),
        state_layers=state_layers, state_bytes_per_layer=m.linear_state_bytes_per_layer if state_layers else 0,
        window_layers=window_layers, window_tokens=m.sliding_window if window_layers else 0,
        draft_layers=m.draft_attention_layers if spec_method(spec) in DRAFT_IN_POOL else 0,
        source="catalog")


def layout_from_config(config: dict, spec: ModelSpec, source: str = "config.json") -> KvLayout:
    """Layer facts from a checkpoint's config.json (a multimodal checkpoint's text_config wins over the top level)."""
    conf = {**config, **(config.get("text_config") or {})}
    try:
        n_layers = int(conf["num_hidden_layers"])
        heads = int(conf["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SettingError(f"{source} of {spec.key}", f"missing {exc}", "a config.json with num_hidden_layers and "
                           "num_attention_heads (under text_config for a multimodal checkpoint)") from None
    n_full, n_linear, n_window = _layer_counts(conf, n_layers)
    model_bytes = dtype_bytes(conf.get("torch_dtype") or conf.get("dtype") or config.get("torch_dtype"), 2)
    state = _linear_state_bytes(conf, model_bytes, num_speculative_tokens(spec)) if n_linear else 0
    window = int(conf.get("sliding_window") or 0) if n_window else 0
    return KvLayout(
        full_layers=n_full, kv_heads=int(conf.get("num_key_value_heads") or heads),
        head_dim=int(conf.get("head_dim") or int(conf["hidden_size"]) // heads),
        kv_dtype_bytes=kv_dtype_bytes(spec.kv_cache_dtype, model_bytes),
        state_layers=n_linear if state else 0, state_bytes_per_layer=state,
        window_layers=n_window if window else 0, window_tokens=window,
        draft_layers=_draft_layers(conf, spec), source=source)


def _layer_counts(conf: dict, n_layers: int) -> tuple[int, int, int]:
    """(full-attention, linear, sliding-window) layers: from layer_types, else full_attention_interval, else all
    full."""
    types = conf.get("layer_types")
    if isinstance(types, list) and types:
        types = [str(t).lower() for t in types[:n_layers]]
        return (sum(t in FULL_TYPES for t in types), sum(t in LINEAR_TYPES for t in types),
                sum(t in SLIDING_TYPES for t in types))
    if conf.get("full_attention_interval"):
        n_full = n_layers // int(conf["full_attention_interval"])
        return n_full, n_layers - n_full, 0
    return n_layers, 0, 0


def _linear_state_bytes(conf: dict, model_bytes: int, num_spec: int) -> int:
    """A Gated DeltaNet layer's fixed state per sequence, bytes (0 when the config does not give its shape)."""
    gdn = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")
    if not all(conf.get(k) for k in gdn):
        return 0
    nk, nv, dk, dv = (int(conf[k]) for k in gdn)
    conv_kernel = int(conf.get("linear_conv_kernel_dim") or 4)
    conv_dim = dk * nk * 2 + dv * nv  # q, k and v pass the short convolution
    conv = conv_dim * (conv_kernel - 1 + num_spec) * model_bytes  # conv state in the model dtype
    ssm = nv * dv * dk * dtype_bytes(conf.get("mamba_ssm_dtype"), model_bytes)  # recurrent state
    return conv + ssm


def _draft_layers(conf: dict, spec: ModelSpec) -> int:
    if spec_method(spec) == "mtp":
        return int(conf.get("mtp_num_hidden_layers") or conf.get("num_nextn_predict_layers") or 0)
    if spec_method(spec) in DRAFT_IN_POOL:  # a separate draft checkpoint: its layers from the catalog
        return spec.memory.draft_attention_layers
    return 0


def find_local_config(spec: ModelSpec, model_store: str = "") -> Path | None:
    """config.json of the checkpoint in a local Hugging Face cache (MODEL_STORE/hub, HF_HUB_CACHE, HF_HOME/hub,
    ~/.cache/huggingface/hub), newest snapshot first; None when there is none."""
    roots: list[Path] = []
    if model_store:
        roots.append(Path(model_store) / "hub")
    if os.environ.get("HF_HUB_CACHE"):
        roots.append(Path(os.environ["HF_HUB_CACHE"]))
    hf_home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    roots.append(hf_home / "hub")
    dirname = cache_dirname(spec.checkpoint.repo)
    for root in roots:
        found = sorted((root / dirname / "snapshots").glob("*/config.json"),
                       key=lambda p: (p.stat().st_mtime, str(p)), reverse=True) if (root / dirname).is_dir() else []
        if found:
            return found[0]
    return None


def load_config(path: str | Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SettingError("checkpoint config", str(path), "a readable config.json", str(exc)) from None


def model_layout(spec: ModelSpec, config: dict | None = None, config_source: str = "config.json") -> KvLayout | None:
    if config is not None:
        return layout_from_config(config, spec, config_source)
    return layout_from_catalog(spec)


# --- the KV pool -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvCapacity:
    """One vLLM engine's KV pool (per rank when tensor-parallel; the counts are the engine's)."""

    kv_bytes: int  # the budget per rank
    max_context: int
    block_size: int  # tokens per attention block
    page_bytes: int  # bytes of one block of one layer
    group_size: int  # layers per KV-cache group
    groups: dict  # {"full": n, "state": n, "window": n} KV-cache groups of each kind
    num_blocks: int
    blocks_per_request: int  # for one max_context request
    concurrency: float  # max_context requests the pool holds at once
    tokens: int  # int(concurrency x max_context): vLLM's "GPU KV cache size: N tokens"
    token_slots: int  # num_blocks x block_size: vllm:cache_config_info's num_gpu_blocks x block_size
    min_kv_bytes: int  # smallest budget that holds one max_context request


def kv_capacity(layout: KvLayout, kv_bytes: int, max_context: int, *, tp: int = 1, num_speculative_tokens: int = 0,
                prefix_caching: bool = True, mamba_cache_mode: str | None = None, block_size: int | None = None,
                max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> KvCapacity:
    """How vLLM's (hybrid) KV-cache manager divides a budget of kv_bytes (per rank) into blocks and requests."""
    per_layer_token = layout.bytes_per_token_per_layer(tp)
    state = cdiv(layout.state_bytes_per_layer, tp) if layout.state_layers else 0
    if state:
        tokens_per_state = cdiv(state, per_layer_token)
        bs = BLOCK_ALIGNMENT * cdiv(tokens_per_state, BLOCK_ALIGNMENT)
        bs = max(bs, block_size or 0)
    else:
        bs = block_size or DEFAULT_BLOCK_SIZE
    page = bs * per_layer_token
    counts = {"full": layout.pool_full_layers, "state": layout.state_layers if state else 0,
              "window": layout.window_layers}
    counts = {k: v for k, v in counts.items() if v > 0}
    lo, hi = min(counts.values()), max(counts.values())
    group_size = hi if hi < 1.25 * lo else lo
    groups = {k: cdiv(v, group_size) for k, v in counts.items()}
    num_blocks = max(0, kv_bytes // page // group_size)
    mode = mamba_cache_mode or ("align" if prefix_caching else "none")
    per_group = {
        "full": cdiv(max_context, bs),
        "state": (cdiv(max_context, bs) if mode == "all"
                  else (2 if mode == "align" else 1) + num_speculative_tokens),
        "window": cdiv(min(layout.window_tokens - 1 + max_num_batched_tokens, max_context), bs) + 1,
    }
    per_request = sum(groups[k] * per_group[k] for k in groups)
    concurrency = num_blocks / per_request
    return KvCapacity(kv_bytes=kv_bytes, max_context=max_context, block_size=bs, page_bytes=page,
                      group_size=group_size, groups=groups, num_blocks=num_blocks, blocks_per_request=per_request,
                      concurrency=concurrency, tokens=int(concurrency * max_context), token_slots=num_blocks * bs,
                      min_kv_bytes=per_request * group_size * page)


def serve_options(spec: ModelSpec, common_args: list[str]) -> dict:
    """The `vllm serve` flags that change the KV arithmetic, read from the model's and the common arguments
    (VLLM_COMMON_ARGS)."""
    args = [str(a) for a in (*spec.extra_args, *common_args)]
    opts = {"prefix_caching": True, "mamba_cache_mode": None, "block_size": None}

    def value(i: int, a: str) -> str | None:
        if "=" in a:
            return a.split("=", 1)[1]
        return args[i + 1] if i + 1 < len(args) else None

    for i, a in enumerate(args):
        name = a.split("=", 1)[0]
        if name == "--no-enable-prefix-caching":
            opts["prefix_caching"] = False
        elif name == "--enable-prefix-caching":
            opts["prefix_caching"] = True
        elif name == "--mamba-cache-mode":
            opts["mamba_cache_mode"] = value(i, a)
        elif name == "--block-size" and (v := value(i, a)) and v.isdigit():
            opts["block_size"] = int(v)
    return opts
