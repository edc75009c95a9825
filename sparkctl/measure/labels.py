"""What a bench or NIAH record says it measured: the configured model and its locked revision, the box, and the
planner's decode roofline (the host's HostConfig: typed settings and catalog; the lock file; the planner).
"""

from __future__ import annotations

import json

from sparkctl.capacity import planner
from sparkctl.capacity.venv import vllm_venv
from sparkctl.config import lock
from sparkctl.config.settings import HostConfig


def read_lock(config: HostConfig) -> dict:
    """The lock file's {"checkpoints": {repo: {...}}} part, read defensively ({} when absent or malformed): a
    record without a revision label is still a measurement, so a missing lock never stops the probe."""
    try:
        raw = json.loads(lock.lock_path(config.cfg).read_text())
    except (OSError, ValueError):
        return {}
    checkpoints = raw.get("checkpoints") if isinstance(raw, dict) else None
    return checkpoints if isinstance(checkpoints, dict) else {}


def _checkpoint_label(ckpt, locked: dict) -> dict:
    entry = locked.get(ckpt.repo) if isinstance(locked.get(ckpt.repo), dict) else {}
    sha = entry.get("sha") or entry.get("commit")
    return {"repo": ckpt.repo, "revision": entry.get("revision") or ckpt.revision,
            "sha": sha if isinstance(sha, str) else None}


def model_labels(config: HostConfig) -> dict:
    """{"model": {...}, "revision": <locked sha or None>} for the configured coding model."""
    spec, served = config.coding_model, config.cfg.CODER_SERVED_NAME
    locked = read_lock(config)
    ckpt = _checkpoint_label(spec.checkpoint, locked)
    model = {"key": spec.key, "title": spec.title, "served_name": served, **ckpt,
             "draft": _checkpoint_label(spec.draft, locked) if spec.draft else None,
             "speculative": spec.speculative, "kv_cache_dtype": spec.kv_cache_dtype,
             "max_model_len": spec.max_model_len}
    return {"model": model, "revision": ckpt["sha"]}


def build_labels(config: HostConfig) -> dict:
    """{"vllm_build": "<version>-<hash>"}: the versioned venv the configuration runs vLLM from (capacity.venv, the
    name the rendered unit runs), so a venv rebuilt with another constraint under the same version string is
    recognised as another build."""
    return {"vllm_build": vllm_venv(config.cfg).rstrip("/").rsplit("/", 1)[-1]}


def box_labels(host, config: HostConfig) -> dict:
    cfg = config.cfg
    return {"box": {"name": host.name, "address": host.address, "simulated": bool(host.simulated),
                    "usable_memory_gib": cfg.BOX_USABLE_MEMORY_GIB,
                    "memory_bandwidth_gbps": cfg.BOX_MEMORY_BANDWIDTH_GBPS,
                    # two boxes serving one model decode at another rate: never one's baseline for the other
                    "tensor_parallel_size": 2 if cfg.SPARK_TOPOLOGY == "tensor-parallel" else 1}}


def roofline_single_stream(config: HostConfig) -> tuple[float | None, str]:
    """The planner's single-stream decode roofline of the coding model, or (None, why not): the roofline is a label,
    a model without one (no weight bytes per decode step in the catalog) only drops the roofline column. The typed
    settings always let the planner size the configured model."""
    key = config.cfg.CODING_MODEL
    value = planner.plan_box(config.cfg, config.catalog, coding_model=key).model(key).roofline_tokens_per_s
    return (float(value), "sparkctl.capacity.planner") if value else (None, f"the planner has no roofline for {key!r}")
