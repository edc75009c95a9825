"""The model catalog: every model a GX10 can serve, with its checkpoint, vLLM arguments and memory facts.

One pydantic model (ModelSpec) validates every entry alike: the built-in ones (sparkctl/config/catalog_entries.py),
the ones group data adds (CATALOG_MODELS) and the fields group data changes (CATALOG_OVERRIDES: the simulated Spark
swaps in tiny stand-in checkpoints under the same keys, so the flip it tests is the flip a real box makes). A
mistake is refused naming the entry and field it is in (CATALOG_MODELS['key']['memory']['resident_gib']), with the
closest field names for a typo. Pure data plus a resolver; no pyinfra.

Memory facts left out (None) are derived from the checkpoint's own files, which `lock refresh` records
(sparkctl.config.lock: its config.json at the locked commit, its safetensors sizes; sparkctl.capacity.facts); a
fact typed in an entry overrides the derived one, and the plan says so.
"""

from __future__ import annotations

import copy
import difflib
import re
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from sparkctl.config import catalog_entries
from sparkctl.config.owned_flags import check_counted_flags, check_owned_flags
from sparkctl.errors import SettingError

CODER = "coder"
EMBEDDER = "embedder"
KEY_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"  # a catalog key is also a unit, file and Kubernetes name part
NESTED = ("checkpoint", "draft", "memory")  # fields an override merges into (a mapping), rather than replaces

# vLLM 0.32.0's kernel choices (vllm/config/kernel.py MoEBackend and LinearBackend; `vllm serve --moe-backend`,
# `--linear-backend`): which kernels run an entry's NVFP4 experts and linear layers; "auto" (vLLM's own choice) is
# not rendered. A GB10 recipe that overrides them: NVIDIA's Nemotron-3-Super Spark recipe, --moe-backend marlin with
# VLLM_NVFP4_GEMM_BACKEND=marlin and VLLM_USE_FLASHINFER_MOE_FP4=0 (../shared/reference/spark-vllm.md §2); those two
# variables appear nowhere in vLLM 0.32.0's source: in 0.32.0 these two flags are the knobs
MOE_BACKENDS = ("auto", "triton", "batched_triton", "deep_gemm", "deep_gemm_mega_moe", "cutlass", "flashinfer_trtllm",
                "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_moe_ep_cutedsl", "flashinfer_b12x", "b12x",
                "flashinfer_moe_ep_mega_deep_gemm", "marlin", "humming", "triton_unfused", "aiter", "aiter_mega_moe",
                "aiter_triton_mxfp4_bf16", "flydsl", "hpc", "emulation", "rdna3")
LINEAR_BACKENDS = ("auto", "cutlass", "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_trtllm",
                   "flashinfer_cudnn", "flashinfer_b12x", "b12x", "marlin", "humming", "triton", "deep_gemm", "torch",
                   "aiter", "machete", "fbgemm", "conch", "exllama", "emulation", "xpu", "xpu_woq")

_ENTRY = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)
Lax = Field(strict=False)  # a list given for a tuple (group data and --data JSON write lists)
GiB = Annotated[float | None, Field(ge=0, description="a number of GiB >= 0, or None to derive it from the "
                                                      "checkpoint's files")]
Layers = Annotated[int | None, Field(ge=0, description="a whole number >= 0, or None to derive it from the "
                                                       "checkpoint's config.json")]


def _number_keys(value):
    """A mapping's keys that are numbers written as text, as numbers: JSON (--data, a JSON file) has text keys
    only, so {"36": 1014892} is {36: 1014892}. Any other key is left for the type to refuse."""
    if not isinstance(value, dict):
        return value
    return {_number(k) if isinstance(k, str) else k: v for k, v in value.items()}


def _number(text: str):
    for kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            continue
        return number if number == number and abs(number) != float("inf") else text
    return text


def by_number(key: type, value, what: str):
    """A mapping keyed by a number (a KV budget in GiB, a stream count, a prompt length), its keys also as text."""
    return Annotated[dict[key, value], BeforeValidator(_number_keys), Field(description=what)]


KvTokens = by_number(float, Annotated[int, Field(gt=0)], "a mapping of KV budgets in GiB to the KV tokens vLLM "
                     "reported, each a whole number > 0, e.g. {36: 1014892}")
KvConcurrency = by_number(float, Annotated[float, Field(gt=0)], "a mapping of KV budgets in GiB to the concurrent "
                          "requests vLLM reported, each > 0, e.g. {36: 3.9}")
DecodeByStreams = by_number(int, float, "a mapping of stream counts to aggregate decode tokens/s, e.g. {1: 40.5}")
PrefillByLength = by_number(int, float, "a mapping of prompt lengths in tokens to fresh-prefill tokens/s, e.g. "
                            "{8192: 3000.0}")


class Checkpoint(BaseModel):
    """One Hugging Face repository the box downloads, at a revision the lock file pins to a commit."""

    model_config = _ENTRY
    repo: Annotated[str, Field(pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$",
                               description="a Hub repository 'org/name'")]
    revision: Annotated[str, Field(pattern=r"^[^\s]+$", description="a branch, tag or commit sha")]
    allow_patterns: Annotated[tuple[str, ...], Lax] = ("*.json", "*.safetensors", "*.jinja", "*.txt", "*.model")


class CheckpointFacts(BaseModel):
    """What a checkpoint's own files say: recorded by `lock refresh` at the locked commit, or typed into an entry
    from the Hub's pages (MemoryFacts.hub_facts) until the lock records them."""

    model_config = _ENTRY
    weights_bytes: Annotated[int, Field(ge=0, description="bytes of safetensors weights >= 0")]
    config: dict[str, Any] | None = None  # the planner's facts of its config.json (sparkctl.config.lock.CONFIG_KEYS)
    sha: str = ""  # the locked commit ("" when typed in)
    source: Annotated[str, Field(min_length=1, description="where the facts were read (a URL and revision)")]


class MemoryFacts(BaseModel):
    """What the capacity planner needs. A fact left None is derived from the checkpoint's files (the lock);
    'measured' figures come from the production box; 'calibrated' facts were set so that a production figure comes
    out: their agreement with it is by construction, not independent evidence, and the plan says so."""

    model_config = _ENTRY
    resident_gib: GiB = None  # weights + runtime resident while serving, excluding the KV budget
    resident_source: Literal["measured", "estimate", "calibrated"] | None = None  # what resident_gib is
    weights_gib: GiB = None  # checkpoint weights alone (tensor-parallel splits these)
    bytes_read_per_step_gb: Annotated[float | None, Field(ge=0, description="GB (1e9) >= 0; 0: no roofline")] = None
    # weight bytes read per decode step (active parameters), GB; None: a dense checkpoint's weights
    tokens_per_step: Annotated[float, Field(ge=1, description="tokens per decode step >= 1")] = 1.0
    full_attention_layers: Layers = None  # layers whose KV grows with context
    kv_heads: Annotated[int | None, Field(ge=1, description="a whole number >= 1, or None")] = None
    head_dim: Annotated[int | None, Field(ge=1, description="a whole number >= 1, or None")] = None
    linear_attention_layers: Layers = None  # layers whose KV does not grow: Gated DeltaNet or sliding window
    linear_state_bytes_per_layer: Layers = None  # Gated DeltaNet: fixed state per sequence per linear layer, bytes
    sliding_window: Layers = None  # > 0: the linear layers are sliding-window attention over this many tokens
    draft_attention_layers: Layers = None  # speculative layers whose KV shares the target's pool
    measured_kv_tokens: KvTokens = {}  # {kv_budget_gib: tokens vLLM reported}
    measured_concurrency: KvConcurrency = {}  # {kv_budget_gib: concurrent requests}
    measured_source: str = ""  # where the measured_* figures were published
    calibrated: dict[str, str] = {}  # {fact: why}: layer facts calibrated to a production figure
    measured_decode_tokens_per_s: Annotated[float, Field(ge=0)] = 0.0  # bench probe, single stream; 0: none
    measured_on: str = ""  # checkpoint repo the measured_* figures belong to ("": the entry's own)
    # acceptance floors: speculative decoding on this box, the bench probe's code workload, 1 stream
    measured_acceptance_rate: Annotated[float, Field(ge=0, le=1)] = 0.0  # 0: no floor recorded
    measured_acceptance_per_position: Annotated[tuple[Annotated[float, Field(ge=0, le=1)], ...], Lax] = ()
    measured_acceptance_source: str = ""
    measured_acceptance_on: str = ""  # checkpoint repo the acceptance figures belong to; "": measured_on's
    acceptance_provenance: dict[str, str] = {}  # {figure: measured | derived | provisional}
    # published bench-probe figures: the reference of a model's first flip on a box
    published_decode_tokens_per_s: DecodeByStreams = {}  # {streams: aggregate decode tok/s}
    published_prefill_tokens_per_s: PrefillByLength = {}  # {prompt tokens: fresh-prefill tok/s}
    published_workload: dict[str, Any] = {}  # as history.workload_key fields
    published_source: str = ""
    # the checkpoint's config.json facts and weight size as its Hub page shows them, typed in (with their URL and
    # revision) until `lock refresh` records the checkpoint's own: the lock's, once there, are used instead
    hub_facts: CheckpointFacts | None = None


class ExpectedKernels(BaseModel):
    """What vLLM 0.32.0 chooses for the model on a GB10 (sm_121), by the names its engine log gives them: `python -m
    sparkctl rehearse` reads the log and flags each choice that differs (sparkctl/rehearse/kernels.py). "" = none
    (the model has no such layers: a dense model's MoE); None = not stated (not judged)."""
    model_config = _ENTRY
    attention: str | None = None  # "Using <X> attention backend out of potential backends" (AttentionBackendEnum)
    nvfp4_linear: str | None = None  # "Using <kernel class> for NVFP4 GEMM"
    nvfp4_moe: str | None = None  # "Using '<backend>' NvFp4 MoE backend out of potential backends"
    flashinfer: bool | None = None  # vLLM's has_flashinfer(): False logs "FlashInfer kernels are disabled"
    source: str = ""  # where the expectation comes from


class ModelSpec(BaseModel):
    model_config = _ENTRY
    key: Annotated[str, Field(pattern=KEY_PATTERN)]  # the name CODING_MODEL / EMBEDDERS use
    role: Literal["coder", "embedder"]
    title: str = ""  # human name ("" : the key)
    checkpoint: Checkpoint
    memory: MemoryFacts = MemoryFacts()
    max_model_len: Annotated[int, Field(gt=0, description="tokens per request, > 0")]
    served_name: str = ""  # embedders: the OpenAI model id; the coder uses CODER_SERVED_NAME instead
    kv_cache_dtype: Annotated[str, Field(pattern=r"^[a-z0-9_]+$", description="a --kv-cache-dtype value")] = "auto"
    speculative: dict[str, Any] | None = None  # --speculative-config; a draft checkpoint's path is filled in
    draft: Checkpoint | None = None  # separate draft checkpoint (DFlash, draft_model), downloaded beside the target
    extra_args: Annotated[tuple[str, ...], Lax] = ()  # model-specific `vllm serve` flags (parsers, limits, runner)
    moe_backend: Annotated[Literal[MOE_BACKENDS], Field(  # --moe-backend: the kernels of its (NVFP4) experts
        description=f"one of vLLM 0.32.0's --moe-backend values: {', '.join(MOE_BACKENDS)}")] = "auto"
    linear_backend: Annotated[Literal[LINEAR_BACKENDS], Field(  # --linear-backend: the kernels of its linear layers
        description=f"one of vLLM 0.32.0's --linear-backend values: {', '.join(LINEAR_BACKENDS)}")] = "auto"
    expected_kernels: ExpectedKernels | None = None  # what vLLM chooses for it on a GB10 (None: nothing stated)
    target_facts: CheckpointFacts | None = None  # set by the check layer from the lock
    draft_facts: CheckpointFacts | None = None

    def checkpoints(self) -> list[Checkpoint]:
        return [self.checkpoint] + ([self.draft] if self.draft else [])


ENTRY_FIELDS = tuple(f for f in ModelSpec.model_fields if f not in ("key", "target_facts", "draft_facts"))
OVERRIDE_FIELDS = tuple(f for f in ENTRY_FIELDS if f != "role")
_SUB_FIELDS = {"checkpoint": tuple(Checkpoint.model_fields), "draft": tuple(Checkpoint.model_fields),
               "memory": tuple(MemoryFacts.model_fields), "hub_facts": tuple(CheckpointFacts.model_fields),
               "expected_kernels": tuple(ExpectedKernels.model_fields)}

# --- errors: a pydantic error, named the way the operator wrote it ---------------------------------------------------


def _annotation(loc: tuple) -> tuple[Any, str]:
    """(the annotation, its description) of the field a pydantic error location points at."""
    model, annotation, description = ModelSpec, None, ""
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) and model is not None else None
        if field is None:
            break
        annotation, description = field.annotation, field.description or description
        inner = [a for a in (*getattr(annotation, "__args__", ()), annotation) if isinstance(a, type)
                 and issubclass(a, BaseModel)]
        model = inner[0] if inner else None
    return annotation, description


def _type_name(annotation) -> str:
    """A type as an operator reads it: dict[float, int], not pydantic's metadata (Annotated[int, FieldInfo(...)])."""
    if annotation is None:
        return "value"
    if annotation is NoneType:
        return "None"
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin in (Union, UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin in (dict, list, tuple) and args:
        return f"{origin.__name__}[{', '.join('...' if a is Ellipsis else _type_name(a) for a in args)}]"
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")


def _entry_error(err: dict, where: str) -> SettingError:
    loc = tuple(p for p in err["loc"] if p not in ("[key]",))
    if err["type"] == "extra_forbidden":
        path = where + "".join(f"[{p!r}]" for p in loc[:-1])
        choices = _SUB_FIELDS.get(loc[-2], ENTRY_FIELDS) if len(loc) > 1 else ENTRY_FIELDS
        close = difflib.get_close_matches(str(loc[-1]), choices, n=1, cutoff=0.6)
        return SettingError(path, loc[-1], sorted(choices), f"Did you mean {close[0]!r}?" if close else "")
    if err["type"] == "missing":
        return SettingError(where + "".join(f"[{p!r}]" for p in loc), "<not set>",
                            "a value: every entry needs role, checkpoint (repo, revision) and max_model_len")
    annotation, description = _annotation(loc)
    path = where + "".join(f"[{p!r}]" for p in loc)
    valid = f"a value of type {_type_name(annotation)}" + (f": {description}" if description else "")
    return SettingError(path, err.get("input"), valid, err["msg"])


def _validated(key: str, raw: Any, where: str, blame=None) -> ModelSpec:
    """One entry validated; blame(loc) names the setting a field came from (an override's or the entry's)."""
    if not isinstance(raw, dict):
        raise SettingError(where, raw, "a mapping of catalog field names to values", f"fields: {list(ENTRY_FIELDS)}")
    try:
        spec = ModelSpec.model_validate({**raw, "key": key})
    except ValidationError as exc:
        errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
        raise _entry_error(errors[0], blame(errors[0]["loc"]) if blame else where) from None
    return _checked(spec, blame or (lambda loc: where))


def _checked(spec: ModelSpec, blame) -> ModelSpec:
    """The rules between fields, which one field's type cannot say; blame(loc) names where a field was written."""
    if spec.role == EMBEDDER and not spec.served_name:
        raise SettingError(f"{blame(('served_name',))}['served_name']", spec.served_name,
                           "the embedder's OpenAI model id")
    if spec.speculative is not None and "model" in spec.speculative:
        raise SettingError(f"{blame(('speculative', 'model'))}['speculative']['model']", spec.speculative["model"],
                           "no draft model: the deploy fills it in from the entry's draft checkpoint",
                           "Set the draft checkpoint ('draft': {'repo': ..., 'revision': ...}): the lock pins it "
                           "and the box verifies it, a path or repository here would be neither")
    tokens = (spec.speculative or {}).get("num_speculative_tokens")
    if spec.speculative is not None and (type(tokens) is not int or tokens < 1):
        raise SettingError(f"{blame(('speculative', 'num_speculative_tokens'))}['speculative']"
                           "['num_speculative_tokens']", tokens, "a whole number >= 1")
    check_owned_flags(f"{blame(('extra_args',))}['extra_args']", spec.extra_args)
    check_counted_flags(f"{blame(('extra_args',))}['extra_args']", spec.extra_args)
    return spec


# --- the catalog: built-in entries, CATALOG_MODELS, CATALOG_OVERRIDES ------------------------------------------------


def _builtin_where(key: str) -> str:
    return f"the built-in catalog entry {key!r} (sparkctl/config/catalog_entries.py)"


def _group_models(models: Any) -> dict[str, dict]:
    """CATALOG_MODELS checked: keys that name a new model, each entry validated (raw entries returned)."""
    if models is None:
        return {}
    if not isinstance(models, dict):
        raise SettingError("CATALOG_MODELS", models, "a mapping of new catalog model keys to catalog entries")
    for key, raw in models.items():
        if key in catalog_entries.BUILTIN:
            raise SettingError(f"CATALOG_MODELS key {key!r}", key, "a key not already a built-in model",
                               "Change a built-in model with CATALOG_OVERRIDES, or add it under another key")
        if not isinstance(key, str) or not re.match(KEY_PATTERN, key):
            raise SettingError(f"CATALOG_MODELS key {key!r}", key, "a lowercase name of letters, digits, '.', '_' "
                                                                   "and '-' (it names units and files)")
        _validated(key, raw, f"CATALOG_MODELS[{key!r}]")
    return dict(models)


def key_roles(models: Any = None) -> dict[str, str]:
    """{key: role} of the built-in entries and CATALOG_MODELS' (each entry validated first)."""
    raws = {**catalog_entries.BUILTIN, **_group_models(models)}
    return {key: raw["role"] for key, raw in raws.items()}


def _merged(base: dict, fields: dict) -> dict:
    out = copy.deepcopy(base)
    for name, value in fields.items():
        if name in NESTED and isinstance(value, dict) and isinstance(out.get(name), dict):
            out[name] = {**out[name], **value}
        else:
            out[name] = value
    return out


def _apply(key: str, base: dict, base_where: str, fields: Any) -> ModelSpec:
    """An entry with CATALOG_OVERRIDES[key] merged in; a mistake is blamed on the override when it wrote the field."""
    where = f"CATALOG_OVERRIDES[{key!r}]"
    if not isinstance(fields, dict):
        raise SettingError(where, fields, "a mapping of catalog field names to values", f"fields: {OVERRIDE_FIELDS}")
    for name in fields:
        if name not in OVERRIDE_FIELDS:
            close = difflib.get_close_matches(str(name), OVERRIDE_FIELDS, n=1, cutoff=0.6)
            raise SettingError(where, name, sorted(OVERRIDE_FIELDS), f"Did you mean {close[0]!r}?" if close else "")

    def blame(loc: tuple) -> str:
        head = loc[0] if loc else None
        sub = fields.get(head) if head in fields else None
        written = head in fields and (len(loc) == 1 or not isinstance(sub, dict) or loc[1] in sub)
        return where if written else base_where
    return _validated(key, _merged(base, fields), where, blame)


def resolve(overrides: Any = None, models: Any = None) -> dict[str, ModelSpec]:
    """The catalog: the built-in entries, group data's CATALOG_MODELS added, CATALOG_OVERRIDES applied (every
    mistake a SettingError naming the entry and field). A host's is resolved once, into its HostConfig
    (sparkctl.config.settings); no arguments: the catalog as shipped."""
    raws = {key: (raw, _builtin_where(key)) for key, raw in catalog_entries.BUILTIN.items()}
    raws.update({key: (raw, f"CATALOG_MODELS[{key!r}]") for key, raw in _group_models(models).items()})
    if overrides is not None and not isinstance(overrides, dict):
        raise SettingError("CATALOG_OVERRIDES", overrides, "a mapping of catalog model keys to {field: value}")
    for key in overrides or {}:
        if key not in raws:
            close = difflib.get_close_matches(str(key).lower(), list(raws), n=2, cutoff=0.6)
            raise SettingError("CATALOG_OVERRIDES", key, sorted(raws), f"Did you mean {close[0]!r}?" if close else "")
    out = {}
    for key, (raw, where) in raws.items():
        out[key] = (_apply(key, raw, where, (overrides or {})[key]) if key in (overrides or {})
                    else _validated(key, raw, where))
    return out


def lookup(catalog: dict[str, ModelSpec], setting: str, key: str, role: str) -> ModelSpec:
    """A catalog entry of the given role, or a SettingError listing the valid names."""
    valid = sorted(k for k, m in catalog.items() if m.role == role)
    if key not in valid:
        raise SettingError(setting, key, valid)
    return catalog[key]


CATALOG: dict[str, ModelSpec] = resolve()  # the built-in entries, as shipped
