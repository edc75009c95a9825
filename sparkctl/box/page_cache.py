#!/usr/bin/python3
"""Evict the checkpoints' page cache before a vLLM engine starts (box-side, stdlib only; run as root by the unit's
ExecStartPre=+, outside the sandbox, so before every start: a rollout's, the watchdog's, systemd's Restart=).

On the GB10's unified memory the page cache lives in the same pool as the engines: the cached pages of a checkpoint
read at the last load (the starting model's own, or a flipped-away coder's tens of GiB) are memory vLLM's snapshot
and the driver's allocations compete with (GB10 owners: NV_ERR_NO_MEMORY and host wedges during engine start with
little free memory, vllm #56824, open-gpu-kernel-modules #1358, dgx-spark-playbooks #97; a refused start that was
page cache, vllm #48140). NVIDIA's Spark playbooks run `sync; echo 3 > /proc/sys/vm/drop_caches` before a start.

PAGE_CACHE_EVICTION (group_data/all.py) chooses:
    checkpoints   posix_fadvise(POSIX_FADV_DONTNEED) on every checkpoint file under MODEL_STORE/hub: only the
                  model files' clean pages go (a running engine has its weights in its own memory and reads its files
                  only at load), nothing else's cache, no global sync that would wait on a download being written
    drop-caches   NVIDIA's playbooks' way: sync, then drop every clean page cache and the dentries and inodes
    off           nothing (vLLM's snapshot then counts what the page cache holds)
It prints what it evicted, and never fails the start: a file it cannot open is skipped and said.
"""

from __future__ import annotations

import argparse
import os
import sys

MODES = ("checkpoints", "drop-caches", "off")
DROP_CACHES = "/proc/sys/vm/drop_caches"
GIB = 1 << 30


def checkpoint_files(hub: str) -> list[str]:
    """Every regular file of the Hugging Face cache under hub (blobs/ holds each file once; snapshots/ links to
    them), each real path once."""
    seen, out = set(), []
    for root, _dirs, files in os.walk(hub):
        for name in files:
            real = os.path.realpath(os.path.join(root, name))
            if real not in seen and os.path.isfile(real):
                seen.add(real)
                out.append(real)
    return sorted(out)


def evict_file(path: str) -> int:
    """Drop a file's clean cached pages (POSIX_FADV_DONTNEED over the whole file); its size in bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def evict_checkpoints(hub: str, say=print) -> tuple[int, int]:
    """(files, bytes) whose page cache was evicted."""
    count = total = 0
    for path in checkpoint_files(hub):
        try:
            total += evict_file(path)
            count += 1
        except OSError as exc:
            say(f"page-cache: skipped {path}: {exc}")
    return count, total


def drop_caches(proc_file: str = DROP_CACHES) -> None:
    """NVIDIA's playbooks' `sync; echo 3 > /proc/sys/vm/drop_caches`."""
    os.sync()
    with open(proc_file, "w") as f:
        f.write("3\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="evict the checkpoints' page cache before a vLLM engine starts")
    ap.add_argument("--mode", choices=MODES, required=True)
    ap.add_argument("--hub", required=True, help="MODEL_STORE/hub: the Hugging Face cache of every checkpoint")
    ap.add_argument("--service", default="", help="the starting service (said in the journal)")
    a = ap.parse_args(argv)
    who = f" before {a.service} starts" if a.service else ""
    if a.mode == "off":
        print(f"page-cache: left as it is{who} (PAGE_CACHE_EVICTION = off)")
    elif a.mode == "drop-caches":
        try:
            drop_caches()
            print(f"page-cache: synced and dropped every clean cache{who} (PAGE_CACHE_EVICTION = drop-caches)")
        except OSError as exc:
            print(f"page-cache: could not drop caches{who}: {exc}")
    else:
        count, total = evict_checkpoints(a.hub)
        print(f"page-cache: evicted the cached pages of {count} checkpoint files ({total / GIB:.2f} GiB on disk) "
              f"under {a.hub}{who} (PAGE_CACHE_EVICTION = checkpoints)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
