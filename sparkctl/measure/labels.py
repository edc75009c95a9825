"""What a bench or NIAH record says it measured: the configured model and its locked revision, the box, and the
planner's decode roofline (group data, catalog, lock file, planner)."""

from __future__ import annotations

import json

from sparkctl.capacity import planner
from sparkctl.config import catalog, lock
from sparkctl.errors import SparkctlError


def read_lock(data: dict) -> dict:
    """The lock file's {"checkpoints": {repo: {...}}} part, read defensively ({} when absent or malformed): a
    record without a revision label is still a measurement, so a missing lock never stops the probe."""
    try:
        raw = json.loads(lock.lock_path(data).read_text())
    except (OSError, ValueError):
        return {}
    checkpoints = raw.get("checkpoints") if isinstance(raw, dict) else None
    return checkpoints if isinstance(checkpoints, dict) else {}


def _checkpoint_label(ckpt, locked: dict) -> dict:
    entry = locked.get(ckpt.repo) if isinstance(locked.get(ckpt.repo), dict) else {}
    sha = entry.get("sha") or entry.get("commit")
    return {"repo": ckpt.repo, "revision": entry.get("revision") or ckpt.revision,
            "sha": sha if isinstance(sha, str) else None}


def model_labels(data: dict) -> dict:
    """{"model": {...}, "revision": <locked sha or None>} for the configured coding model."""
    key = data["CODING_MODEL"]
    served = data["CODER_SERVED_NAME"]
    try:
        spec = catalog.lookup(catalog.resolve(data.get("CATALOG_OVERRIDES")), "CODING_MODEL", key, catalog.CODER)
    except SparkctlError:
        return {"model": {"key": key, "served_name": served}, "revision": None}
    locked = read_lock(data)
    ckpt = _checkpoint_label(spec.checkpoint, locked)
    model = {"key": spec.key, "title": spec.title, "served_name": served, **ckpt,
             "draft": _checkpoint_label(spec.draft, locked) if spec.draft else None,
             "speculative": spec.speculative, "kv_cache_dtype": spec.kv_cache_dtype,
             "max_model_len": spec.max_model_len}
    return {"model": model, "revision": ckpt["sha"]}


def build_labels(data: dict) -> dict:
    """{"vllm_build": "<version>-<hash>"}: the versioned venv the configuration runs vLLM from (render.units.vllm_venv),
    so a venv rebuilt with another constraint under the same version string is recognised as another build."""
    from sparkctl.render.units import vllm_venv

    return {"vllm_build": vllm_venv(data).rstrip("/").rsplit("/", 1)[-1]}


def box_labels(host, data: dict) -> dict:
    return {"box": {"name": host.name, "address": host.address, "simulated": bool(host.simulated),
                    "usable_memory_gib": data["BOX_USABLE_MEMORY_GIB"],
                    "memory_bandwidth_gbps": data["BOX_MEMORY_BANDWIDTH_GBPS"],
                    # two boxes serving one model decode at another rate: never one's baseline for the other
                    "tensor_parallel_size": 2 if data.get("SPARK_TOPOLOGY") == "tensor-parallel" else 1}}


def roofline_single_stream(data: dict) -> tuple[float | None, str]:
    """The planner's single-stream decode roofline of the coding model, or (None, why not).

    The roofline is a label: a configuration the planner cannot size (an unknown model, a bad setting) only drops
    the roofline column, it does not stop the measurement."""
    key = data["CODING_MODEL"]
    try:
        plan = planner.plan_box(data, catalog.resolve(data.get("CATALOG_OVERRIDES")), coding_model=key)
        value = plan.model(key).roofline_tokens_per_s
    except SparkctlError as exc:
        return None, f"the planner cannot size {key!r}: {exc}"
    return (float(value), "sparkctl.capacity.planner") if value else (None, f"the planner has no roofline for {key!r}")
