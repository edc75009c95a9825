"""The capacity planner: what the weights leave free on a unified-memory box, and how many full-context requests
the KV cache then holds at once. Pure logic: no pyinfra, no printing (`sparkctl.capacity.cli` prints, the deploy's
preflight calls `check_fits`, its health step compares with `sparkctl.capacity.vllm_reported`).

Memory model (GiB = 2**30 bytes; one box)
-----------------------------------------
      usable                     BOX_USABLE_MEMORY_GIB (what CUDA reports on a GX10: 121.6)
    - OS reserve                 OS_RESERVE_GIB
    - each embedder              catalog resident_gib + its EMBEDDERS[i]["kv_cache_gib"]
    = available to the coder
    - coder resident             catalog MemoryFacts.resident_gib: weights + runtime, *excluding* the KV budget
    = free_gib                   "free after the embedders": what the coder's KV budget may take
    - coder KV budget            CODER_KV_CACHE_GIB[model] (--kv-cache-memory-bytes)
    = headroom_gib               must be >= 0, or the configuration is refused

Reconciling the production write-up: "Qwen at 44 GiB resident leaves 62 GiB free; Laguna at 98 GiB leaves 8".
Qwen's 44 GiB cannot include its 36 GiB KV (8 GiB is less than a 27B model's weights), and its 62 GiB is where
the KV budget goes ("a budget three times the size, with room for four"). Laguna's ~98 GiB was measured "at 262K
context", i.e. with its 12 GiB KV allocated, and its 8 GiB is what is left after that KV: had the 98 excluded the
KV, the 12 GiB budget Laguna ran with in production would not have fitted in 8. So one consistent reading is:
resident excludes KV for both (Qwen 44, Laguna 98 - 12 = 86), embedders + OS reserve = 121.6 - 44 - 62 = 15.6 GiB,
Qwen's free_gib = 62, and Laguna's free_gib = 20 of which its 12 GiB KV leaves headroom_gib = 8
(footprint_gib = resident + KV = 98). The catalog's embedder residents are set so the 15.6 adds up.

KV arithmetic (per vLLM engine)
-------------------------------
Per-token KV = full-attention layers x 2 x KV heads x head dim x bytes of the KV dtype. Hybrid models count only
their full-attention layers (Qwen3.8-27B: 16 of 64, 4 KV heads, head dim 256: 64 KiB/token BF16, 32 KiB FP8);
linear-attention (Gated DeltaNet) layers hold a fixed state per sequence instead, whatever the context length.
vLLM's hybrid allocator keeps one pool of equal pages, and this planner follows it:

* the attention block size is raised (in steps of 16 tokens) until one attention page holds one GDN state,
  and GDN pages are padded up to it (Qwen FP8: 1,600-token blocks); plain attention models use 16-token blocks;
* layers are grouped into KV-cache groups of equal size (the smallest layer count of a kind, or the largest when
  the counts are within 25 %), padding the remainder; one block of memory is group_size pages;
* a request needs ceil(max_context / block) blocks in each full-attention group, 1 + num_speculative_tokens
  blocks in each GDN group (one more with prefix caching, which is on unless --no-enable-prefix-caching), and
  ceil((window - 1 + max_num_batched_tokens) / block) + 1 in each sliding-window group;
* concurrency = blocks / blocks per request; tokens = int(concurrency x max_context), vLLM's group-aware figure.

The MTP head's attention layer shares the pool (a speculative method of "mtp" adds MemoryFacts
draft_attention_layers, or the config's mtp_num_hidden_layers). With it, Qwen's production configuration
(36 GiB, FP8, MTP depth 3, prefix caching) gives 693 blocks of 1,600 tokens and 179 blocks per request:
3.87 x 262,144 = 1,014,892 tokens, the figure vLLM logged. Sliding-window layers are counted only when a
checkpoint's config.json gives the window; from catalog facts alone they are left out (Laguna's estimate is then
an upper bound). Layer facts come from the checkpoint's config.json when one is given or found in a local
Hugging Face cache (layer_types / full_attention_interval / text_config are read), else from the catalog.

Several Sparks (--sparks N): "replicas" runs N identical boxes (capacity adds up); "split" gives each coding model
its own box, where its KV budget becomes all the memory the box has left (unless a KV budget is given);
"tensor-parallel" runs one engine over N boxes: the weights (MemoryFacts.weights_gib) are divided by N on each box,
the runtime part of the resident figure is not, and the KV budget is per box with each box holding 1/N of every
token's KV heads, so the pool's tokens add up across boxes.

Decode roofline: BOX_MEMORY_BANDWIDTH_GBPS / weight bytes read per decode step x tokens per step (speculative
decoding), single stream at short context; `roofline_full_context_tokens_per_s` also reads one max-context
sequence's KV and state every step. Both are upper bounds, labelled estimates; the bench probe's measured
single-stream rate is shown beside them where production measured one.

JSON (`BoxPlan.to_json()`, printed by `python -m sparkctl plan --json`; stable, additions only)
------------------------------------------------------------------------------------------------
{
  "schema": "sparkctl.plan/1",
  "box": {"usable_gib", "os_reserve_gib", "embedders": [{"name", "resident_gib", "kv_gib", "total_gib",
          "resident_source"}], "embedders_gib", "available_gib" (for the coder, after OS reserve and embedders),
          "bandwidth_gbps", "sparks", "topology"},
  "models": [{
    "name"                    catalog key ("qwen3.8-27b")
    "title"
    "topology", "sparks"      as planned; "engines": vLLM engines serving this model (replicas: sparks, else 1)
    "boxes"                   boxes this model occupies
    "resident_gib"            per box, excluding KV; "resident_source": "measured" | "estimate"
    "free_gib"                per box, after OS reserve and embedders, before KV
    "kv_gib"                  KV budget per box (--kv-cache-memory-bytes); "kv_setting": where it came from
    "headroom_gib"            free_gib - kv_gib; "footprint_gib": resident_gib + kv_gib
    "max_kv_gib"              largest KV budget that fits (= free_gib)
    "fits"                    bool: headroom >= 0 and the KV holds at least one max-context request
    "problems"                list of strings (why it does not fit, estimate/measurement disagreements)
    "notes"                   list of strings (what the figures leave out)
    "max_context"             tokens per request (--max-model-len)
    "kv_bytes_per_token"      full-attention KV per token (the model's own layers, one engine, all boxes)
    "kv_tokens"               cached tokens, all engines together (measured when known, else estimate)
    "concurrent_requests"     concurrent max_context requests, all engines together (ditto); with --sparks 2 the
                              pair's total
    "source"                  "measured" | "estimate": which of the two kv_tokens / concurrent_requests are
    "kv_tokens_estimate", "kv_tokens_measured" (null when unknown), and the same for concurrent_requests
    "engine_kv_tokens_estimate"        what one vLLM engine should log as "GPU KV cache size: N tokens"
    "engine_concurrent_requests_estimate"  ... and as "Maximum concurrency for L tokens per request: X"
    "engine_kv_token_slots_estimate"   num_gpu_blocks x block_size (vllm:cache_config_info labels)
    "block_size", "num_blocks", "blocks_per_request"   per engine, estimate (null when layer facts are missing)
    "min_kv_gib"              smallest KV budget that holds one max-context request (null when unknown)
    "layout_source"           "catalog" or "config.json:<path>"
    "roofline_tokens_per_s", "roofline_full_context_tokens_per_s"  estimates (tokens/s, one stream)
    "measured_decode_tokens_per_s"     bench probe, single stream (null when not measured)
  }]
}
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from sparkctl.config.catalog import CODER, EMBEDDER, ModelSpec, lookup
from sparkctl.config.lock import cache_dirname
from sparkctl.errors import SettingError, SparkctlError

GIB = 2**30
SCHEMA = "sparkctl.plan/1"
TOPOLOGIES = ("replicas", "split", "tensor-parallel")
DEFAULT_BLOCK_SIZE = 16  # vLLM's attention block on CUDA, tokens
BLOCK_ALIGNMENT = 16  # a hybrid model's attention block grows in steps of this many tokens
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192  # when group data gives none (sliding-window groups hold window + chunk)
MEASURED_TOLERANCE = 0.10  # estimate vs measured KV tokens: a larger gap is reported as a problem of the facts
_EPS = 1e-9

# Single-stream decode on the bench probe (production write-up), by checkpoint: keyed by repository so a stand-in
# checkpoint under the same catalog key (the simulated Spark) never inherits a real model's figure.
MEASURED_DECODE_TOKENS_PER_S = {
    "unsloth/Qwen3.8-27B-NVFP4": 18.3,
    "poolside/Laguna-S-2.1-NVFP4": 46.5,
}

DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "float8_e4m3fn": 1, "int8": 1,
}
FULL_TYPES = {"full_attention", "attention", "global_attention", "full"}
LINEAR_TYPES = {"linear_attention", "gated_delta_net", "mamba", "mamba2", "linear"}
SLIDING_TYPES = {"sliding_attention", "sliding_window_attention", "local_attention", "chunked_attention"}


class PlanError(SparkctlError):
    """A configuration whose memory does not add up; the message lists the numbers and the settings to change."""


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


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _num_speculative_tokens(spec: ModelSpec) -> int:
    return int((spec.speculative or {}).get("num_speculative_tokens", 0) or 0)


def _spec_method(spec: ModelSpec) -> str:
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
    # linear layers of unknown state (Laguna's sliding-window layers) are left out: the estimate is an upper bound
    state_layers = m.linear_attention_layers if m.linear_state_bytes_per_layer > 0 else 0
    return KvLayout(
        full_layers=m.full_attention_layers, kv_heads=m.kv_heads, head_dim=m.head_dim,
        kv_dtype_bytes=kv_dtype_bytes(spec.kv_cache_dtype),
        state_layers=state_layers, state_bytes_per_layer=m.linear_state_bytes_per_layer if state_layers else 0,
        draft_layers=m.draft_attention_layers if _spec_method(spec) == "mtp" else 0,
        source="catalog")


def layout_from_config(config: dict, spec: ModelSpec, source: str = "config.json") -> KvLayout:
    """Layer facts from a checkpoint's config.json (a multimodal checkpoint's text_config wins over the top level)."""
    cfg = {**config, **(config.get("text_config") or {})}
    try:
        n_layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SettingError(f"{source} of {spec.key}", f"missing {exc}", "a config.json with num_hidden_layers and "
                           "num_attention_heads (under text_config for a multimodal checkpoint)") from None
    types = cfg.get("layer_types")
    n_full = n_linear = n_window = 0
    if isinstance(types, list) and types:
        types = [str(t).lower() for t in types[:n_layers]]
        n_full = sum(t in FULL_TYPES for t in types)
        n_linear = sum(t in LINEAR_TYPES for t in types)
        n_window = sum(t in SLIDING_TYPES for t in types)
    elif cfg.get("full_attention_interval"):
        n_full = n_layers // int(cfg["full_attention_interval"])
        n_linear = n_layers - n_full
    else:
        n_full = n_layers
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    model_bytes = dtype_bytes(cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype"), 2)
    num_spec = _num_speculative_tokens(spec)
    state = 0
    gdn = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim")
    if n_linear and all(cfg.get(k) for k in gdn):
        nk, nv, dk, dv = (int(cfg[k]) for k in gdn)
        conv_kernel = int(cfg.get("linear_conv_kernel_dim") or 4)
        conv_dim = dk * nk * 2 + dv * nv  # q, k and v pass the short convolution
        conv = conv_dim * (conv_kernel - 1 + num_spec) * model_bytes  # conv state in the model dtype
        ssm = nv * dv * dk * dtype_bytes(cfg.get("mamba_ssm_dtype"), model_bytes)  # recurrent state
        state = conv + ssm
    window = int(cfg.get("sliding_window") or 0) if n_window else 0
    draft = 0
    if _spec_method(spec) == "mtp":
        draft = int(cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 0)
    return KvLayout(
        full_layers=n_full, kv_heads=kv_heads, head_dim=head_dim,
        kv_dtype_bytes=kv_dtype_bytes(spec.kv_cache_dtype, model_bytes),
        state_layers=n_linear if state else 0, state_bytes_per_layer=state,
        window_layers=n_window if window else 0, window_tokens=window,
        draft_layers=draft, source=source)


def find_local_config(spec: ModelSpec, data: dict | None = None) -> Path | None:
    """config.json of the checkpoint in a local Hugging Face cache (MODEL_STORE/hub, HF_HUB_CACHE, HF_HOME/hub,
    ~/.cache/huggingface/hub), newest snapshot first; None when there is none."""
    roots: list[Path] = []
    if data and data.get("MODEL_STORE"):
        roots.append(Path(data["MODEL_STORE"]) / "hub")
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
    state = _cdiv(layout.state_bytes_per_layer, tp) if layout.state_layers else 0
    if state:
        tokens_per_state = _cdiv(state, per_layer_token)
        bs = BLOCK_ALIGNMENT * _cdiv(tokens_per_state, BLOCK_ALIGNMENT)
        bs = max(bs, block_size or 0)
    else:
        bs = block_size or DEFAULT_BLOCK_SIZE
    page = bs * per_layer_token
    counts = {"full": layout.pool_full_layers, "state": layout.state_layers if state else 0,
              "window": layout.window_layers}
    counts = {k: v for k, v in counts.items() if v > 0}
    lo, hi = min(counts.values()), max(counts.values())
    group_size = hi if hi < 1.25 * lo else lo
    groups = {k: _cdiv(v, group_size) for k, v in counts.items()}
    num_blocks = max(0, kv_bytes // page // group_size)
    mode = mamba_cache_mode or ("align" if prefix_caching else "none")
    per_group = {
        "full": _cdiv(max_context, bs),
        "state": (_cdiv(max_context, bs) if mode == "all"
                  else (2 if mode == "align" else 1) + num_speculative_tokens),
        "window": _cdiv(min(layout.window_tokens - 1 + max_num_batched_tokens, max_context), bs) + 1,
    }
    per_request = sum(groups[k] * per_group[k] for k in groups)
    concurrency = num_blocks / per_request
    return KvCapacity(kv_bytes=kv_bytes, max_context=max_context, block_size=bs, page_bytes=page,
                      group_size=group_size, groups=groups, num_blocks=num_blocks, blocks_per_request=per_request,
                      concurrency=concurrency, tokens=int(concurrency * max_context), token_slots=num_blocks * bs,
                      min_kv_bytes=per_request * group_size * page)


def serve_options(spec: ModelSpec, data: dict) -> dict:
    """The `vllm serve` flags that change the KV arithmetic, read from the model's and the common arguments."""
    args = [str(a) for a in (*spec.extra_args, *(data.get("VLLM_COMMON_ARGS") or []))]
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


# --- the box --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbedderUse:
    name: str
    setting: str  # "EMBEDDERS[0]"
    resident_gib: float
    kv_gib: float
    resident_source: str

    @property
    def total_gib(self) -> float:
        return self.resident_gib + self.kv_gib


@dataclass(frozen=True)
class Box:
    usable_gib: float
    os_reserve_gib: float
    embedders: tuple[EmbedderUse, ...]
    bandwidth_gbps: float

    @property
    def embedders_gib(self) -> float:
        return sum(e.total_gib for e in self.embedders)

    @property
    def available_gib(self) -> float:
        """What the coding model (resident + KV) may use."""
        return self.usable_gib - self.os_reserve_gib - self.embedders_gib

    def to_json(self) -> dict:
        return {"usable_gib": _r(self.usable_gib), "os_reserve_gib": _r(self.os_reserve_gib),
                "embedders": [{"name": e.name, "resident_gib": _r(e.resident_gib), "kv_gib": _r(e.kv_gib),
                               "total_gib": _r(e.total_gib), "resident_source": e.resident_source}
                              for e in self.embedders],
                "embedders_gib": _r(self.embedders_gib), "available_gib": _r(self.available_gib),
                "bandwidth_gbps": self.bandwidth_gbps}


def _number(data: dict, name: str, minimum: float = 0.0, strict: bool = False) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum or (strict and
                                                                                            value <= minimum):
        raise SettingError(name, value, f"a number {'>' if strict else '>='} {minimum:g}")
    return float(value)


def box_from_data(data: dict, catalog: dict[str, ModelSpec]) -> Box:
    embedders = []
    entries = data.get("EMBEDDERS") or []
    if not isinstance(entries, (list, tuple)):
        raise SettingError("EMBEDDERS", entries, 'a list of {"model": <catalog key>, "kv_cache_gib": <GiB>}')
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "model" not in entry:
            raise SettingError(f"EMBEDDERS[{i}]", entry, '{"model": <catalog key>, "kv_cache_gib": <GiB>}')
        spec = lookup(catalog, f"EMBEDDERS[{i}].model", entry["model"], EMBEDDER)
        kv = entry.get("kv_cache_gib")
        if isinstance(kv, bool) or not isinstance(kv, (int, float)) or kv < 0:
            raise SettingError(f"EMBEDDERS[{i}].kv_cache_gib", kv, "a KV budget in GiB (a number >= 0)")
        embedders.append(EmbedderUse(name=spec.key, setting=f"EMBEDDERS[{i}]", resident_gib=spec.memory.resident_gib,
                                     kv_gib=float(kv), resident_source=spec.memory.resident_source))
    return Box(usable_gib=_number(data, "BOX_USABLE_MEMORY_GIB", strict=True),
               os_reserve_gib=_number(data, "OS_RESERVE_GIB"),
               embedders=tuple(embedders),
               bandwidth_gbps=_number(data, "BOX_MEMORY_BANDWIDTH_GBPS", strict=True)
               if "BOX_MEMORY_BANDWIDTH_GBPS" in data else 273.0)


# --- one model on the box ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelPlan:
    name: str
    title: str
    topology: str
    sparks: int
    engines: int  # vLLM engines serving the model
    boxes: int  # boxes it occupies
    tp: int  # tensor-parallel ranks per engine
    box: Box
    resident_gib: float  # per box, excluding KV
    resident_source: str
    free_gib: float  # per box, after OS reserve and embedders, before KV
    kv_gib: float  # per box
    kv_setting: str  # where kv_gib came from
    max_context: int
    layout: KvLayout | None
    capacity: KvCapacity | None  # per engine, estimate
    measured_engine_kv_tokens: int | None  # what vLLM reported for this budget on one box, if known
    roofline_tokens_per_s: float | None
    roofline_full_context_tokens_per_s: float | None
    measured_decode_tokens_per_s: float | None
    problems: tuple[str, ...] = ()  # why it is refused, or why its facts disagree with a measurement
    notes: tuple[str, ...] = ()  # what the figures leave out

    # derived figures ---------------------------------------------------------------------------------------------
    @property
    def headroom_gib(self) -> float:
        return self.free_gib - self.kv_gib

    @property
    def footprint_gib(self) -> float:
        return self.resident_gib + self.kv_gib

    @property
    def max_kv_gib(self) -> float:
        return max(0.0, self.free_gib)

    @property
    def min_kv_gib(self) -> float | None:
        return self.capacity.min_kv_bytes / GIB if self.capacity else None

    @property
    def kv_bytes_per_token(self) -> int | None:
        return self.layout.kv_bytes_per_token if self.layout else None

    @property
    def kv_tokens_estimate(self) -> int | None:
        return self.capacity.tokens * self.engines if self.capacity else None

    @property
    def concurrent_requests_estimate(self) -> float | None:
        return self.capacity.concurrency * self.engines if self.capacity else None

    @property
    def kv_tokens_measured(self) -> int | None:
        return self.measured_engine_kv_tokens * self.engines if self.measured_engine_kv_tokens else None

    @property
    def concurrent_requests_measured(self) -> float | None:
        t = self.kv_tokens_measured
        return t / self.max_context if t else None

    @property
    def source(self) -> str:
        return "measured" if self.measured_engine_kv_tokens else "estimate"

    @property
    def kv_tokens(self) -> int | None:
        return self.kv_tokens_measured or self.kv_tokens_estimate

    @property
    def concurrent_requests(self) -> float | None:
        m = self.concurrent_requests_measured
        return m if m is not None else self.concurrent_requests_estimate

    @property
    def fits(self) -> bool:
        return self.headroom_gib >= -_EPS and (self.capacity is None or self.capacity.concurrency >= 1.0)

    def to_json(self) -> dict:
        cap = self.capacity
        return {
            "name": self.name, "title": self.title, "topology": self.topology, "sparks": self.sparks,
            "engines": self.engines, "boxes": self.boxes,
            "resident_gib": _r(self.resident_gib), "resident_source": self.resident_source,
            "free_gib": _r(self.free_gib), "kv_gib": _r(self.kv_gib), "kv_setting": self.kv_setting,
            "headroom_gib": _r(self.headroom_gib), "footprint_gib": _r(self.footprint_gib),
            "max_kv_gib": _r(self.max_kv_gib), "fits": self.fits,
            "problems": list(self.problems), "notes": list(self.notes),
            "max_context": self.max_context, "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_tokens": self.kv_tokens, "concurrent_requests": _r(self.concurrent_requests, 2),
            "source": self.source,
            "kv_tokens_estimate": self.kv_tokens_estimate, "kv_tokens_measured": self.kv_tokens_measured,
            "concurrent_requests_estimate": _r(self.concurrent_requests_estimate, 2),
            "concurrent_requests_measured": _r(self.concurrent_requests_measured, 2),
            "engine_kv_tokens_estimate": cap.tokens if cap else None,
            "engine_concurrent_requests_estimate": _r(cap.concurrency, 2) if cap else None,
            "engine_kv_token_slots_estimate": cap.token_slots if cap else None,
            "block_size": cap.block_size if cap else None, "num_blocks": cap.num_blocks if cap else None,
            "blocks_per_request": cap.blocks_per_request if cap else None,
            "min_kv_gib": _r(self.min_kv_gib),
            "layout_source": self.layout.source if self.layout else None,
            "roofline_tokens_per_s": _r(self.roofline_tokens_per_s, 1),
            "roofline_full_context_tokens_per_s": _r(self.roofline_full_context_tokens_per_s, 1),
            "measured_decode_tokens_per_s": self.measured_decode_tokens_per_s,
        }


@dataclass(frozen=True)
class BoxPlan:
    box: Box
    sparks: int
    topology: str
    models: tuple[ModelPlan, ...] = field(default_factory=tuple)

    def model(self, name: str) -> ModelPlan:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "box": {**self.box.to_json(), "sparks": self.sparks, "topology": self.topology},
                "models": [m.to_json() for m in self.models]}


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value + 0.0, digits)


def _measured_tokens(spec: ModelSpec, kv_gib: float) -> int | None:
    for budget, tokens in (spec.memory.measured_kv_tokens or {}).items():
        try:
            if abs(float(budget) - kv_gib) < 1e-6 and int(tokens) > 0:
                return int(tokens)
        except (TypeError, ValueError):
            continue
    return None


def configured_kv_gib(data: dict, coding_model: str) -> float:
    table = data.get("CODER_KV_CACHE_GIB")
    setting = f"CODER_KV_CACHE_GIB[{coding_model!r}]"
    if not isinstance(table, dict) or coding_model not in table:
        raise SettingError(setting, None, "a KV budget in GiB for this coding model (group_data/gx10.py)")
    value = table[coding_model]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise SettingError(setting, value, "a KV budget in GiB (a number > 0)")
    return float(value)


def _floor(value: float, step: float = 0.1) -> float:
    return math.floor(round(value / step, 6)) * step


def plan_model(data: dict, catalog: dict[str, ModelSpec], coding_model: str, *, box: Box | None = None,
               kv_gib: float | None = None, sparks: int = 1, topology: str = "replicas",
               config: dict | None = None, config_source: str = "config.json") -> ModelPlan:
    """One coding model on the configured box (or boxes); kv_gib None: the group data's budget (split: all free)."""
    _check_topology(sparks, topology)
    spec = lookup(catalog, "coding model", coding_model, CODER)
    box = box or box_from_data(data, catalog)
    m = spec.memory
    tp = sparks if topology == "tensor-parallel" else 1
    engines = sparks if topology == "replicas" else 1
    boxes = {"replicas": sparks, "split": 1, "tensor-parallel": sparks}[topology]

    resident, resident_source = float(m.resident_gib), m.resident_source
    if tp > 1:
        weights = m.weights_gib if 0 < m.weights_gib <= resident else resident
        resident = resident - weights + weights / tp
        resident_source = "estimate"
    free = box.available_gib - resident

    if kv_gib is not None:
        kv, kv_setting = float(kv_gib), "--kv"
    elif topology == "split":
        kv, kv_setting = max(0.0, _floor(free)), "split: all the box has left"
    else:
        kv, kv_setting = configured_kv_gib(data, spec.key), f"CODER_KV_CACHE_GIB[{spec.key!r}]"
    if kv < 0:
        raise SettingError("KV budget", kv, "a number of GiB >= 0")

    layout = model_layout(spec, config, config_source)
    num_spec = _num_speculative_tokens(spec)
    capacity = None
    if layout is not None:
        opts = serve_options(spec, data)
        capacity = kv_capacity(layout, int(round(kv * GIB)), spec.max_model_len, tp=tp,
                               num_speculative_tokens=num_spec, prefix_caching=opts["prefix_caching"],
                               mamba_cache_mode=opts["mamba_cache_mode"], block_size=opts["block_size"],
                               max_num_batched_tokens=int(data.get("CODER_MAX_NUM_BATCHED_TOKENS")
                                                          or DEFAULT_MAX_NUM_BATCHED_TOKENS))
    measured = _measured_tokens(spec, kv) if tp == 1 else None

    bw = box.bandwidth_gbps * 1e9
    roofline = full_ctx = None
    if m.bytes_read_per_step_gb > 0:
        step = m.bytes_read_per_step_gb * 1e9 / tp
        roofline = bw / step * m.tokens_per_step
        if layout is not None:
            kv_read = layout.pool_full_layers * layout.bytes_per_token_per_layer(tp) * spec.max_model_len
            kv_read += layout.window_layers * layout.bytes_per_token_per_layer(tp) * min(layout.window_tokens,
                                                                                         spec.max_model_len)
            kv_read += layout.state_layers * _cdiv(layout.state_bytes_per_layer, tp)
            full_ctx = bw / (step + kv_read) * m.tokens_per_step
    measured_decode = MEASURED_DECODE_TOKENS_PER_S.get(spec.checkpoint.repo) if tp == 1 else None

    plan = ModelPlan(
        name=spec.key, title=spec.title, topology=topology, sparks=sparks, engines=engines, boxes=boxes, tp=tp,
        box=box, resident_gib=resident, resident_source=resident_source, free_gib=free, kv_gib=kv,
        kv_setting=kv_setting, max_context=spec.max_model_len, layout=layout, capacity=capacity,
        measured_engine_kv_tokens=measured, roofline_tokens_per_s=roofline,
        roofline_full_context_tokens_per_s=full_ctx, measured_decode_tokens_per_s=measured_decode)
    return _annotate(plan, spec)


def _annotate(plan: ModelPlan, spec: ModelSpec) -> ModelPlan:
    problems, notes = [], []
    if plan.headroom_gib < -_EPS:
        problems.append(f"resident {plan.resident_gib:.1f} GiB + KV {plan.kv_gib:.1f} GiB = {plan.footprint_gib:.1f}"
                        f" GiB, but only {plan.box.available_gib:.1f} GiB is left beside the OS reserve and the "
                        f"embedders ({-plan.headroom_gib:.1f} GiB over); the largest KV budget that fits is "
                        f"{_floor(plan.max_kv_gib):.1f} GiB")
    cap = plan.capacity
    if cap is not None and cap.concurrency < 1.0:
        problems.append(f"a {plan.kv_gib:g} GiB KV budget holds {cap.concurrency:.2f} requests of "
                        f"{plan.max_context:,} tokens: vLLM refuses to start below one; the smallest budget that "
                        f"holds one is {_ceil(cap.min_kv_bytes / GIB):.1f} GiB")
    if plan.layout is None:
        problems.append("no layer facts (catalog MemoryFacts or config.json): KV capacity unknown")
    if cap is not None and plan.measured_engine_kv_tokens:
        gap = abs(cap.tokens - plan.measured_engine_kv_tokens) / plan.measured_engine_kv_tokens
        if gap > MEASURED_TOLERANCE:
            problems.append(f"estimate {cap.tokens:,} KV tokens is {gap:.0%} from the measured "
                            f"{plan.measured_engine_kv_tokens:,}: check the layer facts in sparkctl/config/catalog.py")
    m = spec.memory
    if plan.layout is not None and plan.layout.source == "catalog" and m.linear_attention_layers and \
            not plan.layout.state_layers:
        notes.append(f"{m.linear_attention_layers} sliding-window layers have no per-sequence size in the catalog and "
                     f"are left out, so the KV capacity is an upper bound (its config.json's sliding_window refines "
                     f"it)")
    if plan.tp > 1:
        notes.append(f"tensor-parallel over {plan.tp} boxes: weights split, KV pooled; the per-layer all-reduce over "
                     f"the link is not in the roofline")
    if plan.kv_setting.startswith("split"):
        notes.append("split: the KV budget is all the memory this model's box has left (a what-if: the deploy "
                     "passes CODER_KV_CACHE_GIB)")
    return replace(plan, problems=tuple(problems), notes=tuple(notes))


def _ceil(value: float, step: float = 0.1) -> float:
    return math.ceil(round(value / step, 6)) * step


def _check_topology(sparks: int, topology: str) -> None:
    if isinstance(sparks, bool) or not isinstance(sparks, int) or sparks < 1:
        raise SettingError("sparks", sparks, "a whole number of boxes >= 1")
    if topology not in TOPOLOGIES:
        raise SettingError("SPARK_TOPOLOGY", topology, list(TOPOLOGIES))
    if topology != "replicas" and sparks < 2:
        raise SettingError("sparks", sparks, f"2 or more: the {topology} topology spans several Sparks")


def coding_models(catalog: dict[str, ModelSpec]) -> list[str]:
    return [k for k, s in catalog.items() if s.role == CODER]


def plan_box(data: dict, catalog: dict[str, ModelSpec], coding_model: str | None = None, kv_gib: float | None = None,
             sparks: int = 1, topology: str = "replicas", configs: dict[str, tuple[dict, str]] | None = None
             ) -> BoxPlan:
    """The plan for the configured box and every coding model (or the one named).

    configs: {model key: (config.json dict, where it came from)} to use instead of the catalog's layer facts.
    With topology "split", each model is on its own box and (without kv_gib) gets all that box has left for KV.
    """
    _check_topology(sparks, topology)
    box = box_from_data(data, catalog)
    names = [coding_model] if coding_model else coding_models(catalog)
    plans = []
    for name in names:
        config, source = (configs or {}).get(name, (None, "config.json"))
        plans.append(plan_model(data, catalog, name, box=box, kv_gib=kv_gib, sparks=sparks, topology=topology,
                                config=config, config_source=source))
    return BoxPlan(box=box, sparks=sparks, topology=topology, models=tuple(plans))


def check_fits(data: dict, catalog: dict[str, ModelSpec], coding_model: str, *, kv_gib: float | None = None,
               config: dict | None = None) -> ModelPlan:
    """The deploy's preflight: the plan of what this host will run, or PlanError naming what does not add up.

    Checks the KV budget the deploy passes (CODER_KV_CACHE_GIB[coding_model], or kv_gib); with SPARK_TOPOLOGY
    "tensor-parallel" the weights are split over two boxes.
    """
    topology = data.get("SPARK_TOPOLOGY", "replicas")
    tp_sparks = 2 if topology == "tensor-parallel" else 1
    kv = configured_kv_gib(data, coding_model) if kv_gib is None else float(kv_gib)
    plan = plan_model(data, catalog, coding_model, kv_gib=kv, sparks=tp_sparks,
                      topology="tensor-parallel" if tp_sparks > 1 else "replicas", config=config)
    plan = replace(plan, kv_setting=f"CODER_KV_CACHE_GIB[{coding_model!r}]" if kv_gib is None else "kv_gib")
    if not plan.fits:
        raise PlanError(refusal_message(plan))
    return plan


def refusal_message(plan: ModelPlan) -> str:
    """Why a plan is refused: every number of the sum, the largest KV budget that fits, the settings to change."""
    box = plan.box
    key = plan.name
    lines = [f"{plan.title} ({key}) cannot run as configured:"]
    rows = [("usable memory (BOX_USABLE_MEMORY_GIB)", box.usable_gib),
            ("OS reserve (OS_RESERVE_GIB)", -box.os_reserve_gib)]
    for e in box.embedders:
        rows.append((f"embedder {e.name} ({e.setting}: {e.resident_gib:g} resident + {e.kv_gib:g} KV)",
                     -e.total_gib))
    rows.append((f"{key} resident (weights + runtime{', per box' if plan.tp > 1 else ''})", -plan.resident_gib))
    rows.append(("= free for its KV cache", plan.free_gib))
    rows.append((f"{key} KV budget ({plan.kv_setting})", -plan.kv_gib))
    rows.append(("= headroom", plan.headroom_gib))
    width = max(len(r[0]) for r in rows)
    lines += [f"  {label:<{width}} {value:8.1f} GiB" for label, value in rows]
    needed = box.os_reserve_gib + box.embedders_gib + plan.footprint_gib
    lines.append(f"  total {needed:.1f} GiB needed vs {box.usable_gib:.1f} GiB usable")
    lines += [f"  - {p}" for p in plan.problems]
    fit = _floor(plan.max_kv_gib)
    lines.append(f"Largest KV budget that fits: {fit:.1f} GiB" + (
        f" (smallest that holds one {plan.max_context:,}-token request: {_ceil(plan.min_kv_gib):.1f} GiB)"
        if plan.min_kv_gib is not None else "") + ".")
    lines.append(f"Change CODER_KV_CACHE_GIB[{key!r}] in group_data/gx10.py (group_data/sim.py on the simulated "
                 f"Spark), or free memory: EMBEDDERS (fewer, or a smaller kv_cache_gib) or OS_RESERVE_GIB in "
                 f"group_data/all.py.")
    return "\n".join(lines)
