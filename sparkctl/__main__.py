"""`python -m sparkctl <command>`: the toolkit's command line.

Each command lives in its own module exposing `add_parser(subparsers)`, which registers the command and sets
`func` (called with the parsed namespace; its return value is the exit status).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sparkctl.errors import SparkctlError

# module -> what it adds; imported lazily so one broken command never takes the others down
COMMAND_MODULES = [
    "sparkctl.sim.cli",  # sim up|down|status|ssh|exec|reboot
    "sparkctl.lock.cli",  # lock refresh|show
    "sparkctl.plan.cli",  # plan: the capacity planner's table, then the fleet (sparkctl.plan.capacity underneath)
    "sparkctl.measure.cli",  # bench, bench compare, niah, evals compare
    "sparkctl.check.cli",  # check: the deploy's whole validation, offline
    "sparkctl.status.cli",  # status: every box and service at a glance
    "sparkctl.rehearse.cli",  # rehearse: the first hour on a box, one report (docs/first-gx10.md)
    "sparkctl.rotation.cli",  # secrets rotate|finish|status: a secret's rotation window (docs/operating.md)
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sparkctl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not (exc.name and name.startswith(exc.name)):  # a real import error inside the module: surface it
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SparkctlError as exc:
        print(f"sparkctl: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
