"""`python -m sparkctl secrets rotate|finish|status`: open and close a secret's rotation window (docs/operating.md
"Rotating a secret"). Each prints what the next deploy will do; none reaches a host."""

from __future__ import annotations

import argparse

from sparkctl.check.load import typed
from sparkctl.config import groupdata, rotation

DEPLOY = "pyinfra -y inventory.py deploy.py"


def _cfg(args):
    return typed(groupdata.load(args.groups.split(",") if args.groups else None))


def _cmd_rotate(args) -> int:
    cfg = _cfg(args)
    if args.secret == rotation.TLS:
        for leaf in rotation.reissue_leaves(cfg):
            print(f"reissued {leaf} (same CA, same names, a new key)")
        print(f"next: {DEPLOY} (each nginx reloads gracefully with its new leaf; clients trust the CA, not the leaf)")
        return 0
    path = rotation.open_window(cfg, args.secret)
    print(f"rotation of {args.secret} open: the new one is in {path} (0600)")
    print(f"next: {DEPLOY}: {rotation.ROTATABLE[args.secret].window}")
    if args.secret != "vrrp_password":
        print(f"then switch every client to the new one, then: python -m sparkctl secrets finish {args.secret}")
    return 0


def _cmd_finish(args) -> int:
    path = rotation.finish_window(_cfg(args), args.secret)
    print(f"rotation of {args.secret} finished: {path} holds the new one, the old one is gone from this machine")
    what = ("every gateway's keepalived takes the new password in the same step" if args.secret == "vrrp_password"
            else "every box and gateway drops the old one (it is refused with 401 from then on)")
    print(f"next: {DEPLOY}: {what}")
    return 0


def _cmd_status(args) -> int:
    for name, is_open in rotation.state(_cfg(args)).items():
        print(f"{name:14} {'OPEN: the deploy accepts the current and the new one' if is_open else 'closed'}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("secrets", help="rotate a secret without a refused request: open a window, deploy, finish")
    ssub = p.add_subparsers(dest="secrets_command", required=True)
    for name, func, what, choices in (
            ("rotate", _cmd_rotate, "write a new secret beside the current one (opens its window; tls: reissue the "
                                    "generated leaves)", rotation.NAMES),
            ("finish", _cmd_finish, "make the new secret the only one (closes its window)", tuple(rotation.ROTATABLE))):
        c = ssub.add_parser(name, help=what)
        c.add_argument("secret", choices=choices)
        c.add_argument("--groups", help="group data to read (default: the configured box; the simulated Spark's: "
                                        "all,gx10,sim)")
        c.set_defaults(func=func)
    s = ssub.add_parser("status", help="which secrets have a rotation window open")
    s.add_argument("--groups", help="group data to read (default: the configured box)")
    s.set_defaults(func=_cmd_status)
