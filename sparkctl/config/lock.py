"""The checkpoint lock: every catalog revision resolved once to a commit sha and the file listing at that commit.

A branch name is not a pin. `python -m sparkctl lock refresh` (sparkctl/lock/refresh.py) asks the Hub (or HF_ENDPOINT)
what each checkpoint's revision points at now and records the commit and the files the box will download (names,
sizes, LFS sha256, git blob ids). Deploys read only the lock; refreshing it is an explicit, reviewable act (a diff
in git). Every file is verified by content on the box, so every entry must carry a digest the box can check: an LFS
file's sha256, or a git blob id (sha1); an entry with neither is refused by the lock and by the box.

Beside the listing, `lock refresh` records the facts the capacity planner needs from the checkpoint's config.json
at the locked commit (CONFIG_KEYS: layer layout, KV heads, head dim, dtype, MTP layers, experts; a multimodal
checkpoint's text_config with them), so `plan` and `check` work offline from the checkpoint's own files; the
check layer attaches them, and the safetensors sizes, to each catalog entry (`with_facts`).

Format (MODEL_LOCK_FILE, JSON):
    {"version": 1, "endpoint": "...", "checkpoints": {"<org/name>": {"revision": "main", "sha": "<40 hex>",
        "files": {"<path>": {"size": <bytes>, "blob_id": "<git oid>", "sha256": "<lfs sha256 or null>"}},
        "config": {<CONFIG_KEYS of config.json>, "text_config": {...}}}}}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sparkctl import REPO_ROOT
from sparkctl.config import catalog, files
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError, SparkctlError

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
CONFIG_FILE = "config.json"
# what the planner reads of a config.json (sparkctl/capacity/kv.py), at the top level and under text_config
CONFIG_KEYS = ("architectures", "model_type", "torch_dtype", "dtype", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "hidden_size", "layer_types", "full_attention_interval",
               "sliding_window", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
               "linear_value_head_dim", "linear_conv_kernel_dim", "mamba_ssm_dtype", "mtp_num_hidden_layers",
               "num_nextn_predict_layers", "num_experts", "num_local_experts", "n_routed_experts",
               "num_experts_per_tok", "max_position_embeddings")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
LOCK_VERSION = 1
DIGEST_RULE = 'a file entry with a content digest the box checks: "sha256" (64 hex) or "blob_id" (40-hex git blob id)'


# Where a locked checkpoint lives on the box, in one place (the box-side scripts are given these paths).
def cache_dirname(repo: str) -> str:
    """huggingface_hub's cache folder for a model repo: models--org--name."""
    return "models--" + repo.replace("/", "--")


def marker_dir(model_store: str) -> str:
    """The folder of verified markers: one file per checkpoint commit fetch_checkpoint.py verified by content."""
    return f"{model_store}/verified"


def marker_path(model_store: str, repo: str, sha: str) -> str:
    return f"{marker_dir(model_store)}/{repo.replace('/', '--')}@{sha}"


@dataclass(frozen=True)
class LockedCheckpoint:
    repo: str
    revision: str
    sha: str
    files: dict  # path -> {"size", "blob_id", "sha256"}
    config: dict | None = None  # CONFIG_KEYS of its config.json at sha (None: not recorded)

    @property
    def total_bytes(self) -> int:
        return sum(int(f["size"]) for f in self.files.values())

    def cache_dirname(self) -> str:
        """huggingface_hub's cache folder for this repo (models--org--name)."""
        return cache_dirname(self.repo)

    def marker_path(self, model_store: str) -> str:
        """The verified marker of this commit: present only once its snapshot matched the lock by content."""
        return marker_path(model_store, self.repo, self.sha)


def lock_path(cfg: GroupData) -> Path:
    """MODEL_LOCK_FILE, relative to the repository unless absolute."""
    p = Path(cfg.MODEL_LOCK_FILE)
    return p if p.is_absolute() else REPO_ROOT / p


def shown(path: Path) -> str:
    """The lock file as the operator names it in MODEL_LOCK_FILE (relative to the repository when inside it)."""
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def load(path: Path) -> dict:
    """The lock's JSON, read defensively (a FIFO or a device in its place is refused, never read: it would hang)."""
    try:
        text, _ = files.read_text(path, "MODEL_LOCK_FILE", "a lock file (JSON text)",
                                  "Run `python -m sparkctl lock refresh`")
        lock = json.loads(text)
    except FileNotFoundError:
        raise SettingError("MODEL_LOCK_FILE", shown(path), "an existing lock file",
                           "Run `python -m sparkctl lock refresh` to create it (the simulated Spark's: "
                           "`python -m sparkctl sim up`)") from None
    except json.JSONDecodeError as exc:
        raise SettingError("MODEL_LOCK_FILE", shown(path), "a lock file of valid JSON", str(exc)) from None
    except OSError as exc:
        raise SettingError("MODEL_LOCK_FILE", shown(path), "a readable lock file", str(exc)) from None
    if not isinstance(lock, dict) or lock.get("version") != LOCK_VERSION:
        raise SettingError("MODEL_LOCK_FILE", shown(path), f"a lock of format version {LOCK_VERSION}")
    return lock


def locked(lock: dict, cp: catalog.Checkpoint, path: Path) -> LockedCheckpoint:
    """The lock entry for a checkpoint, refusing unresolved, stale or malformed entries."""
    name = f"MODEL_LOCK_FILE {shown(path)}"
    entries = lock.get("checkpoints")
    entry = entries.get(cp.repo) if isinstance(entries, dict) else None
    refresh = ("Run `python -m sparkctl lock refresh` from a machine that reaches the Hub, review and commit the diff "
               "(the simulated Spark's lock is written by `python -m sparkctl sim up`)")
    if entry is None:
        raise SettingError(f"{name}[{cp.repo!r}]", None, "a locked commit for this checkpoint", refresh)
    if not isinstance(entry, dict):
        raise SettingError(f"{name}[{cp.repo!r}]", entry, "an entry with revision, sha and files", refresh)
    if entry.get("revision") != cp.revision:
        raise SettingError(f"{name}[{cp.repo!r}].revision", entry.get("revision"),
                           f"the catalog's revision {cp.revision!r}", refresh)
    sha = entry.get("sha")
    if not isinstance(sha, str) or not SHA_RE.match(sha):
        raise SettingError(f"{name}[{cp.repo!r}].sha", sha, "a 40-hex commit sha", refresh)
    files = entry.get("files")
    _check_listing(f"{name}[{cp.repo!r}].files", files, refresh)
    undigested = files_without_digest(files)
    if undigested:
        raise SettingError(f"{name}[{cp.repo!r}].files[{undigested[0]!r}]", files[undigested[0]], DIGEST_RULE,
                           f"{len(undigested)} file(s) of {cp.repo} without one: {', '.join(undigested[:5])}; "
                           f"the box could not tell a corrupt copy from a good one. {refresh}")
    config = entry.get("config") if isinstance(entry.get("config"), dict) else None
    return LockedCheckpoint(repo=cp.repo, revision=cp.revision, sha=sha, files=entry["files"], config=config)


def _check_listing(name: str, files, refresh: str) -> None:
    """A lock entry's file listing: {path: {"size": bytes, ...}}, every size a whole number of bytes."""
    if not files or not isinstance(files, dict) or not all(isinstance(f, dict) for f in files.values()):
        raise SettingError(name, files, 'the file listing at that commit ({"<path>": {"size": <bytes>, ...}})',
                           refresh)
    for path, meta in files.items():
        if type(meta.get("size")) is not int or meta["size"] < 0:  # bool is an int to isinstance
            raise SettingError(f"{name}[{path!r}].size", meta.get("size"), "a whole number of bytes, 0 or more",
                               refresh)


def has_digest(meta: dict) -> bool:
    """The file's bytes can be checked: an LFS sha256 or a git blob id, well formed (fetch_checkpoint.py checks
    exactly these)."""
    sha256, blob_id = meta.get("sha256"), meta.get("blob_id")
    return (isinstance(sha256, str) and bool(SHA256_RE.match(sha256))) or \
        (isinstance(blob_id, str) and bool(SHA_RE.match(blob_id)))


def files_without_digest(files: dict) -> list[str]:
    return sorted(path for path, meta in files.items() if not has_digest(meta))


def checkpoints_of(resolved: dict[str, catalog.ModelSpec] | list[catalog.ModelSpec]) -> list[catalog.Checkpoint]:
    """Every checkpoint of these models (a resolved catalog, or the models a box keeps), each repository once."""
    seen: dict[str, catalog.Checkpoint] = {}
    for spec in (resolved.values() if isinstance(resolved, dict) else resolved):
        for cp in spec.checkpoints():
            seen.setdefault(cp.repo, cp)
    return list(seen.values())


def _listing(info, allow_patterns) -> dict:
    from huggingface_hub.utils import filter_repo_objects

    siblings = list(filter_repo_objects(info.siblings, allow_patterns=list(allow_patterns),
                                        key=lambda s: s.rfilename))
    files = {}
    for s in siblings:
        lfs = getattr(s, "lfs", None)
        files[s.rfilename] = {"size": s.size, "blob_id": s.blob_id,
                              "sha256": (lfs.sha256 if lfs is not None else None)}
    return dict(sorted(files.items()))


def planner_config(config: dict) -> dict:
    """The CONFIG_KEYS of a config.json (and of its text_config): what the planner reads, nothing else."""
    out = {k: config[k] for k in CONFIG_KEYS if k in config}
    if isinstance(config.get("text_config"), dict):
        out["text_config"] = {k: config["text_config"][k] for k in CONFIG_KEYS if k in config["text_config"]}
    return out


def _config_at(api, repo: str, sha: str) -> dict:
    """config.json of repo at the locked commit (downloaded into a throw-away cache), reduced to CONFIG_KEYS."""
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        path = api.hf_hub_download(repo, CONFIG_FILE, revision=sha, cache_dir=cache)
        try:
            return planner_config(json.loads(Path(path).read_text()))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SparkctlError(f"lock refresh: {repo}@{sha} has a {CONFIG_FILE} that is not JSON ({exc}); "
                                f"nothing was written") from None


def resolve(api, cp: catalog.Checkpoint, endpoint: str) -> dict:
    """The lock entry of one checkpoint as the endpoint answers now, with its config.json's planner facts;
    refused (nothing written) when the endpoint lists a file without a digest, since a deploy would refuse that
    lock."""
    info = api.model_info(cp.repo, revision=cp.revision, files_metadata=True)
    files = _listing(info, cp.allow_patterns)
    undigested = files_without_digest(files)
    if undigested:
        raise SparkctlError(f"lock refresh: {endpoint} lists {len(undigested)} file(s) of {cp.repo}@{info.sha} "
                            f"without a sha256 or git blob id ({', '.join(undigested[:5])}); nothing was written: "
                            f"every file must be verifiable by content on the box")
    entry = {"revision": cp.revision, "sha": info.sha, "files": files}
    if CONFIG_FILE in files:
        entry["config"] = _config_at(api, cp.repo, info.sha)
    return entry


# --- the checkpoints' own facts, attached to the catalog for the planner ---------------------------------------------


def weights_bytes(files: dict) -> int:
    """The safetensors weights of a listing, bytes."""
    return sum(int(meta.get("size") or 0) for path, meta in files.items() if path.endswith(".safetensors"))


def _facts(entries: dict, cp: catalog.Checkpoint | None, where: str) -> catalog.CheckpointFacts | None:
    entry = entries.get(cp.repo) if cp is not None else None
    if not isinstance(entry, dict) or entry.get("revision") != cp.revision or \
            not SHA_RE.match(str(entry.get("sha"))) or not isinstance(entry.get("files"), dict):
        return None
    config = entry.get("config") if isinstance(entry.get("config"), dict) else None
    return catalog.CheckpointFacts(weights_bytes=weights_bytes(entry["files"]), config=config, sha=entry["sha"],
                                   source=where)


def with_facts(resolved: dict[str, catalog.ModelSpec], cfg: GroupData) -> dict[str, catalog.ModelSpec]:
    """The catalog with what the lock recorded of each entry's checkpoints (target and draft) at their locked
    commits. Tools read it without a lock (the plan then has only the entries' own facts): a missing, unresolved
    or unreadable lock attaches nothing; the deploy's own check (settings.derive) refuses such a lock."""
    path = lock_path(cfg)
    try:
        entries = load(path).get("checkpoints")
    except SettingError:
        return resolved
    if not isinstance(entries, dict):
        return resolved
    where = f"MODEL_LOCK_FILE {shown(path)}"
    return {key: spec.model_copy(update={"target_facts": _facts(entries, spec.checkpoint, where),
                                         "draft_facts": _facts(entries, spec.draft, where)})
            for key, spec in resolved.items()}
