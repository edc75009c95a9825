"""Checkpoints: every checkpoint the box keeps (settings.kept_models) at its locked commit, downloaded by
huggingface_hub on the box.

Every coding model with a KV budget stays on disk, so a flip back downloads nothing. A service is pointed at a snapshot only
after fetch_checkpoint.py verified it against the lock (its marker exists); a killed download resumes on rerun.
"""

from __future__ import annotations

import json
from io import StringIO

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.facts.files import File
from pyinfra.operations import files

from sparkctl.config.lock import marker_dir
from sparkctl.config.quantities import GIB
from sparkctl.config.service import snapshot_path
from sparkctl.config.settings import Settings
from sparkctl.render.link import SYNC_KEY, SYNC_KNOWN_HOSTS
from sparkctl.render.units import vllm_venv


def listing_json(cp) -> str:
    return json.dumps({"repo": cp.repo, "revision": cp.revision, "sha": cp.sha, "files": cp.files},
                      indent=1, sort_keys=True) + "\n"


@deploy("Checkpoints")
def checkpoints(settings: Settings) -> None:
    cfg = settings.cfg
    store, home = cfg.MODEL_STORE, cfg.SPARKCTL_HOME
    files.directory(name=f"Create {store}", path=store, user="root", group="root", mode="0755")
    files.directory(name=f"Create {store}/hub", path=f"{store}/hub", user="root", group="root", mode="0755")
    files.directory(name=f"Create {marker_dir(store)}", path=marker_dir(store), user="root", group="root",
                    mode="0755")
    files.directory(name=f"Create {home}/locks", path=f"{home}/locks", user="root", group="root", mode="0755")
    env = {"HF_ENDPOINT": cfg.HF_ENDPOINT, "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    token_file = f"{cfg.ENV_DIR}/hf_token"
    if settings.hf_token:
        files.put(name="Install the Hugging Face token (root-only)", src=StringIO(settings.hf_token + "\n"),
                  dest=token_file, user="root", group="root", mode="0600", _temp_dir=cfg.ENV_DIR)
        env["HF_TOKEN_PATH"] = token_file
    else:
        files.file(name="No Hugging Face token configured: remove any old one", path=token_file, present=False)
    listings = {}
    for cp in settings.checkpoints:
        listings[cp.repo] = f"{home}/locks/{cp.cache_dirname()}@{cp.sha}.json"
        files.put(name=f"Lock listing {cp.repo}@{cp.sha[:12]}", src=StringIO(listing_json(cp)),
                  dest=listings[cp.repo], user="root", group="root", mode="0644")
    worker = settings.role.name == "worker"
    common = dict(cache_dir=f"{store}/hub", python=f"{vllm_venv(cfg)}/bin/python", script=f"{home}/bin/fetch_checkpoint.py",
                  workers=cfg.HF_DOWNLOAD_WORKERS)
    for cp in settings.checkpoints:  # from the Hub (every box but a tensor-parallel worker)
        if worker:
            continue
        fetch_checkpoint(name=f"Download and verify {cp.repo}@{cp.sha[:12]} ({cp.total_bytes / GIB:.2f} GiB)",
                         repo=cp.repo, sha=cp.sha, listing=listings[cp.repo], marker=cp.marker_path(store), _env=env,
                         **common)
    ssh = ["ssh", "-i", SYNC_KEY, "-o", f"UserKnownHostsFile={SYNC_KNOWN_HOSTS}",
           *[arg for opt in cfg.CHECKPOINT_SYNC_SSH_OPTIONS for arg in ("-o", opt)]]
    for cp in settings.checkpoints:  # tensor-parallel worker: after the head's downloads, over the CX7 link
        if not worker:
            continue
        sync_checkpoint(name=f"Copy {cp.repo}@{cp.sha[:12]} from the head over the CX7 link", repo=cp.repo,
                        sha=cp.sha, listing=listings[cp.repo], folder=cp.cache_dirname(),
                        snapshot=snapshot_path(store, cp), marker=cp.marker_path(store),
                        source=f"{cfg.CHECKPOINT_SYNC_USER}@{settings.role.head_address}", ssh_argv=ssh, **common)


@operation()
def fetch_checkpoint(repo: str, sha: str, listing: str, cache_dir: str, marker: str, python: str, script: str,
                     workers: int = 8):
    """Download and verify one locked checkpoint unless its verified marker exists."""
    if host.get_fact(File, path=marker):
        host.noop(f"{repo}@{sha[:12]} is on disk and verified")
        return
    yield StringCommand(QuoteString(python), QuoteString(script), "--listing", QuoteString(listing),
                        "--cache-dir", QuoteString(cache_dir), "--marker", QuoteString(marker),
                        "--workers", str(int(workers)))


@operation()
def sync_checkpoint(repo: str, sha: str, listing: str, cache_dir: str, folder: str, snapshot: str, marker: str,
                    python: str, script: str, source: str, ssh_argv: list[str], workers: int = 8):
    """Tensor-parallel worker: copy a verified checkpoint from the head over the CX7 link (never a second Hub
    download), then verify it against the lock by content like a download, unless its marker exists.

    source: user@head, whose forced rrsync serves the head's MODEL_STORE/hub; ssh_argv: rsync's -e command."""
    if host.get_fact(File, path=marker):
        host.noop(f"{repo}@{sha[:12]} is on disk and verified")
        return
    ssh = " ".join(ssh_argv)
    yield StringCommand("mkdir -p", QuoteString(f"{cache_dir}/{folder}"), "&& rsync -a --partial --delete -e",
                        QuoteString(ssh), QuoteString(f"{source}:{folder}/"), QuoteString(f"{cache_dir}/{folder}/"))
    yield StringCommand(QuoteString(python), QuoteString(script), "--verify-only", "--listing", QuoteString(listing),
                        "--snapshot", QuoteString(snapshot), "--marker", QuoteString(marker),
                        "--workers", str(int(workers)))
