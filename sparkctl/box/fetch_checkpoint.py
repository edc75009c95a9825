#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run as root with the vLLM venv's python): download one locked checkpoint.

    fetch_checkpoint.py --listing /opt/sparkctl/locks/<org--name>@<sha>.json --cache-dir /srv/models/hub
                        --marker-dir /srv/models/verified [--workers 8]

The listing (from models.lock.json) names the repo, the commit sha and every file with its size and LFS sha256.
huggingface_hub downloads at that exact commit into its cache (each file to a temporary name, renamed only when
complete, so a partial file is never at a path a service reads); rerunning after a kill resumes with the files
still missing. Then every listed file is checked (present, right size, and the blob named by its LFS sha256) and
nothing unlisted may be in the snapshot; only then is the verified marker written (atomically). The deploy points
a service at a snapshot only once its marker exists.

Endpoint: HF_ENDPOINT from the environment. Token: HF_TOKEN_PATH (a root-only file), never argv.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def verify(snapshot: str, files: dict) -> list[str]:
    problems = []
    for rel, meta in files.items():
        path = os.path.join(snapshot, rel)
        if not os.path.isfile(path):
            problems.append(f"{rel}: missing")
            continue
        size = os.path.getsize(path)
        if meta.get("size") is not None and size != int(meta["size"]):
            problems.append(f"{rel}: {size} bytes, the lock says {meta['size']}")
        sha256 = meta.get("sha256")
        if sha256 and os.path.islink(path) and os.path.basename(os.readlink(path)) != sha256:
            problems.append(f"{rel}: blob {os.path.basename(os.readlink(path))} is not the locked sha256 {sha256}")
    for root, _dirs, names in os.walk(snapshot):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), snapshot)
            if rel not in files:
                problems.append(f"{rel}: not in the locked listing")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--listing", required=True)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--marker-dir", required=True)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--verify-only", action="store_true",
                    help="do not download: verify a snapshot copied from the tensor-parallel head, then mark it")
    args = ap.parse_args(argv)
    with open(args.listing) as f:
        lock = json.load(f)
    repo, sha, files = lock["repo"], lock["sha"], lock["files"]
    marker = os.path.join(args.marker_dir, f"{repo.replace('/', '--')}@{sha}")

    started = time.monotonic()
    if args.verify_only:
        snapshot = os.path.join(args.cache_dir, "models--" + repo.replace("/", "--"), "snapshots", sha)
    else:
        from huggingface_hub import (
            snapshot_download,  # imported late: it reads HF_ENDPOINT... at import
        )

        snapshot = snapshot_download(repo_id=repo, revision=sha, cache_dir=args.cache_dir,
                                     allow_patterns=sorted(files), max_workers=args.workers)
    problems = verify(snapshot, files)
    if problems:
        print(f"fetch: {repo}@{sha} does not match the locked listing; refusing it:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 3
    os.makedirs(args.marker_dir, mode=0o755, exist_ok=True)
    tmp = f"{marker}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"repo": repo, "sha": sha, "snapshot": snapshot, "files": len(files),
                   "bytes": sum(int(m["size"]) for m in files.values()),
                   "seconds": round(time.monotonic() - started, 1)}, f)
    os.rename(tmp, marker)
    print(json.dumps({"repo": repo, "sha": sha, "snapshot": snapshot, "verified": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
