"""`python -m sparkctl lock refresh`: ask the Hub (or HF_ENDPOINT) what each catalog revision points at now and
rewrite the lock (config/lock.py says what it holds). A command, not data: it reads the settings as every command
does (sparkctl/check/load.py) and is the only part of the lock that talks to the network.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import httpx2

from sparkctl.box.boxio import write_atomic  # the one atomic write, the box's and the control side's
from sparkctl.check.load import load
from sparkctl.config import catalog
from sparkctl.config.lock import LOCK_VERSION, checkpoints_of, lock_path, resolve
from sparkctl.config.secrets import read_hf_token
from sparkctl.errors import SparkctlError

# a connection that fails, in huggingface_hub's own HTTP client (httpx2) or httpx
HUB_UNREACHABLE = (httpx2.TransportError, httpx.TransportError)


def refresh_lock(groups: list[str], endpoint: str | None = None,
                 extra: list[catalog.Checkpoint] | None = None) -> Path:
    """Resolve every checkpoint of every catalog entry of these groups' data (plus `extra` ones, e.g. a candidate
    checkpoint not yet in the catalog) to a commit, its listing and its config.json's planner facts, so a model only
    planned is planned from its own files too; write their lock file. An endpoint that cannot be reached is a
    SparkctlError naming it (nothing is written)."""
    from huggingface_hub import HfApi

    config = load(groups)
    endpoint = endpoint or config.cfg.HF_ENDPOINT
    api = HfApi(endpoint=endpoint, token=read_hf_token(config.cfg) or False)
    out = {"version": LOCK_VERSION, "endpoint": endpoint, "checkpoints": {}}
    for cp in sorted(checkpoints_of(config.catalog) + list(extra or []), key=lambda c: c.repo):
        try:
            out["checkpoints"][cp.repo] = resolve(api, cp, endpoint)
        except HUB_UNREACHABLE as exc:
            raise SparkctlError(unreachable(endpoint, groups, cp.repo, exc)) from None
    path = lock_path(config.cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(str(path), json.dumps(out, indent=2, sort_keys=True) + "\n", 0o644)  # a reader never sees half
    return path


def unreachable(endpoint: str, groups: list[str], repo: str, exc: Exception) -> str:
    """Why nothing was written, and the two ways on: the groups whose HF_ENDPOINT this machine reaches."""
    return (f"lock refresh: cannot reach the Hub at {endpoint} (HF_ENDPOINT of group data {','.join(groups)}) for "
            f"{repo}: {type(exc).__name__}: {exc}; nothing was written. The simulated Spark's lock is refreshed "
            f"against its stand-in hub with `--groups all,gx10,sim` (while it is up); a real box's from a machine that "
            f"reaches {endpoint} (or name another with --endpoint)")
