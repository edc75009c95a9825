"""Checkpoints: every catalog checkpoint at its locked commit, downloaded by huggingface_hub on the box.

Both coding models stay on disk, so a flip back downloads nothing. A service is pointed at a snapshot only
after fetch_checkpoint.py verified it against the lock (its marker exists); a killed download resumes on rerun.
"""

from __future__ import annotations

import json
from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files

from sparkctl.config.settings import Settings
from sparkctl.render.units import vllm_venv
from tasks.link import SYNC_KEY, SYNC_KNOWN_HOSTS
from tasks.ops import fetch_checkpoint, sync_checkpoint


def listing_json(cp) -> str:
    return json.dumps({"repo": cp.repo, "revision": cp.revision, "sha": cp.sha, "files": cp.files},
                      indent=1, sort_keys=True) + "\n"


@deploy("Checkpoints")
def checkpoints(settings: Settings) -> None:
    d = settings.data
    store, home = d["MODEL_STORE"], d["SPARKCTL_HOME"]
    files.directory(name=f"Create {store}", path=store, user="root", group="root", mode="0755")
    files.directory(name=f"Create {store}/hub", path=f"{store}/hub", user="root", group="root", mode="0755")
    files.directory(name=f"Create {store}/verified", path=f"{store}/verified", user="root", group="root",
                    mode="0755")
    files.directory(name=f"Create {home}/locks", path=f"{home}/locks", user="root", group="root", mode="0755")
    env = {"HF_ENDPOINT": d["HF_ENDPOINT"], "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    token_file = f"{d['ENV_DIR']}/hf_token"
    if settings.hf_token:
        files.put(name="Install the Hugging Face token (root-only)", src=StringIO(settings.hf_token + "\n"),
                  dest=token_file, user="root", group="root", mode="0600", _temp_dir=d["ENV_DIR"])
        env["HF_TOKEN_PATH"] = token_file
    else:
        files.file(name="No Hugging Face token configured: remove any old one", path=token_file, present=False)
    listings = {}
    for cp in settings.checkpoints:
        listings[cp.repo] = f"{home}/locks/{cp.cache_dirname()}@{cp.sha}.json"
        files.put(name=f"Lock listing {cp.repo}@{cp.sha[:12]}", src=StringIO(listing_json(cp)),
                  dest=listings[cp.repo], user="root", group="root", mode="0644")
    worker = settings.role.name == "worker"
    for cp in settings.checkpoints:  # from the Hub (every box but a tensor-parallel worker)
        if worker:
            continue
        listing = listings[cp.repo]
        fetch_checkpoint(name=f"Download and verify {cp.repo}@{cp.sha[:12]} ({cp.total_bytes / 2**30:.2f} GiB)",
                         repo=cp.repo, sha=cp.sha, listing=listing, cache_dir=f"{store}/hub",
                         marker_dir=f"{store}/verified", python=f"{vllm_venv(d)}/bin/python",
                         script=f"{home}/bin/fetch_checkpoint.py", workers=d["HF_DOWNLOAD_WORKERS"], _env=env)
    for cp in settings.checkpoints:  # tensor-parallel worker: after the head's downloads, over the CX7 link
        if not worker:
            continue
        sync_checkpoint(name=f"Copy {cp.repo}@{cp.sha[:12]} from the head over the CX7 link", repo=cp.repo,
                        sha=cp.sha, listing=listings[cp.repo], cache_dir=f"{store}/hub",
                        marker_dir=f"{store}/verified", python=f"{vllm_venv(d)}/bin/python",
                        script=f"{home}/bin/fetch_checkpoint.py", head_address=settings.role.head_address,
                        key=SYNC_KEY, known_hosts=SYNC_KNOWN_HOSTS)
