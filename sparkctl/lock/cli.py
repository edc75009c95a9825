"""`python -m sparkctl lock refresh|show`: the commands that read or rewrite what the operator configured."""

from __future__ import annotations

import argparse

from sparkctl.check.load import load as load_settings
from sparkctl.config.lock import load, lock_path
from sparkctl.config.quantities import GIB
from sparkctl.lock.refresh import refresh_lock


def _cmd_refresh(args) -> int:
    path = refresh_lock(args.groups.split(","), args.endpoint)
    lock = load(path)
    for repo, entry in lock["checkpoints"].items():
        facts = "config.json facts recorded" if entry.get("config") else "no config.json"
        print(f"{repo:45} {entry['revision']:10} {entry['sha']}  {len(entry['files'])} files, {facts}")
    print(f"wrote {path}")
    return 0


def _cmd_show(args) -> int:
    config = load_settings(args.groups.split(",") if args.groups else None)
    path = lock_path(config.cfg)
    lock = load(path)
    for repo, entry in sorted(lock["checkpoints"].items()):
        size = sum(int(f["size"]) for f in (entry.get("files") or {}).values())
        print(f"{repo:45} {entry.get('revision'):10} {entry.get('sha') or 'UNRESOLVED':40} {size / GIB:8.2f} GiB")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lock", help="resolve checkpoint revisions to commits (models.lock.json)")
    lsub = p.add_subparsers(dest="lock_command", required=True)
    r = lsub.add_parser("refresh", help="ask the Hub what each catalog revision points at (every catalog entry's "
                                        "checkpoints, with their config.json's planner facts); rewrite the lock")
    r.add_argument("--groups", default="all,gx10", help="group data to read (default: all,gx10 = a real box; the "
                                                        "simulated Spark's: all,gx10,sim)")
    r.add_argument("--endpoint", help="Hub endpoint (default: the HF_ENDPOINT setting)")
    r.set_defaults(func=_cmd_refresh)
    s = lsub.add_parser("show", help="print the lock")
    s.add_argument("--groups", help="group data to read (default: the configured box)")
    s.set_defaults(func=_cmd_show)
