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

    fetch_checkpoint.py --copy --source spark-1=root@10.0.0.11 [--source NAME=user@address ...] [--hub --cache-dir ...]
                        --rsync-ssh "ssh -i ... -o ..." --remote-marker verified/<org--name>@<sha>
                        --remote-snapshot hub/models--<org--name>/snapshots/<sha> --staging <dir>
                        --snapshot <final snapshot dir> --listing ... --marker ...

The fleet's fan-out (sparkctl/fleet/fanout.py): copy a checkpoint another box holds verified, from its model store
(a forced read-only rrsync of MODEL_STORE), trying the sources in order. A source is used only if it holds the
verified marker of this very commit (a box that never fetched it, or holds another revision, is skipped, named).
rsync copies the repo's cache folder as it is (its blobs, the snapshot's links to them) into a staging folder beside
the store with --partial, so a copy that dies half way resumes from what it has on the next attempt or run, from any
source (every box's store is laid out alike; rsync's delta transfer sends only what the partial file lacks: the
marker's received_bytes, from rsync --stats, says what crossed the LAN). The staging folder is verified against the
lock by the same content check as a download, and a file that fails it is deleted (fetched again). Only a verified
staging folder is put in the snapshot's place (its blobs moved into the repo folder's blobs/, as huggingface_hub
lays out a download) and marked. When every source failed, the Hub (with --hub; an
AIRGAPPED box has none) is the last; the marker and the printed result say where the checkpoint came from.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
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


def corrupt_files(problems: list[str]) -> list[str]:
    """The listed files a verification found with other bytes or another size (deleted, so they are fetched again)."""
    return [p.split(":", 1)[0] for p in problems if "(corrupt: delete" in p or " bytes, the lock says " in p]


def rsync(args, source: str, remote: str, dest: str, *extra: str) -> subprocess.CompletedProcess:
    argv = [args.rsync, *extra, "-e", args.rsync_ssh, f"{source}:{remote}", dest]
    return subprocess.run(argv, capture_output=True, text=True)


def last_line(text: str) -> str:
    lines = [x for x in (text or "").strip().splitlines() if x.strip()]
    return lines[-1].strip() if lines else "no output"


def source_of(value: str) -> tuple[str, str]:
    """--source NAME=user@address (or user@address): its name for the log and the rsync target."""
    label, sep, target = value.partition("=")
    return (label, target) if sep else (value.split("@", 1)[-1], value)


RECEIVED = re.compile(r"^Total bytes received: ([\d,.]+)$", re.M)  # rsync --stats, on the receiving side


def received_bytes(stdout: str) -> int | None:
    """What rsync --stats says this side received (data, checksums and protocol): less than the files' bytes when a
    copy resumed from a partial one. None when it says nothing."""
    m = RECEIVED.search(stdout or "")
    return int(re.sub(r"[,.]", "", m.group(1))) if m else None


def copy_from(args, src: str, files: dict, name: str) -> str | None:
    """Copy the snapshot from one source into staging and verify it there; None when it is verified, else why not.
    args.received: what rsync received in this attempt (less than the files' bytes when it resumed)."""
    label, source = source_of(src)
    staging = args.staging
    os.makedirs(staging, mode=0o755, exist_ok=True)
    probe = f"{staging}.source-marker"
    r = rsync(args, source, args.remote_marker, probe)
    if r.returncode != 0:
        return (f"{label} holds no verified copy of {name} (no {args.remote_marker} there: it has not fetched it, "
                f"or holds another revision; {last_line(r.stderr)})")
    try:
        with open(probe) as f:
            theirs = json.load(f)
    except (OSError, ValueError) as e:
        return f"{label}: its marker {args.remote_marker} is not readable ({e})"
    finally:
        try:
            os.unlink(probe)
        except FileNotFoundError:
            pass
    if theirs.get("sha") != name.split("@", 1)[1]:
        return f"{label}: its marker is for {theirs.get('repo')}@{theirs.get('sha')}, not the locked {name}"
    # the repo's cache folder as it is (rrsync refuses -L): its blobs and the snapshot's links to them
    folder, sha = args.remote_snapshot.rstrip("/").rsplit("/snapshots/", 1)
    limit = [f"--bwlimit={args.rsync_bwlimit}"] if args.rsync_bwlimit else []
    r = rsync(args, source, folder + "/", staging + "/", "-rlt", "--partial", "--delete", "--stats", *limit)
    args.received = received_bytes(r.stdout)
    if r.returncode != 0:
        why = next((x for x in r.stderr.splitlines() if "rrsync" in x), last_line(r.stderr))
        return f"the copy from {label} failed (rsync exit {r.returncode}: {why}); what arrived is kept to resume"
    snap = os.path.join(staging, "snapshots", sha)
    problems = verify(snap, files, args.workers)
    if problems:
        for rel in corrupt_files(problems):
            try:
                os.unlink(os.path.realpath(os.path.join(snap, rel)))
            except FileNotFoundError:
                pass
        return (f"the copy from {label} does not match the locked listing (deleted, fetched again): "
                + "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else ""))
    return None


def install(staging: str, snapshot: str) -> None:
    """Put a verified staging copy in the snapshot's place, laid out as huggingface_hub lays out a download (every
    box's store alike, so a copy that died half way resumes from any other source): each blob the snapshot's links
    point to is moved (a rename on one file system) into the repo folder's blobs/ (named by its content: one already
    there is the same file), then the snapshot folder of links is renamed there. A source's file that is no link
    (an older copy) stays in the snapshot as it is. What was in the snapshot's place had no verified marker (the
    deploy copies only then): a partial download, moved aside and removed."""
    sha = os.path.basename(snapshot.rstrip("/"))
    snap = os.path.join(staging, "snapshots", sha)
    blobs = os.path.join(os.path.dirname(os.path.dirname(snapshot.rstrip("/"))), "blobs")
    staged_blobs = os.path.realpath(os.path.join(staging, "blobs"))
    for root, _dirs, names in os.walk(snap):
        for n in names:
            target = os.path.realpath(os.path.join(root, n))
            if os.path.islink(os.path.join(root, n)) and os.path.dirname(target) == staged_blobs:
                if not os.path.exists(target):
                    continue  # two files of the same content share one blob: moved for the first
                os.makedirs(blobs, mode=0o755, exist_ok=True)
                os.replace(target, os.path.join(blobs, os.path.basename(target)))
    os.makedirs(os.path.dirname(snapshot), mode=0o755, exist_ok=True)
    old = None
    if os.path.lexists(snapshot):
        old = f"{staging}.replaced"
        if os.path.lexists(old):
            shutil.rmtree(old)
        os.rename(snapshot, old)
    os.rename(snap, snapshot)
    shutil.rmtree(staging, ignore_errors=True)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--listing", required=True)
    ap.add_argument("--cache-dir", help="huggingface_hub's cache to download into (not with --verify-only)")
    ap.add_argument("--marker", required=True, help="the verified marker to write once the snapshot matches")
    ap.add_argument("--workers", type=int, default=8, help="parallel downloads, and parallel hashing threads")
    ap.add_argument("--verify-only", action="store_true",
                    help="do not download: verify a snapshot copied from the tensor-parallel head, then mark it")
    ap.add_argument("--snapshot", help="with --verify-only: the snapshot folder to verify; with --copy: where the "
                                       "verified copy goes")
    ap.add_argument("--copy", action="store_true", help="copy from another box of the fleet (the fan-out)")
    ap.add_argument("--source", action="append", default=[], help="with --copy: NAME=user@address of a box to copy "
                                                                  "from, in the order to try them")
    ap.add_argument("--hub", action="store_true", help="with --copy: download from the Hub when every source failed")
    ap.add_argument("--rsync", default="rsync", help="with --copy: the rsync program")
    ap.add_argument("--rsync-ssh", default="ssh", help="with --copy: rsync's -e (the ssh command, with its key)")
    ap.add_argument("--rsync-bwlimit", type=int, default=0, help="with --copy: rsync's --bwlimit, KiB/s (0: none)")
    ap.add_argument("--remote-marker", help="with --copy: the verified marker's path in a source's store")
    ap.add_argument("--remote-snapshot", help="with --copy: the snapshot's path in a source's store")
    ap.add_argument("--staging", help="with --copy: the folder the copy goes to until it is verified")
    args = ap.parse_args(argv)
    args.received = None  # what rsync received over the LAN (--copy)
    if args.verify_only and not args.snapshot:
        ap.error("--verify-only needs --snapshot")
    if args.copy and not (args.snapshot and args.staging and args.remote_marker and args.remote_snapshot):
        ap.error("--copy needs --snapshot, --staging, --remote-marker and --remote-snapshot")
    if args.copy and not args.source and not args.hub:
        ap.error("--copy needs a --source or --hub")
    if (args.hub or not (args.verify_only or args.copy)) and not args.cache_dir:
        ap.error("a download needs --cache-dir")
    return args


def copy_sources(args, repo: str, sha: str, files: dict) -> str | None:
    """--copy: the first source that provides a verified copy, installed in the snapshot's place: its name; "hub"
    when none did and the Hub is allowed; None when none did and this box has no Hub (AIRGAPPED)."""
    name = f"{repo}@{sha}"
    for src in args.source:
        why = copy_from(args, src, files, name)
        if why is None:
            install(args.staging, args.snapshot)
            return source_of(src)[0]
        print(f"fetch: {name}: {why}; " + ("trying the next source" if src != args.source[-1] else
              "falling back to the Hub" if args.hub else "no source left"), file=sys.stderr)
    if args.hub:
        return "hub"
    print(f"fetch: {name}: no source could provide it ({', '.join(source_of(x)[0] for x in args.source)}), and this "
          "box does not download from the Hub (AIRGAPPED): the next deploy tries again", file=sys.stderr)
    return None


def main(argv=None) -> int:
    args = parse(argv)
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
    source = copy_sources(args, repo, sha, files) if args.copy else "hub"
    if source is None:
        return 5
    if args.verify_only:
        snapshot, source = args.snapshot, "copied"
    elif source != "hub":
        snapshot = args.snapshot  # verified in staging before it was renamed there
    else:
        from huggingface_hub import (
            snapshot_download,  # imported late: it reads HF_ENDPOINT... at import
        )

        snapshot = snapshot_download(repo_id=repo, revision=sha, cache_dir=args.cache_dir,
                                     allow_patterns=sorted(files), max_workers=args.workers)
    downloaded = time.monotonic()
    problems = verify(snapshot, files, args.workers) if source in ("hub", "copied") else []
    if problems:
        print(f"fetch: {repo}@{sha} does not match the locked listing; refusing it:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        if any("(corrupt: delete" in p for p in problems):
            print("  a deleted file is downloaded again by the next deploy", file=sys.stderr)
        return 3
    os.makedirs(os.path.dirname(marker), mode=0o755, exist_ok=True)
    write_atomic(marker, json.dumps({"repo": repo, "sha": sha, "snapshot": snapshot, "files": len(files),
                                     "bytes": sum(int(m["size"]) for m in files.values()), "source": source,
                                     "received_bytes": args.received if source not in ("hub", "copied") else None,
                                     "seconds": round(time.monotonic() - started, 1),
                                     "verify_seconds": round(time.monotonic() - downloaded, 1)}), MARKER_MODE)
    print(json.dumps({"repo": repo, "sha": sha, "snapshot": snapshot, "verified": True, "source": source,
                      "received_bytes": args.received if source not in ("hub", "copied") else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
