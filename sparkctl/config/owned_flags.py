"""The `vllm serve` flags the deploy owns: it derives them from settings the capacity plan, the proxy and the
topology check, so no free-form argument list (VLLM_COMMON_ARGS, a catalog entry's extra_args) may set them.

vLLM appends nothing after its last flag: the last spelling wins, so `VLLM_COMMON_ARGS = ["--host", "0.0.0.0"]`
would put vLLM on every interface, without TLS or token, after every check passed. One table, here: what
sparkctl/render/units.py vllm_args and sparkctl/config/topology.py emit (tests/config/test_owned_flags.py holds
the two to it), plus the flags that would bypass them (a Unix socket instead of the host, data or pipeline
parallelism that multiplies the planned memory, a config file that can set any flag).

Every spelling vLLM 0.32's parser accepts is recognised (vllm/utils/argparse_utils.py FlexibleArgumentParser on
argparse): `--flag value`, `--flag=value`, `--flag_with_underscores`, dotted JSON keys (`--speculative-config.method
mtp`), the short aliases (`-tp 2`, `-tp=2`, `-sc.method`), a single-letter alias with its value attached (`-n2`),
and any prefix argparse would expand (`--hos`, `--max-model`, `-t`). Pure: no pyinfra, no vLLM import.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.errors import SettingError

_LISTEN = "LISTEN_ADDRESS with CODER_PORT / EMBEDDER_PORTS (vLLM listens on loopback only, behind the proxy)"
_LAYOUT = ("SPARK_TOPOLOGY, TP_BACKEND, TP_HEAD and TP_MASTER_PORT (one engine per service, across the pair only "
           "in tensor-parallel: the capacity plan counts exactly that)")


@dataclass(frozen=True)
class OwnedFlag:
    flag: str  # the long spelling
    aliases: tuple[str, ...]  # vLLM's short spellings
    instead: str  # where the operator sets what it controls


OWNED_FLAGS: tuple[OwnedFlag, ...] = (
    OwnedFlag("--host", (), _LISTEN),
    OwnedFlag("--uds", (), _LISTEN),
    OwnedFlag("--port", (), _LISTEN),
    OwnedFlag("--served-model-name", (), "CODER_SERVED_NAME (the coder) or the catalog's served_name (embedders)"),
    OwnedFlag("--model", (), "CODING_MODEL or EMBEDDERS (the catalog's checkpoint, at the lock's commit)"),
    OwnedFlag("--max-model-len", (), "the catalog entry's max_model_len, which the capacity plan checks"),
    OwnedFlag("--kv-cache-memory-bytes", (), "CODER_KV_CACHE_GIB or EMBEDDERS[i].kv_cache_gib, which the capacity "
                                             "plan checks"),
    OwnedFlag("--gpu-memory-utilization", (), "VLLM_ADMISSION_MARGIN_GIB: the plan gives each engine its footprint "
                                              "plus the margin (vLLM's start-up admission, sparkctl/capacity/admission.py)"),
    OwnedFlag("--kv-cache-dtype", (), "the catalog entry's kv_cache_dtype, which the capacity plan counts"),
    OwnedFlag("--speculative-config", ("-sc",), "the catalog entry's speculative (and draft checkpoint)"),
    OwnedFlag("--moe-backend", (), "the catalog entry's moe_backend (CATALOG_OVERRIDES)"),
    OwnedFlag("--linear-backend", (), "the catalog entry's linear_backend (CATALOG_OVERRIDES)"),
    OwnedFlag("--max-num-seqs", (), "CODER_MAX_NUM_SEQS"),
    OwnedFlag("--max-num-batched-tokens", (), "CODER_MAX_NUM_BATCHED_TOKENS"),
    OwnedFlag("--tensor-parallel-size", ("-tp",), _LAYOUT),
    OwnedFlag("--pipeline-parallel-size", ("-pp",), _LAYOUT),
    OwnedFlag("--data-parallel-size", ("-dp",), _LAYOUT),
    OwnedFlag("--nnodes", ("-n",), _LAYOUT),
    OwnedFlag("--node-rank", ("-r",), _LAYOUT),
    OwnedFlag("--master-addr", (), _LAYOUT),
    OwnedFlag("--master-port", (), _LAYOUT),
    OwnedFlag("--distributed-executor-backend", (), _LAYOUT),
    OwnedFlag("--headless", (), _LAYOUT),
    OwnedFlag("--config", (), "the settings above: a vLLM config file could set any flag the deploy owns, so list "
                              "the flags themselves"),
)
BY_LONG = {o.flag: o for o in OWNED_FLAGS}
BY_ALIAS = {a: o for o in OWNED_FLAGS for a in o.aliases}


def _long_name(token: str) -> str:
    """`--max_model_len=5` -> `--max-model-len`; `--speculative-config.method` -> `--speculative-config` (vLLM turns
    underscores into dashes up to the first dot, and a dotted key sets one field of that flag's JSON)."""
    name = token.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-")


def _long_owner(token: str) -> OwnedFlag | None:
    name = _long_name(token)
    if name == "--":
        return None  # argparse's end of options, or a value
    if name in BY_LONG:
        return BY_LONG[name]
    # argparse expands an unambiguous prefix (vLLM's serve parser keeps allow_abbrev): refuse any prefix of an
    # owned flag (no flag of vLLM 0.32 is itself a strict prefix of one, so nothing legitimate is caught)
    return next((o for o in OWNED_FLAGS if o.flag.startswith(name)), None)


def _short_owner(token: str) -> OwnedFlag | None:
    name = token.split("=", 1)[0].split(".", 1)[0]
    if name in BY_ALIAS:
        return BY_ALIAS[name]
    for alias, owned in BY_ALIAS.items():
        if len(alias) == 2 and name.startswith(alias):
            return owned  # `-n2`: a one-letter option with its value attached
        if alias.startswith(name) and len(name) > 1:
            return owned  # `-t`: a prefix argparse expands to `-tp`
    return None


def owner_of(token: str) -> OwnedFlag | None:
    """The owned flag this argument sets, in whatever spelling vLLM would accept; None for anything else."""
    if not isinstance(token, str) or not token.startswith("-") or token in ("-", "--"):
        return None
    if token.startswith("--"):
        return _long_owner(token)
    if token[1:2].isdigit() or token[1:2] == ".":
        return None  # a negative number is a value
    return _short_owner(token)


def check_owned_flags(setting: str, args) -> None:
    """Refuse an argument list that sets a flag the deploy owns, naming the setting, the argument, the flag and
    where it is set instead. setting: how the operator names the list (e.g. "VLLM_COMMON_ARGS",
    "CATALOG_OVERRIDES['qwen3.8-27b']['extra_args']")."""
    for i, token in enumerate(args or ()):
        owned = owner_of(token)
        if owned is None:
            continue
        spelled = "" if token.split("=", 1)[0] == owned.flag else f" ({token!r} is how vLLM spells {owned.flag})"
        raise SettingError(f"{setting}[{i}]", token, f"no flag the deploy sets itself{spelled}",
                           f"{owned.flag} is derived by the deploy (the last one on vLLM's command line wins, so "
                           f"this one would override it after every check passed); set it through {owned.instead}")


# --- flags left to the operator whose values the capacity plan reads (sparkctl/capacity/kv.py serve_options) -------

BLOCK_SIZE = "--block-size"  # tokens per KV block: vLLM's CacheConfig takes a whole number > 0 (block_size gt=0)


def check_counted_flags(setting: str, args) -> None:
    """Refuse a --block-size that is not a whole number of tokens from 1 up: vLLM's engine refuses it at start (on
    the box, after the deploy restarted the service), and the capacity plan would count its default instead."""
    args = [str(a) for a in args or ()]
    for i, token in enumerate(args):
        if not token.startswith("--") or _long_name(token) != BLOCK_SIZE:
            continue
        value = token.split("=", 1)[1] if "=" in token else (args[i + 1] if i + 1 < len(args) else "")
        if not (value.isdigit() and int(value) >= 1):
            raise SettingError(f"{setting}[{i}]", token if "=" in token else f"{token} {value}".strip(),
                               f"{BLOCK_SIZE} with a whole number of tokens from 1 up, such as {BLOCK_SIZE} 16",
                               "vLLM's engine refuses a block size of 0 (or none) when it starts, on the box")


def switch_of(args, flag: str) -> bool | None:
    """What an argument list says of a boolean flag of vLLM's (`--flag` / `--no-flag`, underscores allowed): the
    last spelling wins, as on vLLM's command line; None when it says nothing."""
    negated = "--no-" + flag[2:]
    said = None
    for token in (str(a) for a in args or ()):
        name = _long_name(token) if token.startswith("--") else ""
        said = True if name == flag else False if name == negated else said
    return said
