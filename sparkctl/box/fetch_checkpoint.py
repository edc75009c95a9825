#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run as root with the vLLM venv's python): download one locked checkpoint.

    fetch_checkpoint.py --listing /opt/sparkctl/locks/<org--name>@<sha>.json --cache-dir /srv/models/hub
                        --marker /srv/models/verified/<org--name>@<sha> [--workers 8]
    fetch_checkpoint.py --verify-only --snapshot /srv/models/hub/models--<org--name>/snapshots/<sha> ...

The listing (from models.lock.json) names the repo, the commit sha and every file with its size and LFS sha256.
huggingface_hub downloads at that exact commit into its cache (each file to a temporary name, renamed only when
complete, so a partial file is never at a path a service reads); rerunning after a kill resumes with the files
still missing. Then every listed file is checked by content: present, the locked size, and the locked digest (an
LFS file's sha256; a small file's git blob id, the sha1 of "blob <size>\\0" + bytes), hashed in parallel threads;
nothing unlisted may be in the snapshot. Only then is the verified marker written (atomically). A listing entry
with no digest is refused before anything is fetched or verified (exit 4): same-size corruption would pass. The
deploy points a service at a snapshot only once its marker exists. The paths (marker, snapshot) come from the
deploy (sparkctl.config.lock knows them); this script computes none.

Endpoint: HF_ENDPOINT from the environment. Token: HF_TOKEN_PATH (a root-only file), never argv.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

try:
    from sparkctl.box.boxio import write_atomic
except ImportError:  # on the box: the scripts sit side by side
    from boxio import write_atomic

MARKER_MODE = 0o644  # the verified marker: the deploy's File fact reads it
CHUNK = 8 << 20  # bytes read per hash update (hashlib releases the GIL on large updates: threads hash in parallel)


def digest(path: str, h) -> str:
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def content_problem(rel: str, path: str, meta: dict) -> str | None:
    """Why this file's bytes are not the locked ones (None: they are)."""
    if meta.get("sha256"):
        got = digest(path, hashlib.sha256())
        return None if got == meta["sha256"] else \
            f"{rel}: sha256 {got} is not the locked {meta['sha256']} (corrupt: delete {os.path.realpath(path)})"
    if meta.get("blob_id"):  # a file kept in git itself: its blob id is the sha1 of a "blob <size>\0" header + bytes
        got = digest(path, hashlib.sha1(b"blob %d\0" % os.path.getsize(path)))
        return None if got == meta["blob_id"] else \
            f"{rel}: git blob {got} is not the locked {meta['blob_id']} (corrupt: delete {os.path.realpath(path)})"
    return f"{rel}: the listing has no sha256 or git blob id for it; its content cannot be verified"


def without_digest(files: dict) -> list[str]:
    """Listed files whose bytes could not be checked (sparkctl.config.lock refuses such a lock too)."""
    return sorted(rel for rel, meta in files.items() if not (meta.get("sha256") or meta.get("blob_id")))


def verify(snapshot: str, files: dict, workers: int = 8) -> list[str]:
    problems, to_hash = [], {}
    for rel, meta in files.items():
        path = os.path.join(snapshot, rel)
        if not os.path.isfile(path):
            problems.append(f"{rel}: missing")
            continue
        size = os.path.getsize(path)
        if meta.get("size") is not None and size != int(meta["size"]):
            problems.append(f"{rel}: {size} bytes, the lock says {meta['size']}")
            continue
        to_hash[rel] = path
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        found = pool.map(lambda rel: content_problem(rel, to_hash[rel], files[rel]), sorted(to_hash))
        problems += [p for p in found if p]
    for root, _dirs, names in os.walk(snapshot):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), snapshot)
            if rel not in files:
                problems.append(f"{rel}: not in the locked listing")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--listing", required=True)
    ap.add_argument("--cache-dir", help="huggingface_hub's cache to download into (not with --verify-only)")
    ap.add_argument("--marker", required=True, help="the verified marker to write once the snapshot matches")
    ap.add_argument("--workers", type=int, default=8, help="parallel downloads, and parallel hashing threads")
    ap.add_argument("--verify-only", action="store_true",
                    help="do not download: verify a snapshot copied from the tensor-parallel head, then mark it")
    ap.add_argument("--snapshot", help="with --verify-only: the snapshot folder to verify")
    args = ap.parse_args(argv)
    if args.verify_only and not args.snapshot:
        ap.error("--verify-only needs --snapshot")
    if not args.verify_only and not args.cache_dir:
        ap.error("a download needs --cache-dir")
    with open(args.listing) as f:
        lock = json.load(f)
    repo, sha, files = lock["repo"], lock["sha"], lock["files"]
    marker = args.marker
    unverifiable = without_digest(files)
    if unverifiable:
        print(f"fetch: {repo}@{sha}: the listing {args.listing} has no sha256 or git blob id for "
              f"{', '.join(unverifiable)}; refusing to fetch or verify files that cannot be checked by content "
              f"(refresh the lock: python -m sparkctl lock refresh)", file=sys.stderr)
        return 4

    started = time.monotonic()
    if args.verify_only:
        snapshot = args.snapshot
    else:
        from huggingface_hub import (
            snapshot_download,  # imported late: it reads HF_ENDPOINT... at import
        )

        snapshot = snapshot_download(repo_id=repo, revision=sha, cache_dir=args.cache_dir,
                                     allow_patterns=sorted(files), max_workers=args.workers)
    downloaded = time.monotonic()
    problems = verify(snapshot, files, args.workers)
    if problems:
        print(f"fetch: {repo}@{sha} does not match the locked listing; refusing it:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        if any("(corrupt: delete" in p for p in problems):
            print("  a deleted file is downloaded again by the next deploy", file=sys.stderr)
        return 3
    os.makedirs(os.path.dirname(marker), mode=0o755, exist_ok=True)
    write_atomic(marker, json.dumps({"repo": repo, "sha": sha, "snapshot": snapshot, "files": len(files),
                                     "bytes": sum(int(m["size"]) for m in files.values()),
                                     "seconds": round(time.monotonic() - started, 1),
                                     "verify_seconds": round(time.monotonic() - downloaded, 1)}), MARKER_MODE)
    print(json.dumps({"repo": repo, "sha": sha, "snapshot": snapshot, "verified": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
